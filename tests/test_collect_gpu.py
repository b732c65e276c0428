"""GPU metrics: the replay backend (the stand-in for hardware this machine lacks), the NVML
gateway's error path, and the absence of any GPU."""

from __future__ import annotations

import json
import logging
import os
import runpy
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collect_helpers import StoreSink, start_root
from tunescope._once import Once
from tunescope.collect import (
    DEVICE_WIDE_NOTE,
    REPLAY_ENV,
    NvmlBackend,
    ReplayBackend,
    Sampler,
    builtin_fixtures,
    load_replay,
    open_gpu_backend,
)
from tunescope.collect._gpuprobe import parse_visible_devices
from tunescope.collect._once import LOGGER_NAME
from tunescope.collect._replay import FIXTURE_DIR, dump_replay
from tunescope.errors import CollectError
from tunescope.metrics import metric
from tunescope.store import Store, open_store


def f32(x: float) -> float:
    """What the store gives back for a written value."""
    return float(np.float32(x))


class Clock:
    """Replay time under the test's control (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = open_store(sqlite_url)
    yield s
    s.close()


@pytest.fixture
def trial(store: Store) -> int:
    return store.create_trial(store.ensure_run("r").id).id


@pytest.fixture
def root() -> Iterator[subprocess.Popen[bytes]]:
    p = start_root()
    yield p
    p.kill()
    p.wait()


def gpu_series(store: Store, trial: int) -> dict[tuple[str, str | None], tuple[Any, Any, Any]]:
    """(metric, device) -> (times, values, note) of the trial's gpu.* series."""
    out = {}
    for info in store.list_series(trial):
        if info.metric.startswith("gpu."):
            t, v = store.read_samples(info.id)
            out[(info.metric, info.device)] = (t, v, info.note)
    return out


def run_replay(store: Store, trial: int, pid: int, name: str, times: list[float]) -> Any:
    """Sample a replay in-process at the given replay times; returns the replay document."""
    clock = Clock()
    backend = ReplayBackend.open(name, root_pid=pid, clock=clock)
    sampler = Sampler(
        StoreSink(store), store.get_trial(trial).key, pid, 0.2, gpu=backend, log=Once(LOGGER_NAME)
    )
    for t in times:
        clock.now = t
        sampler.sample()
        time.sleep(0.06)  # past the final-sample gap, so finish() samples once more
    sampler.finish()
    return load_replay(name)[1]


# ---------------------------------------------------------------------- the fixtures
def test_builtin_fixtures_are_synthesized_and_say_so() -> None:
    assert set(builtin_fixtures()) >= {
        "h200_sft",
        "busy_low_sm",
        "a100_no_gpm",
        "shared_h100",
        "mig_h100",
        "node_a_8gpu",
        "node_b_8gpu_slow",
    }
    readme = (FIXTURE_DIR / "README.md").read_text()
    assert "SYNTHESIZED" in readme and "record_nvml" in readme
    for name in builtin_fixtures():
        _, doc = load_replay(name)
        assert doc["synthesized"] is True
        assert "SYNTHESIZED" in doc["description"]
        assert doc["devices"]
        assert f"| `{name}` |" in readme, f"fixture {name} has no row in the README"


def test_fixture_generator_is_deterministic(tmp_path: Path) -> None:
    """bench/make_replay_fixtures.py (a developer's tool, outside the package) makes every
    shipped fixture, byte for byte."""
    script = Path(__file__).resolve().parents[1] / "bench" / "make_replay_fixtures.py"
    make = runpy.run_path(str(script))

    assert make["main"]([str(tmp_path)]) == 0
    assert set(make["FIXTURES"]) == set(builtin_fixtures())
    for name in make["FIXTURES"]:
        shipped, _ = load_replay(name)
        assert (tmp_path / f"{name}.json").read_bytes() == shipped.read_bytes()


