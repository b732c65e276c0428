"""GPU readings as the driver means them: the real ``pynvml`` over a driver simulated at the
ctypes level (``fake_nvml``, SYNTHETIC returns), and the GPU probe over real processes."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import psutil
import pytest

from fake_nvml import UNKNOWN, Device, FakeDriver, pynvml
from tunescope._gpuid import nvml_uuids
from tunescope._once import Once
from tunescope.collect import NvmlBackend
from tunescope.collect._gpu import GPM_MIN_GAP, expected_process_record_size
from tunescope.collect._gpuprobe import DEVICE_WIDE_NOTE, GpuProbe, cuda_to_nvml
from tunescope.collect._once import LOGGER_NAME
from tunescope.record import _flush

GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def uuids(n: int) -> list[str]:
    return [f"GPU-{uuid.UUID(int=0xABC0 + k)}" for k in range(n)]


def driver(monkeypatch: pytest.MonkeyPatch, devices: list[Device], **kw: object) -> FakeDriver:
    d = FakeDriver(devices, **kw)  # type: ignore[arg-type]
    d.install(monkeypatch)
    return d


def mine(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(LOGGER_NAME) and text in r.getMessage()
    ]


def by_key(
    values: list[tuple[str, str, float, str | None]],
) -> dict[tuple[str, str], tuple[float, str | None]]:
    return {(k, dev): (v, note) for k, dev, v, note in values}


# ---------------------------------------------------------------------- 1. process records
def test_expected_process_record_size_by_driver() -> None:
    assert expected_process_record_size("535.54.03") == 32
    assert expected_process_record_size("535.86.05") == 24
    assert expected_process_record_size("550.54.15") == 24
    assert expected_process_record_size("470.57.02") == 24
    assert expected_process_record_size("garbled") is None
    assert ctypes.sizeof(pynvml.c_nvmlProcessInfo_v3_t) == 24  # the venv's pynvml is right


class _CcRecord(pynvml._PrintableStructure):  # type: ignore[name-defined,misc]
    """The record of nvidia-ml-py 12.535.77 (usedGpuCcProtectedMemory appended)."""

    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


def test_a_pynvml_record_of_the_wrong_size_gives_unknown_not_wrong_numbers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    procs = [(1111, 1 * GIB), (2222, 2 * GIB), (3333, 3 * GIB)]
    driver(monkeypatch, [Device(compute=procs)])
    b = NvmlBackend(Once(LOGGER_NAME))
    assert b.processes(0) == [(p, float(m)) for p, m in procs]  # the right struct: right
    monkeypatch.setattr(pynvml, "c_nvmlProcessInfo_v3_t", _CcRecord)  # 12.535.77's struct
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    raw = [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
    assert raw[0] == procs[0] and raw[1:] != procs[1:]  # what such a pynvml reads: wrong
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    b = NvmlBackend(Once(LOGGER_NAME))
    for _ in range(3):
        assert b.processes(0) is None
    said = mine(caplog, "per-process GPU memory is unknown")
    assert len(said) == 1 and "32" in said[0] and "550.54.15" in said[0] and "24" in said[0]


def test_an_early_r535_driver_with_a_current_pynvml_is_unknown_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver(monkeypatch, [Device(compute=[(1, GIB), (2, GIB)])], version="535.54.03", record_size=32)
    assert NvmlBackend(Once(LOGGER_NAME)).processes(0) is None


def test_wrong_record_size_falls_back_to_device_wide_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dev = Device(compute=[(os.getpid(), 3 * GIB), (4242, GIB)])
    driver(monkeypatch, [dev], version="535.54.03", record_size=32)
    monkeypatch.setattr(pynvml, "c_nvmlProcessInfo_v3_t", pynvml.c_nvmlProcessInfo_v2_t)
    probe = GpuProbe(NvmlBackend(Once(LOGGER_NAME)), os.getpid())
    got = by_key(probe.sample({os.getpid()}))
    assert got[("gpu.mem", "0")] == (float(dev.used), DEVICE_WIDE_NOTE)


# ---------------------------------------------------------------------- 2. GPM spacing
def test_gpm_skips_a_sample_younger_than_the_minimum_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    d = driver(monkeypatch, [Device()])
    clock = Clock()
    b = NvmlBackend(Once(LOGGER_NAME), clock=clock)
    assert b.gpm(0) is None  # opens the interval
    clock.now += 0.1  # `--interval 0.1`, or the final sample
    assert b.gpm(0) is None
    assert d.calls.count("nvmlGpmSampleGet") == 1  # no second sample taken, none paired
    clock.now += GPM_MIN_GAP - 0.1 + 0.01
    assert b.gpm(0) == d.gpm_values
    assert d.calls.count("nvmlGpmSampleGet") == 2
    clock.now += 0.05
    assert b.gpm(0) is None
    clock.now += 0.2
    assert b.gpm(0) == d.gpm_values
    assert d.calls.count("nvmlGpmMetricsGet") == 2


# ---------------------------------------------------------------------- 3. failed query
def test_a_failed_process_query_is_unknown_not_zero(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    me = os.getpid()
    d = driver(monkeypatch, [Device(compute=[(me, 3 * GIB)], graphics=[])])
    b = NvmlBackend(Once(LOGGER_NAME))
    probe = GpuProbe(b, me)
    first = by_key(probe.sample({me}))
    assert first[("gpu.mem", "0")] == (3.0 * GIB, None)
    d.fail["nvmlDeviceGetComputeRunningProcesses_v3"] = UNKNOWN
    assert b.processes(0) is None  # the graphics list is empty: still not "no process"
    second = by_key(probe.sample({me}))
    assert ("gpu.mem", "0") not in second  # unknown: no sample, neither 0 nor device-wide
    assert ("gpu.util", "0") in second and probe.selected == {0}
    del d.fail["nvmlDeviceGetComputeRunningProcesses_v3"]
    assert by_key(probe.sample({me}))[("gpu.mem", "0")] == (3.0 * GIB, None)


def test_a_failed_graphics_query_keeps_the_compute_list(monkeypatch: pytest.MonkeyPatch) -> None:
    d = driver(monkeypatch, [Device(compute=[(77, GIB)], graphics=[(78, GIB)])])
    b = NvmlBackend(Once(LOGGER_NAME))
    assert b.processes(0) == [(77, float(GIB)), (78, float(GIB))]
    d.fail["nvmlDeviceGetGraphicsRunningProcesses_v3"] = UNKNOWN
    assert b.processes(0) == [(77, float(GIB))]


# ---------------------------------------------------------------------- 4, 5, 8. readings
def test_throttle_reasons_fall_back_on_drivers_before_r535(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = driver(
        monkeypatch, [Device(reasons=0x8)], missing={"nvmlDeviceGetCurrentClocksEventReasons"}
    )
    b = NvmlBackend(Once(LOGGER_NAME))
    assert b.read(0).throttle == 8.0
    assert b.read(0).throttle == 8.0
    assert d.lookups.count("nvmlDeviceGetCurrentClocksEventReasons") == 1  # not retried
    assert d.calls.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 2


def test_throttle_reasons_use_the_event_call_where_it_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = driver(monkeypatch, [Device(reasons=0x4)])
    assert NvmlBackend(Once(LOGGER_NAME)).read(0).throttle == 4.0
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in d.calls


def test_memory_used_excludes_driver_reserved_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = Device(used=10 * GIB, reserved=GIB // 2)
    driver(monkeypatch, [dev])
    b = NvmlBackend(Once(LOGGER_NAME))
    assert b.read(0).mem_used == 10.0 * GIB  # v2, as nvidia-smi shows it
    assert b.device_info(0).memory_total == float(dev.total)


def test_memory_info_v1_where_the_driver_has_no_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = Device(used=10 * GIB, reserved=GIB // 2)
    driver(monkeypatch, [dev], missing={"nvmlDeviceGetMemoryInfo_v2"})
    b = NvmlBackend(Once(LOGGER_NAME))
    assert b.read(0).mem_used == 10.5 * GIB
    assert b.device_info(0).memory_total == float(dev.total)


def test_temperature_prefers_the_versioned_call(monkeypatch: pytest.MonkeyPatch) -> None:
    d = driver(monkeypatch, [Device(temp=66)])
    assert NvmlBackend(Once(LOGGER_NAME)).read(0).temp == 66.0
    assert "nvmlDeviceGetTemperatureV" in d.calls and "nvmlDeviceGetTemperature" not in d.calls
    d2 = driver(monkeypatch, [Device(temp=59)], missing={"nvmlDeviceGetTemperatureV"})
    assert NvmlBackend(Once(LOGGER_NAME)).read(0).temp == 59.0
    assert "nvmlDeviceGetTemperature" in d2.calls


def test_utilization_averages_the_drivers_samples_since_the_last_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dev = Device(util=40, util_samples=[(1_000, 10), (2_000, 20)])
    driver(monkeypatch, [dev])
    b = NvmlBackend(Once(LOGGER_NAME))
    assert b.read(0).util == 40.0  # first read: no interval of ours, the plain rate
    dev.util_samples += [(3_000, 90), (4_000, 100)]
    assert b.read(0).util == 95.0  # only the samples since the previous read
    assert b.read(0).util == 40.0  # nothing new (NVML_ERROR_NOT_FOUND): the plain rate
    dev.util_samples += [(5_000, 60)]
    assert b.read(0).util == 60.0


def test_utilization_without_samples_is_the_plain_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    driver(monkeypatch, [Device(util=33)], missing={"nvmlDeviceGetSamples"})
    b = NvmlBackend(Once(LOGGER_NAME))
    assert [b.read(0).util for _ in range(2)] == [33.0, 33.0]


# ---------------------------------------------------------------------- 6. hidepid=2
def test_a_pid_hidden_by_hidepid_still_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's process on the GPU, /proc mounted with hidepid=2 (real, in a private
    mount namespace), the sampler an unprivileged user: the pid is not taken for another pid
    namespace, so per-process memory stays on."""
    assert os.geteuid() == 0, "this test mounts a procfs: it runs as root"
    other = subprocess.Popen(["sleep", "60"])  # root's: hidden from 'nobody' by hidepid=2
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a mount namespace of its own, then 'nobody'
        code = 1
        try:
            os.close(r)
            libc = ctypes.CDLL(None, use_errno=True)
            assert libc.unshare(0x00020000) == 0  # CLONE_NEWNS
            assert (
                libc.mount(None, b"/", None, (1 << 14) | (1 << 18), None) == 0
            )  # MS_REC|MS_PRIVATE
            where = tempfile.mkdtemp()
            os.chmod(where, 0o755)
            assert libc.mount(b"proc", where.encode(), b"proc", 0, b"hidepid=2") == 0
            os.setgid(65534)
            os.setuid(65534)
            dev = Device(compute=[(other.pid, GIB)])
            FakeDriver([dev]).install(pytest.MonkeyPatch())
            probe = GpuProbe(NvmlBackend(Once(LOGGER_NAME)), os.getpid(), proc=Path(where))
            hidden = not (Path(where) / str(other.pid)).exists()
            probe.sample({os.getpid()})
            os.write(w, f"{hidden} {probe.foreign_namespace}".encode())
            code = 0
        except BaseException as exc:  # report, never return into pytest
            os.write(w, f"error {exc!r}".encode())
        os._exit(code)
    os.close(w)
    try:
        _, status = os.waitpid(pid, 0)
        said = os.read(r, 1000).decode()
    finally:
        os.close(r)
        other.kill()
        other.wait()
    assert os.waitstatus_to_exitcode(status) == 0, said
    assert said == "True False"  # hidden from /proc, yet not taken for another namespace


