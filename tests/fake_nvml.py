"""A simulated NVIDIA driver at the ctypes level, for tests of the real ``pynvml`` (SYNTHETIC).

``FakeDriver.install`` replaces ``pynvml._nvmlGetFunctionPointer`` (and the library load) so
that every ``pynvml`` wrapper runs unchanged: it builds its real ctypes structures and calls
what it takes for the C function, which here is a Python callable that fills those structures
the way the driver does (raw bytes for process records, ``NVML_ERROR_*`` return codes). Nothing
above the C boundary is replaced, so a pynvml struct that does not match the driver's layout
reads wrong here exactly as it does on a real machine.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")

SUCCESS = 0
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
UNKNOWN = 999
_HANDLE_BASE = 0x5000


class _Record24(ctypes.Structure):
    """nvmlProcessInfo_t as every current driver writes it."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class _Record32(ctypes.Structure):
    """nvmlProcessInfo_t of the first R535 drivers (before 535.86)."""

    _fields_ = [
        *_Record24._fields_,
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


def _obj(arg: Any) -> Any:
    """The ctypes object behind ``byref(x)`` (or ``x`` itself)."""
    return getattr(arg, "_obj", arg)


@dataclass
class Device:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total: int = 80 * 2**30
    reserved: int = 600 * 2**20
    used: int = 10 * 2**30  # what v2 says (without reserved)
    util: int = 40
    mem_util: int = 20
    power_mw: int = 350_000
    limit_mw: int = 700_000
    temp: int = 61
    clock: int = 1980
    reasons: int = 0x4
    energy_mj: int = 5_000_000
    gpm: bool = True
    compute: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes)
    graphics: list[tuple[int, int]] = field(default_factory=list)
    util_samples: list[tuple[int, int]] = field(default_factory=list)  # (timestamp us, %)