# ---------------------------------------------------------------------- (h) replay → store
def test_sampler_process_records_the_replayed_gpus(
    sqlite_url: str, store: Store, trial: int, root: subprocess.Popen[bytes]
) -> None:
    """$TUNESCOPE_GPU_REPLAY=h200_sft in the real sampler process: both GPUs (one DDP rank
    each, mapped onto the watched process) land in the store in base units."""
    env = dict(os.environ, **{REPLAY_ENV: "h200_sft", "TUNESCOPE_STORE": sqlite_url})
    s = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tunescope.collect",
            "--trial",
            str(trial),
            "--pid",
            str(root.pid),
            "--interval",
            "0.2",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert s.stdout is not None and s.stdin is not None
    assert s.stdout.readline() == b"ready\n"
    time.sleep(1.2)
    out, err = s.communicate(b"stop\n", timeout=30)
    assert s.returncode == 0 and out == b""
    assert b"replayed from" in err and b"synthesized" in err
    _, doc = load_replay("h200_sft")
    frames = doc["frames"][:20]
    got = gpu_series(store, trial)
    assert {d for _, d in got} == {"0", "1"}
    assert {s.host for s in store.list_series(trial)} == {socket.gethostname()}
    gpus = store.hosts(trial)[socket.gethostname()]["gpus"]
    assert [(g["index"], g["name"]) for g in gpus] == [
        (i, d["name"]) for i, d in enumerate(doc["devices"])
    ]
    for dev in (0, 1):
        d = str(dev)
        raw = [f["devices"][dev] for f in frames]
        header = doc["devices"][dev]
        power = {f32(r["power_mw"] / 1000) for r in raw}
        proc_mem = {f32(r["processes"][0][1]) for r in raw}
        assert set(got[("gpu.power", d)][1].tolist()) <= power  # W, not mW
        assert set(got[("gpu.mem", d)][1].tolist()) <= proc_mem  # bytes of the trial's rank
        assert got[("gpu.mem", d)][2] is None  # per-process, not flagged
        assert set(got[("gpu.mem.total", d)][1].tolist()) == {f32(header["memory_total"])}
        assert set(got[("gpu.power.limit", d)][1].tolist()) == {700.0}
        assert set(got[("gpu.util", d)][1].tolist()) <= {f32(r["util"]) for r in raw}
        energy = got[("gpu.energy", d)][1]
        assert energy[0] == 0.0 and np.all(np.diff(energy) >= 0)  # J since the first sample
        assert ("gpu.sm_active", d) in got  # GPM from the second sample on
    for metric_key, _ in got:
        assert metric(metric_key).scope == "gpu"
    # the first sample comes before the GPU library is opened: host values only
    (procs,) = store.list_series(trial, "cpu.procs")
    t_host, _ = store.read_samples(procs.id)
    assert min(float(t[0]) for t, _, _ in got.values()) > float(t_host[0])


def test_busy_low_sm_shows_high_utilization_and_low_sm_activity(
    store: Store, trial: int, root: subprocess.Popen[bytes]
) -> None:
    """The trial runs on GPU 0 only; GPU 1's foreign job is not attributed. Utilization ~95%
    while SM activity ~30%: the 'busy but idle' signature."""
    doc = run_replay(store, trial, root.pid, "busy_low_sm", [10, 11, 12, 20.5, 30, 40])
    got = gpu_series(store, trial)
    assert {d for _, d in got} == {"0"}
    util = got[("gpu.util", "0")][1]
    sm = got[("gpu.sm_active", "0")][1]
    assert util.min() >= 85 and sm.max() <= 40
    assert len(sm) == 6  # 7 samples (6 + final); GPM needs two for its first value
    assert ("gpu.tensor_active", "0") in got and ("gpu.dram_active", "0") in got
    frame = doc["frames"][20]["devices"][0]  # t = 20.5 holds the frame of t = 20
    t_util = got[("gpu.util", "0")][0]
    assert util[3] == f32(frame["util"])
    assert got[("gpu.power", "0")][1][3] == f32(frame["power_mw"] / 1000)
    assert got[("gpu.mem", "0")][1][3] == f32(frame["processes"][0][1])
    assert got[("gpu.temp", "0")][1][3] == f32(frame["temp"])
    assert got[("gpu.clock.sm", "0")][1][3] == f32(frame["clock_sm"])
    e10 = doc["frames"][10]["devices"][0]["energy_mj"]
    assert got[("gpu.energy", "0")][1][3] == f32((frame["energy_mj"] - e10) / 1000)
    assert len(t_util) == 7  # six samples and the final one