def test_a_pid_that_is_gone_is_not_taken_to_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    with pytest.raises(OSError) as err:
        os.kill(p.pid, 0)
    assert err.value.errno == errno.ESRCH
    driver(monkeypatch, [Device(compute=[(p.pid, GIB)])])
    probe = GpuProbe(NvmlBackend(Once(LOGGER_NAME)), os.getpid())
    probe.sample({os.getpid()})
    assert probe.foreign_namespace


# ---------------------------------------------------------------------- 7. CUDA ↔ NVML
def test_cuda_ordinals_map_to_nvml_indices_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = uuids(3)
    driver(monkeypatch, [Device(uuid=u) for u in ids])
    b = NvmlBackend(Once(LOGGER_NAME))
    infos = [b.device_info(i).uuid for i in range(b.device_count())]
    assert nvml_uuids(pynvml) == ids == infos
    # CUDA fastest first: its device 0 is NVML's 2 (a torch UUID has no "GPU-" prefix)
    assert cuda_to_nvml(uuid.UUID(ids[2][4:]), infos) == (2, ids[2])
    assert cuda_to_nvml(ids[0].upper(), infos) == (0, ids[0])
    assert cuda_to_nvml("MIG-" + ids[1][4:], infos) == (1, ids[1])
    assert cuda_to_nvml(uuid.UUID(int=1), infos) is None
    assert cuda_to_nvml(None, infos) is None