class FakeDriver:
    """The C side of NVML for ``pynvml``; ``missing`` names symbols this driver lacks,
    ``fail`` maps a symbol to the NVML error code it returns."""

    def __init__(
        self,
        devices: list[Device],
        *,
        version: str = "550.54.15",
        record_size: int = 24,
        missing: set[str] | None = None,
        fail: dict[str, int] | None = None,
    ) -> None:
        self.devices = devices
        self.version = version
        self.record = _Record24 if record_size == 24 else _Record32
        self.missing = set(missing or ())
        self.fail = dict(fail or {})
        self.calls: list[str] = []
        self.lookups: list[str] = []
        self.gpm_values = {"sm": 55.0, "tensor": 33.0, "dram": 22.0}
        self._fns: dict[str, Callable[..., int]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("_c_")
        }

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(pynvml, "_LoadNvmlLibrary", lambda: None)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", self.lookup)

    def lookup(self, name: str) -> Callable[..., int]:
        self.lookups.append(name)
        if name in self.missing or name not in self._fns:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        fn = self._fns[name]

        def call(*args: Any) -> int:
            self.calls.append(name)
            if name in self.fail:
                return self.fail[name]
            return fn(*args)

        return call

    def _dev(self, handle: Any) -> Device:
        value = ctypes.cast(handle, ctypes.c_void_p).value or 0
        return self.devices[value - _HANDLE_BASE]

    # ---------------------------------------------------------------- the C functions
    def _c_nvmlInitWithFlags(self, flags: int) -> int:
        return SUCCESS

    def _c_nvmlShutdown(self) -> int:
        return SUCCESS

    def _c_nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        buf.value = self.version.encode()
        return SUCCESS

    def _c_nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _obj(count).value = len(self.devices)
        return SUCCESS

    def _c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        i = index.value
        if i >= len(self.devices):
            return 2  # NVML_ERROR_INVALID_ARGUMENT
        handle = _obj(out)
        ctypes.c_void_p.from_address(ctypes.addressof(handle)).value = _HANDLE_BASE + i
        return SUCCESS

    def _c_nvmlDeviceGetName(self, h: Any, buf: Any, size: Any) -> int:
        buf.value = self._dev(h).name.encode()
        return SUCCESS

    def _c_nvmlDeviceGetUUID(self, h: Any, buf: Any, size: Any) -> int:
        buf.value = self._dev(h).uuid.encode()
        return SUCCESS

    def _c_nvmlDeviceGetMemoryInfo(self, h: Any, out: Any) -> int:
        d, m = self._dev(h), _obj(out)
        m.total, m.used, m.free = d.total, d.used + d.reserved, d.total - d.used - d.reserved
        return SUCCESS

    def _c_nvmlDeviceGetMemoryInfo_v2(self, h: Any, out: Any) -> int:
        d, m = self._dev(h), _obj(out)
        if m.version != pynvml.nvmlMemory_v2:
            return 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        m.total, m.reserved, m.used = d.total, d.reserved, d.used
        m.free = d.total - d.used - d.reserved
        return SUCCESS

    def _c_nvmlDeviceGetEnforcedPowerLimit(self, h: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).limit_mw
        return SUCCESS

    def _c_nvmlGpmQueryDeviceSupport(self, h: Any, out: Any) -> int:
        _obj(out).isSupportedDevice = int(self._dev(h).gpm)
        return SUCCESS

    def _c_nvmlDeviceGetUtilizationRates(self, h: Any, out: Any) -> int:
        d, u = self._dev(h), _obj(out)
        u.gpu, u.memory = d.util, d.mem_util
        return SUCCESS

    def _c_nvmlDeviceGetSamples(
        self, h: Any, kind: Any, last: Any, vtype: Any, count: Any, buf: Any
    ) -> int:
        fresh = [s for s in self._dev(h).util_samples if s[0] > last.value]
        if not fresh:
            return NOT_FOUND
        _obj(vtype).value = 1  # NVML_VALUE_TYPE_UNSIGNED_INT
        n = _obj(count)
        if buf is None:
            n.value = len(fresh)
            return SUCCESS
        for k, (ts, v) in enumerate(fresh[: n.value]):
            buf[k].timeStamp = ts
            buf[k].sampleValue.uiVal = v
        n.value = min(n.value, len(fresh))
        return SUCCESS

    def _c_nvmlDeviceGetPowerUsage(self, h: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).power_mw
        return SUCCESS

    def _c_nvmlDeviceGetTemperatureV(self, h: Any, out: Any) -> int:
        t = _obj(out)
        t.temperature = self._dev(h).temp
        return SUCCESS

    def _c_nvmlDeviceGetTemperature(self, h: Any, sensor: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).temp
        return SUCCESS

    def _c_nvmlDeviceGetClockInfo(self, h: Any, kind: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).clock
        return SUCCESS

    def _c_nvmlDeviceGetCurrentClocksEventReasons(self, h: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).reasons
        return SUCCESS

    def _c_nvmlDeviceGetCurrentClocksThrottleReasons(self, h: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).reasons
        return SUCCESS

    def _c_nvmlDeviceGetTotalEnergyConsumption(self, h: Any, out: Any) -> int:
        _obj(out).value = self._dev(h).energy_mj
        return SUCCESS

    def _write_processes(self, procs: list[tuple[int, int]], count: Any, buf: Any) -> int:
        n = _obj(count)
        if not procs:
            n.value = 0
            return SUCCESS
        if buf is None or n.value < len(procs):
            n.value = len(procs)
            return INSUFFICIENT_SIZE
        size = ctypes.sizeof(self.record)
        base = ctypes.addressof(buf)
        for k, (pid, used) in enumerate(procs):
            rec = self.record(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF)
            rec.computeInstanceId = 0xFFFFFFFF
            ctypes.memmove(base + k * size, ctypes.addressof(rec), size)
        n.value = len(procs)
        return SUCCESS

    def _c_nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, count: Any, buf: Any) -> int:
        return self._write_processes(self._dev(h).compute, count, buf)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v3(self, h: Any, count: Any, buf: Any) -> int:
        return self._write_processes(self._dev(h).graphics, count, buf)

    def _c_nvmlGpmSampleAlloc(self, out: Any) -> int:
        sample = _obj(out)
        ctypes.c_void_p.from_address(ctypes.addressof(sample)).value = 0x9000 + len(self.calls)
        return SUCCESS

    def _c_nvmlGpmSampleFree(self, sample: Any) -> int:
        return SUCCESS

    def _c_nvmlGpmSampleGet(self, h: Any, sample: Any) -> int:
        return SUCCESS

    def _c_nvmlGpmMetricsGet(self, req: Any) -> int:
        r = _obj(req)
        by_id = {
            pynvml.NVML_GPM_METRIC_SM_UTIL: self.gpm_values["sm"],
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: self.gpm_values["tensor"],
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: self.gpm_values["dram"],
        }
        for k in range(r.numMetrics):
            m = r.metrics[k]
            m.value = by_id[m.metricId]
            m.nvmlReturn = SUCCESS
        return SUCCESS