def test_no_per_process_info_flags_gpu_mem_and_follows_cuda_visible_devices(
    store: Store, trial: int
) -> None:
    root = start_root({"CUDA_VISIBLE_DEVICES": "1"})
    try:
        doc = run_replay(store, trial, root.pid, "a100_no_gpm", [30, 31, 32])
    finally:
        root.kill()
        root.wait()
    got = gpu_series(store, trial)
    assert {d for _, d in got} == {"1"}
    # where the trial ran: the GPU its CUDA_VISIBLE_DEVICES names, as the recording has it
    here = store.hosts(trial)[socket.gethostname()]
    header = doc["devices"][1]
    assert here["gpus"] == [{"index": 1, "uuid": header["uuid"], "name": header["name"]}]
    assert here["cuda_visible_devices"] == "1" and here["hostname"] == socket.gethostname()
    _, mem, note = got[("gpu.mem", "1")]
    assert note == DEVICE_WIDE_NOTE
    assert mem[0] == f32(doc["frames"][30]["devices"][1]["mem_used"])  # the device's used
    assert not any(m.startswith(("gpu.sm_active", "gpu.tensor_active")) for m, _ in got)
    assert ("gpu.power.limit", "1") in got and got[("gpu.power.limit", "1")][1][0] == 400.0


def test_no_per_process_info_and_no_cuda_visible_devices_takes_every_gpu(
    store: Store, trial: int, root: subprocess.Popen[bytes]
) -> None:
    run_replay(store, trial, root.pid, "a100_no_gpm", [30, 31])
    got = gpu_series(store, trial)
    assert {d for _, d in got} == {"0", "1"}
    assert {note for (m, _), (_, _, note) in got.items() if m == "gpu.mem"} == {DEVICE_WIDE_NOTE}


