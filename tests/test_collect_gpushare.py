"""Shared GPUs and MIG: each trial packed on one GPU gets its own utilization (gpu.proc_util)
and memory, a MIG instance is a device of its own, and the NVML calls behind both behave on
the driver's answers. GPU hardware is simulated: the replay fixtures (synthesized, see
tunescope/collect/replay/README.md) and a stand-in pynvml module that answers as the driver
does (the real pynvml's error types and sample structures)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from collect_helpers import StoreSink, start_root
from tunescope._once import Once
from tunescope.collect import DEVICE_WIDE_NOTE, REPLAY_ENV, NvmlBackend, ReplayBackend, Sampler
from tunescope.collect._gpuprobe import parse_visible_devices
from tunescope.collect._gpushare import ProcessUtilReader, split_samples
from tunescope.collect._once import LOGGER_NAME
from tunescope.collect._replay import dump_replay, load_replay
from tunescope.collect.record_nvml import record
from tunescope.errors import CollectError
from tunescope.store import Store, open_store

MIB = 1024 * 1024


def f32(x: float) -> float:
    return float(np.float32(x))


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = open_store(sqlite_url)
    yield s
    s.close()


@pytest.fixture
def roots() -> Iterator[list[int]]:
    """Two live processes: the roots of two trials on one machine."""
    ps = [start_root(), start_root()]
    yield [p.pid for p in ps]
    for p in ps:
        p.kill()
        p.wait()


class Clock:
    """Replay time under the test's control (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay(source: str | dict[str, Any], root: int, trial: str | None = None) -> ReplayBackend:
    """A replay backend whose clock :func:`sample` moves."""
    if isinstance(source, str):
        return ReplayBackend.open(source, root_pid=root, clock=Clock())
    return ReplayBackend(source, root_pid=root, clock=Clock(), trial=trial)


def sample(store: Store, name: str, backend: ReplayBackend, root: int, ts: list[float]) -> int:
    """A trial sampled by the real sampler over ``backend`` (made by :func:`replay`) at
    replay times ``ts``."""
    run = store.ensure_run("gpushare")
    tr = store.create_trial(run.id, name, {}, interval=1.0)
    clock = backend._clock
    assert isinstance(clock, Clock)
    base = time.time()
    sampler = Sampler(
        StoreSink(store),
        tr.key,
        root,
        1.0,
        gpu=backend,
        log=Once(LOGGER_NAME),
        wall=lambda: base + clock.now,
        mono=lambda: clock.now,
    )
    for t in ts:
        clock.now = t
        sampler.sample()
    sampler.flush()
    return tr.id


def series(store: Store, trial: int) -> dict[tuple[str, str | None], tuple[Any, str | None]]:
    out = {}
    for info in store.list_series(trial):
        if info.metric.startswith("gpu."):
            out[(info.metric, info.device)] = (store.read_samples(info.id)[1], info.note)
    return out


def own(frame: dict[str, Any], key: str, pids: set[int]) -> float:
    return sum(v for pid, v in frame[key] if pid in pids)


# ---------------------------------------------------------------------- shared GPUs
def test_two_trials_on_one_gpu_each_get_their_own_utilization_and_memory(
    store: Store, roots: list[int]
) -> None:
    doc = load_replay("shared_h100")[1]
    ts = [t + 0.5 for t in range(10, 20)]
    a = sample(store, "a", replay("shared_h100#a", roots[0]), roots[0], ts)
    b = sample(store, "b", replay("shared_h100#b", roots[1]), roots[1], ts)
    got_a, got_b = series(store, a), series(store, b)
    frames = [doc["frames"][int(t)]["devices"][0] for t in ts]
    for got, pids in ((got_a, {3101}), (got_b, {3202, 3203})):
        assert {d for _, d in got} == {"0"}
        util, note = got[("gpu.proc_util", "0")]
        assert util.tolist() == [f32(own(f, "process_util", pids)) for f in frames]
        assert got[("gpu.mem", "0")][0].tolist() == [f32(own(f, "processes", pids)) for f in frames]
        assert note is None and got[("gpu.mem", "0")][1] is None
        # the device-wide utilization is the same for both: the whole GPU's
        assert got[("gpu.util", "0")][0].tolist() == [f32(f["util"]) for f in frames]
    pa, pb = got_a[("gpu.proc_util", "0")][0], got_b[("gpu.proc_util", "0")][0]
    assert pa.mean() < 25 < pb.mean()  # a is small, b is not
    assert np.all(pa + pb <= got_a[("gpu.util", "0")][0] + 1)  # within the device's (rounded)