def test_torch_series_are_labelled_by_the_nvml_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's torch.mem.* series carry the NVML index of the GPU the CUDA ordinal is
    (matched by UUID), whatever CUDA_VISIBLE_DEVICES and CUDA's order say."""
    ids = uuids(4)
    driver(monkeypatch, [Device(uuid=u) for u in ids])
    monkeypatch.setattr(_flush, "_NVML_UUIDS", None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{ids[3]},{ids[1]}")
    order = [ids[3], ids[1]]  # what CUDA made of it: ordinal 0 is NVML 3, ordinal 1 NVML 1
    stats = {"allocated_bytes.all.current": GIB, "reserved_bytes.all.current": 2 * GIB}
    cuda = SimpleNamespace(
        is_initialized=lambda: True,
        device_count=lambda: 2,
        memory_stats=lambda i: stats,
        get_device_properties=lambda i: SimpleNamespace(uuid=uuid.UUID(order[i][4:])),
    )
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    got = {(m, d) for m, d, _ in _flush.torch_memory()}
    assert {d for _, d in got} == {"3", "1"}
    # no UUID match (no NVML here): integers of CUDA_VISIBLE_DEVICES, else the ordinal
    monkeypatch.setattr(_flush, "_NVML_UUIDS", [])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert {d for _, d, _ in _flush.torch_memory()} == {"2", "5"}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert {d for _, d, _ in _flush.torch_memory()} == {"0", "1"}


# ---------------------------------------------------------------------- 9. containers
@pytest.fixture
def namespaced_tree() -> Iterator[tuple[dict[int, int], subprocess.Popen[bytes]]]:
    """A real process tree in a pid namespace of its own: {inner pid: host pid}."""
    p = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            "sleep 120 & echo $$ $!; exec sleep 120",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert p.stdout is not None
        inner = [int(x) for x in p.stdout.readline().split()]
        deadline = time.monotonic() + 10
        while True:
            hosts = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
            if len(hosts) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        root_host = psutil.Process(p.pid).children()[0].pid
        child_host = next(h for h in hosts if h != root_host)
        yield {inner[0]: root_host, inner[1]: child_host}, p
    finally:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()
        for h in locals().get("hosts", []):
            try:
                os.kill(h, 9)
            except OSError:
                pass


def test_host_pids_from_nvml_attribute_to_a_trial_in_its_own_pid_namespace(
    monkeypatch: pytest.MonkeyPatch,
    namespaced_tree: tuple[dict[int, int], subprocess.Popen[bytes]],
) -> None:
    pids, _ = namespaced_tree
    (inner_root, host_root), (inner_child, host_child) = sorted(pids.items())
    assert {inner_root, inner_child}.isdisjoint({host_root, host_child})
    foreign = os.getpid()  # a host process, in no nested namespace: not the trial's
    driver(
        monkeypatch,
        [
            Device(uuid=uuids(2)[0], compute=[(host_root, GIB), (host_child, 3 * GIB)]),
            Device(uuid=uuids(2)[1], compute=[(foreign, 5 * GIB)]),
        ],
    )
    probe = GpuProbe(NvmlBackend(Once(LOGGER_NAME)), host_root)
    trial = set(pids)  # the trial's pids as the SDK inside the namespace knows them
    got = by_key(probe.sample(trial))
    assert got[("gpu.mem", "0")] == (4.0 * GIB, None)
    assert probe.selected == {0} and not probe.foreign_namespace


def test_a_missing_newer_call_says_which_older_one_is_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    driver(monkeypatch, [Device()], missing={"nvmlDeviceGetTemperatureV"})
    b = NvmlBackend(Once(LOGGER_NAME))
    for _ in range(3):
        b.read(0)
    said = mine(caplog, "nvmlDeviceGetTemperatureV")
    assert len(said) == 1 and "nvmlDeviceGetTemperature is used instead" in said[0]