def test_pids_from_another_namespace_fall_back_to_device_wide(
    tmp_path: Path,
    store: Store,
    trial: int,
    root: subprocess.Popen[bytes],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Processes listed on the GPUs, none of them here (a container seeing host pids): the
    memory is recorded device-wide and flagged, said once."""
    _, doc = load_replay("busy_low_sm")
    doc = dict(doc, trial_pids=[])  # every recorded pid is foreign now
    path = dump_replay(doc, tmp_path / "foreign.json.gz")
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    run_replay(store, trial, root.pid, str(path), [10, 11, 12])
    got = gpu_series(store, trial)
    assert {d for _, d in got} == {"0", "1"}
    assert got[("gpu.mem", "0")][2] == DEVICE_WIDE_NOTE
    said = [r for r in caplog.records if "another pid namespace" in r.getMessage()]
    assert len(said) == 1


def test_gpu_selection_is_sticky(
    store: Store, trial: int, root: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """A GPU the trial used stays recorded after its processes leave it (gpu.mem drops to 0)."""
    _, doc = load_replay("busy_low_sm")
    frames = [dict(f) for f in doc["frames"][:3]]
    for f in frames[1:]:
        f["devices"] = [dict(f["devices"][0], processes=[]), f["devices"][1]]
    path = dump_replay(dict(doc, frames=frames), tmp_path / "leave.json")
    run_replay(store, trial, root.pid, str(path), [0, 1, 2])
    got = gpu_series(store, trial)
    assert {d for _, d in got} == {"0"}
    assert got[("gpu.mem", "0")][1].tolist()[-2:] == [0.0, 0.0]


def test_replay_backend_protocol(root: subprocess.Popen[bytes]) -> None:
    clock = Clock()
    b = ReplayBackend.open("busy_low_sm", root_pid=root.pid, clock=clock)
    _, doc = load_replay("busy_low_sm")
    assert b.device_count() == 2
    info = b.device_info(0)
    assert info.power_limit == 700.0 and info.gpm_supported
    assert info.memory_total == doc["devices"][0]["memory_total"]
    assert b.processes(0) == [(root.pid, doc["frames"][0]["devices"][0]["processes"][0][1])]
    assert b.processes(1) == [(-7777, doc["frames"][0]["devices"][1]["processes"][0][1])]
    assert b.gpm(0) is None  # first call opens the interval, as with NVML
    clock.now = 1e6  # past the end: the last frame is held
    last = doc["frames"][-1]["devices"][0]
    assert b.read(0).power == last["power_mw"] / 1000
    assert b.gpm(0) == last["gpm"]


def test_replay_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(CollectError, match=r"builtin: .*h200_sft"):
        ReplayBackend.open("no_such_fixture")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(CollectError, match="not a tunescope NVML replay"):
        load_replay(bad)
    bad.write_text("{")
    with pytest.raises(CollectError, match="cannot read"):
        load_replay(bad)


def test_cuda_visible_devices_parsing() -> None:
    _, doc = load_replay("h200_sft")
    infos = [ReplayBackend(doc).device_info(i) for i in range(2)]
    assert parse_visible_devices(None, infos) is None
    assert parse_visible_devices("1", infos) == {1}
    assert parse_visible_devices("0,1", infos) == {0, 1}
    assert parse_visible_devices(infos[1].uuid[:12], infos) == {1}
    assert parse_visible_devices("", infos) == set()
    assert parse_visible_devices("-1,0", infos) == set()  # CUDA stops at the first bad one
    assert parse_visible_devices("0,7,1", infos) == {0}


# ---------------------------------------------------------------------- (i) no NVML at all
def test_without_pynvml_gpu_metrics_are_absent_said_once(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    store: Store,
    trial: int,
    root: subprocess.Popen[bytes],
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    monkeypatch.delenv(REPLAY_ENV, raising=False)
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    log = Once(LOGGER_NAME)
    backend = open_gpu_backend(root.pid, log=log)
    assert backend is None
    sampler = Sampler(
        StoreSink(store), store.get_trial(trial).key, root.pid, 0.2, gpu=backend, log=log
    )
    for _ in range(4):
        sampler.sample()
        time.sleep(0.06)
    sampler.finish()
    ours = [r for r in caplog.records if r.name.startswith(LOGGER_NAME)]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert "no GPU metrics" in ours[0].getMessage() and "pynvml" in ours[0].getMessage()
    metrics = {s.metric for s in store.list_series(trial)}
    assert not any(m.startswith("gpu.") for m in metrics)
    assert metrics == {
        "cpu.util",
        "cpu.capacity",
        "cpu.mem",
        "cpu.mem.limit",
        "cpu.procs",
        "host.cpu.util",
        "host.mem.used",
        "disk.read",
        "disk.write",
        "net.recv",
        "net.sent",
    }
    (procs,) = store.list_series(trial, "cpu.procs")
    assert store.read_samples(procs.id)[1].tolist() == [1.0] * 5


def test_nvml_gateway_returns_defaults_and_logs_each_function_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real pynvml, never initialised (as with no driver): every call fails inside the
    gateway, which answers the default and says so once per function."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    b = NvmlBackend(Once(LOGGER_NAME), nvml=pynvml, init=False)
    assert b._query("nvmlDeviceGetCount", default=0) == 0
    assert b.device_count() == 0
    first = b.read(0)
    assert first.util is None and first.power is None and first.energy_mj is None
    assert b.processes(0) is None
    n = len(caplog.records)
    for _ in range(5):
        b.read(0)
        b.processes(0)
        b.device_count()
    assert len(caplog.records) == n  # nothing more: once per function, never per sample
    assert b._query("nvmlNoSuchFunction", default="d") == "d"
    assert b._query("nvmlNoSuchFunction", default="d") == "d"
    assert len(caplog.records) == n + 1
    names = [r.getMessage().split()[1] for r in caplog.records[:n]]
    assert len(names) == len(set(names))


def test_nvml_without_a_driver_is_one_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present: this tests the machine without one")
    monkeypatch.delenv(REPLAY_ENV, raising=False)
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    assert open_gpu_backend(os.getpid(), log=Once(LOGGER_NAME)) is None
    assert len(caplog.records) == 1
    assert "NVML cannot start" in caplog.records[0].getMessage()


def test_record_nvml_without_a_gpu_fails_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunescope.collect.record_nvml",
            str(out),
            "--seconds",
            "1",
            "--interval",
            "0.5",
        ],
        capture_output=True,
        timeout=60,
    )
    if r.returncode == 0:  # a machine with a GPU: the recording must be a valid replay
        _, doc = load_replay(out)
        assert doc["synthesized"] is False and len(doc["frames"]) >= 2
        return
    assert r.returncode == 1
    assert r.stdout == b""
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("record_nvml: cannot record:")
    assert not out.exists()