def test_two_sampler_processes_over_one_shared_gpu(sqlite_url: str, store: Store) -> None:
    """The real sampler processes, one per trial, each told which recorded trial it is
    (``$TUNESCOPE_GPU_REPLAY=shared_h100#a`` / ``#b``): each stores only its own share."""
    doc = load_replay("shared_h100")[1]
    run = store.ensure_run("shared")
    trials = [store.create_trial(run.id, n).id for n in ("a", "b")]
    roots = [start_root(), start_root()]
    samplers = []
    try:
        for name, trial, root in zip(("a", "b"), trials, roots, strict=True):
            env = dict(
                os.environ, **{REPLAY_ENV: f"shared_h100#{name}", "TUNESCOPE_STORE": sqlite_url}
            )
            cmd = [sys.executable, "-m", "tunescope.collect", "--trial", str(trial)]
            cmd += ["--pid", str(root.pid), "--interval", "0.2"]
            s = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
            assert s.stdout is not None and s.stdout.readline() == b"ready\n"
            samplers.append(s)
        time.sleep(1.0)
        for s in samplers:
            out, err = s.communicate(b"stop\n", timeout=30)
            assert s.returncode == 0 and out == b"", err
    finally:
        for p in roots:
            p.kill()
            p.wait()
    frames = [f["devices"][0] for f in doc["frames"][:15]]
    for trial, pids in zip(trials, ({3101}, {3202, 3203}), strict=True):
        got = series(store, trial)
        util = got[("gpu.proc_util", "0")][0]
        mem = got[("gpu.mem", "0")][0]
        assert len(util) >= 3
        assert set(util.tolist()) <= {f32(own(f, "process_util", pids)) for f in frames}
        assert set(mem.tolist()) <= {f32(own(f, "processes", pids)) for f in frames}
        assert max(mem.tolist()) > 1000 * MIB  # weights loaded: not the other trial's


def test_without_per_process_utilization_there_is_no_proc_util(
    store: Store, roots: list[int]
) -> None:
    doc = copy.deepcopy(load_replay("shared_h100")[1])
    for f in doc["frames"]:
        del f["devices"][0]["process_util"]  # files written before the field existed
    a = sample(store, "a", replay(doc, roots[0], "a"), roots[0], [10, 11])
    got = series(store, a)
    assert ("gpu.util", "0") in got and ("gpu.mem", "0") in got
    assert ("gpu.proc_util", "0") not in got


def test_a_replay_trial_that_does_not_exist_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CollectError, match=r"no trial 'c' \(trials: a, b\)"):
        ReplayBackend.open("shared_h100#c")
    with pytest.raises(CollectError, match="no trial 'a'"):
        ReplayBackend.open("h200_sft#a")
    doc = copy.deepcopy(load_replay("shared_h100")[1])
    doc["trials"] = {"a": "3101"}
    bad = dump_replay(doc, tmp_path / "bad.json")
    with pytest.raises(CollectError, match="trials must map"):
        load_replay(bad)


# ---------------------------------------------------------------------- MIG
def test_a_mig_instance_is_a_device_of_its_own(store: Store, roots: list[int]) -> None:
    doc = load_replay("mig_h100")[1]
    ts = [t + 0.5 for t in range(5, 12)]
    trial = sample(store, "mig", replay(doc, roots[0]), roots[0], ts)
    got = series(store, trial)
    assert {d for _, d in got} == {"0/mig1"}  # not the GPU, not the other instances
    frames = [doc["frames"][int(t)]["devices"] for t in ts]
    mem = got[("gpu.mem", "0/mig1")]
    assert mem[0].tolist() == [f32(f[2]["processes"][0][1]) for f in frames] and mem[1] is None
    assert got[("gpu.mem.used", "0/mig1")][0].tolist() == [f32(f[2]["mem_used"]) for f in frames]
    assert set(got[("gpu.mem.total", "0/mig1")][0].tolist()) == {f32(20096 * MIB)}
    assert got[("gpu.sm_active", "0/mig1")][0].tolist() == [
        f32(f[2]["gpm"]["sm"]) for f in frames[1:]
    ]  # GPM of the instance, from the second sample
    assert got[("gpu.temp", "0/mig1")][0].tolist() == [f32(f[0]["temp"]) for f in frames]
    for absent in ("gpu.util", "gpu.mem_bw.util", "gpu.proc_util", "gpu.power", "gpu.energy"):
        assert (absent, "0/mig1") not in got, absent


def test_cuda_visible_devices_names_a_mig_instance(store: Store) -> None:
    doc = copy.deepcopy(load_replay("mig_h100")[1])
    doc["processes_supported"] = False  # as in containers: the MIG UUID decides
    mig1 = doc["devices"][2]["uuid"]
    for cvd, devices in ((mig1, {"0/mig1"}), ("0", {"0/mig0", "0/mig1", "0/mig2"})):
        root = start_root({"CUDA_VISIBLE_DEVICES": cvd})
        try:
            trial = sample(store, cvd, replay(doc, root.pid), root.pid, [10.5])
        finally:
            root.kill()
            root.wait()
        got = series(store, trial)
        assert {d for _, d in got} == devices
        if devices == {"0/mig1"}:
            mem, note = got[("gpu.mem", "0/mig1")]
            assert note == DEVICE_WIDE_NOTE
            assert mem.tolist() == [f32(doc["frames"][10]["devices"][2]["mem_used"])]


def test_cuda_visible_devices_parsing_with_mig() -> None:
    backend = ReplayBackend(load_replay("mig_h100")[1])
    infos = [backend.device_info(i) for i in range(backend.device_count())]
    assert [i.device for i in infos] == ["0", "0/mig0", "0/mig1", "0/mig2"]
    assert infos[0].partitioned and infos[2].parent == 0 and infos[2].mig == 1
    assert parse_visible_devices("0", infos) == {1, 2, 3}
    assert parse_visible_devices(infos[0].uuid[:12], infos) == {1, 2, 3}
    assert parse_visible_devices(infos[2].uuid, infos) == {2}
    assert parse_visible_devices(f"{infos[3].uuid},{infos[1].uuid}", infos) == {1, 3}
    assert parse_visible_devices("MIG-4f5e", infos) == set()  # ambiguous: names none
    assert parse_visible_devices("1", infos) == set()  # no GPU 1


# ---------------------------------------------------------------------- NVML answers
def _err(pynvml: Any, code: int) -> Exception:
    e: Exception = pynvml.NVMLError(code)
    return e


class FakeNvml:
    """NVML as the driver answers on one H100 in MIG mode (instances 0 and 2, GPU-instance
    ids 1 and 13) and one A100 without MIG, through the real pynvml's error types."""

    def __init__(self, pynvml: Any, new_call: bool = True) -> None:
        self.nv = pynvml
        self.calls: list[tuple[Any, ...]] = []
        self.samples: dict[str, Any] = {}
        self.NVML_TEMPERATURE_GPU = 0
        self.NVML_CLOCK_SM = 1
        if not new_call:
            self.nvmlDeviceGetProcessesUtilizationInfo = None  # hasattr, but not callable

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"gpu{i}"

    def nvmlDeviceGetMigMode(self, h: str) -> list[int]:
        if h == "gpu0":
            return [1, 1]
        raise _err(self.nv, self.nv.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetMaxMigDeviceCount(self, h: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: str, k: int) -> str:
        if k in (0, 2):
            return f"{h}/mig{k}"
        raise _err(self.nv, self.nv.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceId(self, h: str) -> int:
        return {"gpu0/mig0": 1, "gpu0/mig2": 13}[h]

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H100 80GB HBM3 MIG 3g.40gb" if "mig" in h else b"NVIDIA GPU"

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return f"MIG-{h}" if "mig" in h else f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        total = {"gpu0/mig0": 40320 * MIB, "gpu0/mig2": 9856 * MIB}.get(h, 81559 * MIB)
        return SimpleNamespace(total=total, used=total // 4, free=total - total // 4)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        if "mig" in h:
            raise _err(self.nv, self.nv.NVML_ERROR_NOT_SUPPORTED)
        return 700_000

    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        return SimpleNamespace(isSupportedDevice=1 if h == "gpu0" else 0)

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        if h == "gpu0" or "mig" in h:  # no utilization in MIG mode
            raise _err(self.nv, self.nv.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=71, memory=30)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 333_000

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 61 if h == "gpu0" else 40

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return 1755

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return 4

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        return 10**9

    def nvmlGpmSampleAlloc(self) -> object:
        return object()

    def nvmlGpmSampleGet(self, h: str, sample: object) -> object:
        self.calls.append(("gpm", h))
        return sample

    def nvmlGpmMigSampleGet(self, h: str, gi: int, sample: object) -> object:
        self.calls.append(("gpm-mig", h, gi))
        return sample

    def _util(self, name: str, h: str, since: int) -> list[Any]:
        self.calls.append((name, h, since))
        got = [s for s in self.samples.get(h, []) if s.timeStamp > since]
        if not got:
            raise _err(self.nv, self.nv.NVML_ERROR_NOT_FOUND)
        return got

    def nvmlDeviceGetProcessUtilization(self, h: str, since: int) -> list[Any]:
        return self._util("old", h, since)


class FakeNvmlNewCall(FakeNvml):
    def nvmlDeviceGetProcessesUtilizationInfo(self, h: str, since: int) -> list[Any]:
        return self._util("new", h, since)


def util_sample(pynvml: Any, pid: int, ts: int, sm: int) -> Any:
    s = pynvml.c_nvmlProcessUtilizationSample_t()
    s.pid, s.timeStamp, s.smUtil = pid, ts, sm
    return s


def test_nvml_offers_mig_instances_as_devices() -> None:
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    fake = FakeNvmlNewCall(pynvml)
    b = NvmlBackend(Once(LOGGER_NAME), nvml=fake, init=False)
    assert b.device_count() == 4  # two GPUs, then GPU 0's two instances
    infos = [b.device_info(i) for i in range(4)]
    assert [i.device for i in infos] == ["0", "1", "0/mig0", "0/mig2"]
    assert infos[0].partitioned and not infos[1].partitioned
    mig = infos[3]
    assert (mig.parent, mig.mig, mig.uuid) == (0, 2, "MIG-gpu0/mig2")
    assert mig.memory_total == 9856 * MIB and mig.power_limit is None and mig.gpm_supported
    r = b.read(3)
    assert r.mem_used == 9856 * MIB // 4  # the instance's own memory
    assert r.temp == 61 and r.clock_sm == 1755 and r.throttle == 4  # its GPU's
    assert r.util is None and r.power is None and r.energy_mj is None
    assert b.read(1).util == 71 and b.read(1).power == 333.0
    assert b.gpm(3) is None  # the first sample opens the interval
    assert fake.calls[-1] == ("gpm-mig", "gpu0", 13)  # through the GPU and its GI id
    assert b.process_util(3) is None  # NVML has none per MIG instance
    assert not [c for c in fake.calls if c[0] in ("new", "old")]


def test_process_utilization_since_the_last_read() -> None:
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    fake = FakeNvmlNewCall(pynvml)
    b = NvmlBackend(Once(LOGGER_NAME), nvml=fake, init=False)
    fake.samples["gpu1"] = [util_sample(pynvml, 7, 100, 90)]
    assert b.process_util(1) is None  # the first read only marks where the next starts
    fake.samples["gpu1"] += [
        util_sample(pynvml, 7, 200, 50),
        util_sample(pynvml, 8, 200, 20),
        util_sample(pynvml, 7, 300, 30),
    ]
    assert b.process_util(1) == [(7, 40.0), (8, 10.0)]  # over the 2 sample times since 100
    assert fake.calls[-1] == ("new", "gpu1", 100)
    assert b.process_util(1) == []  # NotFound: nothing ran since 300
    assert fake.calls[-1] == ("new", "gpu1", 300)


def test_process_utilization_falls_back_to_the_older_call() -> None:
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    fake = FakeNvml(pynvml, new_call=False)  # the newer call fails (an older driver)
    reader = ProcessUtilReader(NvmlBackend(Once(LOGGER_NAME), nvml=fake, init=False)._query, fake)
    fake.samples["gpu1"] = [util_sample(pynvml, 7, 10, 60)]
    assert reader.read(1, "gpu1") is None
    fake.samples["gpu1"].append(util_sample(pynvml, 7, 20, 80))
    assert reader.read(1, "gpu1") == [(7, 80.0)]
    assert [c[0] for c in fake.calls] == ["old", "old"]


def test_split_samples_leaves_out_markers_over_100() -> None:
    s = [
        SimpleNamespace(pid=1, timeStamp=5, smUtil=2**32 - 1),
        SimpleNamespace(pid=2, timeStamp=5, smUtil=12),
    ]
    assert split_samples(s) == [(2, 12.0)]
    assert split_samples([]) == []


# ---------------------------------------------------------------------- recordings
def test_record_nvml_keeps_per_process_utilization_and_mig_devices(
    tmp_path: Path, roots: list[int]
) -> None:
    """record() over a backend (here a replay) writes what the replay reads back."""
    for name in ("shared_h100#b", "mig_h100"):
        source = ReplayBackend.open(name, root_pid=roots[0])
        doc = record(source, seconds=0.2, interval=0.1, pid=roots[0])
        again = ReplayBackend(load_replay(dump_replay(doc, tmp_path / "rec.json"))[1])
        n = source.device_count()
        assert [again.device_info(i) for i in range(n)] == [source.device_info(i) for i in range(n)]
        dev = 0 if name.startswith("shared") else 2
        frame = doc["frames"][0]["devices"][dev]
        if name.startswith("shared"):
            assert frame["process_util"] == [[-3101, frame["process_util"][0][1]], [roots[0], 0.0]]
        else:
            assert frame["process_util"] is None and frame["processes"] == [[roots[0], 524288000]]
        assert doc["trial_pids"] == [roots[0]]


def test_record_nvml_stops_when_told() -> None:
    backend = ReplayBackend.open("shared_h100")
    doc = record(backend, 300.0, 0.1, stop=lambda: True)
    assert len(doc["frames"]) == 1  # one frame at least, then the stop is heard


def test_the_two_node_fixtures_show_one_slow_node() -> None:
    """node_a_8gpu / node_b_8gpu_slow: one host each, 8 GPUs each, ranks of their own; the
    slow node's GPUs are power-capped, clocked lower and busier in SM activity."""
    a, b = (load_replay(n)[1] for n in ("node_a_8gpu", "node_b_8gpu_slow"))
    assert len(a["devices"]) == len(b["devices"]) == 8
    assert not set(a["trial_pids"]) & set(b["trial_pids"])
    assert {d["uuid"] for d in a["devices"]}.isdisjoint({d["uuid"] for d in b["devices"]})

    def mean(doc: dict[str, Any], key: str) -> float:
        vals = [d[key] for f in doc["frames"][5:] for d in f["devices"]]
        return sum(vals) / len(vals)

    def sm(doc: dict[str, Any]) -> float:
        vals = [d["gpm"]["sm"] for f in doc["frames"][5:] for d in f["devices"]]
        return sum(vals) / len(vals)

    assert {d["power_limit_mw"] for d in b["devices"]} == {500_000}
    assert {d["power_limit_mw"] for d in a["devices"]} == {700_000}
    assert mean(b, "clock_sm") < 0.75 * mean(a, "clock_sm")
    assert sm(b) > sm(a) + 15
    assert all(d["throttle"] & 0x4 for f in b["frames"][5:] for d in f["devices"])
    assert abs(mean(a, "util") - mean(b, "util")) < 3  # utilization alone does not tell
