"""GPU backends: the protocol the GPU probe reads, the real NVML backend, and the choice.

Every call into the NVIDIA driver goes through one gateway, :meth:`NvmlBackend._query`: it
initialises NVML lazily (once), returns a default when a call fails or the function does not
exist in the installed ``pynvml``, and logs each failing function once, never per sample.
Where the driver or the installed ``pynvml`` lacks a newer call (memory info v2,
``nvmlDeviceGetTemperatureV``, ``nvmlDeviceGetCurrentClocksEventReasons``), the older one is
used from then on (:meth:`NvmlBackend._either`); the process-record size pynvml reads is
checked against the driver's once (:func:`expected_process_record_size`). ``pynvml`` is
imported only when a backend is opened, so ``import tunescope.collect`` stays cheap.

Which backend: ``$TUNESCOPE_GPU_REPLAY`` (a recording's path or a builtin fixture name) selects
the replay backend (:mod:`tunescope.collect._replay`); otherwise NVML. No ``pynvml``, no driver
or no GPU: :func:`open_gpu_backend` returns None after one log line and GPU metrics are absent.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tunescope._env import ENV_GPU_REPLAY
from tunescope._once import Once
from tunescope.collect._gpushare import ProcessUtilReader
from tunescope.collect._once import LOGGER_NAME
from tunescope.errors import CollectError

if TYPE_CHECKING:
    from collections.abc import Callable

    from tunescope.collect._mig import MigSlots

__all__ = [
    "REPLAY_ENV",
    "GpuBackend",
    "GpuInfo",
    "GpuReading",
    "NvmlBackend",
    "expected_process_record_size",
    "open_gpu_backend",
]

REPLAY_ENV = ENV_GPU_REPLAY
"""The variable that selects the replay backend (the public name of ``ENV_GPU_REPLAY``)."""

GPM_MIN_GAP = 0.15
"""Seconds: a GPM sample younger than this is not paired with a new one (NVML's GPM metrics
are defined for samples at least 100 ms apart; the final sample may come sooner)."""

# Failures that mean "this driver / pynvml does not have that call": the backend then uses
# the older call in its place, every sample.
_ABSENT_ERRORS = frozenset(
    {
        "NVMLError_FunctionNotFound",
        "NVMLError_NotSupported",
        "NVMLError_ArgumentVersionMismatch",
        "TypeError",  # an older pynvml without the keyword (``version=``)
    }
)
_QUIET_ERRORS = _ABSENT_ERRORS | {"NVMLError_NotFound"}


def expected_process_record_size(driver_version: str) -> int | None:
    """Bytes of one process record (``nvmlProcessInfo_t``) the driver ``driver_version``
    (``nvmlSystemGetDriverVersion``, e.g. ``"550.54.15"``) writes; None when unparsable.

    24 (pid, usedGpuMemory, gpuInstanceId, computeInstanceId) on every driver but the first
    R535 releases (before 535.86), which appended usedGpuCcProtectedMemory (32). A pynvml
    whose struct differs (nvidia-ml-py 12.535.77 on a current driver) reads every record
    after the first at the wrong offset.
    """
    parts = driver_version.strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None
    return 32 if major == 535 and minor < 86 else 24


@dataclass(frozen=True)
class GpuInfo:
    """What does not change while sampling. ``memory_total`` in bytes, ``power_limit`` in W
    (the limit the driver enforces), ``gpm_supported``: NVML GPM metrics work (Hopper+)."""

    index: int
    name: str
    uuid: str
    memory_total: float | None
    power_limit: float | None
    gpm_supported: bool
    parent: int | None = None
    """For a MIG instance: the NVML index of its GPU (``index`` is then the backend's own
    number for the instance, after the GPUs')."""
    mig: int | None = None
    """For a MIG instance: its MIG device index on that GPU."""
    partitioned: bool = False
    """MIG mode is on: the GPU's instances are devices of their own; the GPU is not sampled."""

    @property
    def device(self) -> str:
        """How series name the device: the GPU's NVML index (``"0"``), or ``"0/mig1"`` for
        MIG instance 1 of GPU 0."""
        if self.parent is not None:
            return f"{self.parent}/mig{self.mig}"
        return str(self.index)

    @property
    def gpu(self) -> int:
        """The NVML index of the physical GPU (a MIG instance's GPU)."""
        return self.index if self.parent is None else self.parent


@dataclass(frozen=True)
class GpuReading:
    """One reading of a device; None where the driver could not say.

    util, mem_bw_util: % of the driver's sample period a kernel ran / memory was accessed
    (``nvidia-smi`` utilization.gpu / utilization.memory). mem_used: bytes. power: W.
    temp: °C. clock_sm: MHz. throttle: clock-event reasons bitmask. energy_mj: millijoules
    since the driver loaded.
    """

    util: float | None = None
    mem_bw_util: float | None = None
    mem_used: float | None = None
    power: float | None = None
    temp: float | None = None
    clock_sm: float | None = None
    throttle: float | None = None
    energy_mj: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


class GpuBackend(Protocol):
    """What the GPU probe needs from the hardware (or from a recording of it)."""

    def device_count(self) -> int:
        """Number of GPUs visible to the driver (0 when none)."""
        ...

    def device_info(self, index: int) -> GpuInfo:
        """Static facts of GPU ``index``."""
        ...

    def read(self, index: int) -> GpuReading:
        """The current readings of GPU ``index``."""
        ...

    def processes(self, index: int) -> list[tuple[int, float | None]] | None:
        """(pid, bytes of GPU memory it holds or None if not reported) of the processes
        using GPU ``index``; None when the driver cannot list processes at all."""
        ...

    def gpm(self, index: int) -> dict[str, float] | None:
        """GPM activity since the previous call, % each: keys ``sm``, ``tensor``, ``dram``.
        None when GPM is unsupported or at the first call (no interval yet)."""
        ...

    def process_util(self, index: int) -> list[tuple[int, float]] | None:
        """(pid, SM utilization %) of the processes that ran on GPU ``index`` since the
        previous call (a pid may appear more than once; add them up); None when the driver
        cannot say (unsupported, e.g. a MIG instance, or the first call)."""
        ...

    def close(self) -> None:
        """Release the driver. Safe to call twice."""
        ...


_GPM_KEYS = (
    ("sm", "NVML_GPM_METRIC_SM_UTIL"),
    ("tensor", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("dram", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)


class NvmlBackend:
    """The real driver, through ``pynvml`` (package ``nvidia-ml-py``).

    Raises CollectError from the constructor when ``pynvml`` cannot be imported or NVML
    cannot be initialised (no driver, no GPU); after that, no method raises.
    """

    def __init__(
        self,
        log: Once | None = None,
        *,
        nvml: Any = None,
        init: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``nvml``: the ``pynvml`` module to call (default: import it); ``init=False``
        skips ``nvmlInit`` (tests of the gateway's error path); ``clock``: monotonic
        seconds, for the GPM spacing (tests)."""
        self._log = log or Once(LOGGER_NAME)
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise CollectError(f"pynvml is not installed ({exc})") from None
            nvml = pynvml
        self._nvml: Any = nvml
        if init:
            try:
                nvml.nvmlInit()
            except Exception as exc:
                raise CollectError(f"NVML cannot start ({_describe(exc)})") from None
        self._open = True
        self._handles: dict[int, Any] = {}
        self._gpm_prev: dict[int, Any] = {}
        self._gpm_spare: dict[int, Any] = {}
        self._clock = clock or time.monotonic
        self._gpm_at: dict[int, float] = {}
        self._absent: set[str] = set()
        self._util_ts: dict[int, int] = {}
        self._records_ok: bool | None = None
        self._mig: MigSlots | None = None
        self._proc_util = ProcessUtilReader(self._query, nvml)

    # ------------------------------------------------------------------ the gateway
    def _query(
        self,
        fn: str | Callable[..., Any],
        *args: Any,
        default: Any = None,
        label: str | None = None,
        instead: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn`` (a ``pynvml`` function or its name) with ``args`` / ``kwargs``; on any
        error, or when the function does not exist, log once per function name (``label``
        when given) and return ``default``. A call the driver or pynvml lacks is remembered
        in ``_absent`` (see :meth:`_either`, which names the call used ``instead``)."""
        left_out = f"{instead} is used instead" if instead else "that reading is left out"
        name = label or (fn if isinstance(fn, str) else str(getattr(fn, "__name__", repr(fn))))
        func = getattr(self._nvml, fn, None) if isinstance(fn, str) else fn
        if func is None:
            self._absent.add(name)
            self._log(
                "nvml-missing:" + name,
                "pynvml has no %s (update nvidia-ml-py); %s",
                name,
                left_out,
                level=logging.INFO,
            )
            return default
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            kind = type(exc).__name__
            if kind in _ABSENT_ERRORS:
                self._absent.add(name)
            self._log(
                "nvml:" + name,
                "NVML %s failed (%s); %s",
                name,
                _describe(exc),
                left_out,
                level=logging.INFO if kind in _QUIET_ERRORS else logging.WARNING,
            )
            return default

    def _either(
        self,
        first: str,
        then: str,
        *args: Any,
        first_label: str | None = None,
        **first_kwargs: Any,
    ) -> Any:
        """``first(*args, **first_kwargs)``, the newer call, unless the driver or pynvml
        lacks it (then ``then(*args)``, the older one, from that sample on)."""
        label = first_label or first
        if label not in self._absent:
            got = self._query(first, *args, label=label, instead=then, **first_kwargs)
            if got is not None or label not in self._absent:
                return got
        return self._query(then, *args)

    def _memory(self, h: Any) -> Any:
        """Memory info v2 (``used`` without the driver-reserved memory, as nvidia-smi
        shows it); v1 (reserved counted as used) where v2 is missing."""
        v2 = getattr(self._nvml, "nvmlMemory_v2", None)
        if v2 is None:
            self._absent.add("nvmlDeviceGetMemoryInfo_v2")
        return self._either(
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetMemoryInfo",
            h,
            first_label="nvmlDeviceGetMemoryInfo_v2",
            version=v2,
        )

    def _migs(self) -> MigSlots:
        """The GPUs' MIG instances, found once (numbered after the GPUs)."""
        if self._mig is None:
            from tunescope.collect._mig import MigSlots

            self._mig = MigSlots.find(self._query, self._nvml, self._gpu_handle)
        return self._mig

    def _handle(self, index: int) -> Any:
        slot = self._migs().slot(index)
        return slot.handle if slot is not None else self._gpu_handle(index)

    def _gpu_handle(self, index: int) -> Any:
        h = self._handles.get(index)
        if h is None:
            h = self._query("nvmlDeviceGetHandleByIndex", index)
            if h is not None:
                self._handles[index] = h
        return h

    # ------------------------------------------------------------------ the protocol
    def device_count(self) -> int:
        return self._migs().count

    def device_info(self, index: int) -> GpuInfo:
        slot = self._migs().slot(index)
        if slot is not None:
            return slot.info(self._query, index)
        h = self._handle(index)
        name = _text(self._query("nvmlDeviceGetName", h, default=f"GPU {index}"))
        uuid = _text(self._query("nvmlDeviceGetUUID", h, default=""))
        mem = self._memory(h)
        limit_mw = self._query("nvmlDeviceGetEnforcedPowerLimit", h)
        support = self._query("nvmlGpmQueryDeviceSupport", h)
        return GpuInfo(
            index=index,
            name=name,
            uuid=uuid,
            memory_total=float(mem.total) if mem is not None else None,
            power_limit=limit_mw / 1000.0 if limit_mw is not None else None,
            gpm_supported=bool(getattr(support, "isSupportedDevice", 0)),
            partitioned=self._migs().partitioned(index),
        )

    def read(self, index: int) -> GpuReading:
        h = self._handle(index)
        nv = self._nvml
        util = self._query("nvmlDeviceGetUtilizationRates", h)
        # A MIG instance has no utilization of its own (its reading drops it below): asking
        # would mark the samples call absent for the physical GPUs too.
        busy = self._util_average(index, h) if self._migs().slot(index) is None else None
        mem = self._memory(h)
        power_mw = self._query("nvmlDeviceGetPowerUsage", h)
        temp = self._either(
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetTemperature",
            h,
            getattr(nv, "NVML_TEMPERATURE_GPU", 0),
        )
        clock = self._query("nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1))
        throttle = self._either(
            "nvmlDeviceGetCurrentClocksEventReasons",  # R535 and newer
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            h,
        )
        energy = self._query("nvmlDeviceGetTotalEnergyConsumption", h)
        reading = GpuReading(
            util=busy if busy is not None else _num(getattr(util, "gpu", None)),
            mem_bw_util=_num(getattr(util, "memory", None)),
            mem_used=_num(getattr(mem, "used", None)),
            power=power_mw / 1000.0 if power_mw is not None else None,
            temp=_num(temp),
            clock_sm=_num(clock),
            throttle=_num(throttle),
            energy_mj=_num(energy),
        )
        slot = self._migs().slot(index)
        return reading if slot is None else slot.reading(reading, self.read(slot.parent))

    def _util_average(self, index: int, h: Any) -> float | None:
        """Mean of the driver's GPU-utilization samples taken since the previous read
        (``nvmlDeviceGetSamples``); None at the first read, when no sample is new, or where
        the driver keeps none (the caller then takes the plain rate, the driver's window)."""
        nv = self._nvml
        if "nvmlDeviceGetSamples" in self._absent:
            return None
        last = self._util_ts.get(index)
        got = self._query(
            "nvmlDeviceGetSamples",
            h,
            getattr(nv, "NVML_GPU_UTILIZATION_SAMPLES", 1),
            last or 0,
            instead="the plain rate (nvmlDeviceGetUtilizationRates)",
        )
        if got is None:
            return None
        vtype, samples = got
        fresh = [s for s in samples if last is None or int(s.timeStamp) > last]
        if not fresh:
            return None
        self._util_ts[index] = max(int(s.timeStamp) for s in fresh)
        if last is None:
            return None  # the buffer's whole history: no interval of ours yet
        values = [v for v in (_sample_value(vtype, s) for s in fresh) if v is not None]
        return sum(values) / len(values) if values else None

    def _process_records_ok(self) -> bool:
        """Whether pynvml's process record has the size this driver writes (checked once;
        said once when not): else every record after the first would be read wrong."""
        if self._records_ok is None:
            nv = self._nvml
            struct = getattr(nv, "c_nvmlProcessInfo_v3_t", None) or getattr(
                nv, "c_nvmlProcessInfo_t", None
            )
            driver = self._query("nvmlSystemGetDriverVersion")
            want = expected_process_record_size(_text(driver)) if driver is not None else None
            have = ctypes.sizeof(struct) if struct is not None else None
            self._records_ok = want is None or have is None or want == have
            if not self._records_ok:
                self._log(
                    "nvml-process-record",
                    "pynvml reads GPU process records of %s bytes, driver %s writes %s "
                    "(install nvidia-ml-py>=12.535.108): per-process GPU memory is unknown",
                    have,
                    _text(driver),
                    want,
                )
        return self._records_ok

    def processes(self, index: int) -> list[tuple[int, float | None]] | None:
        h = self._handle(index)
        if not self._process_records_ok():
            return None
        compute = self._query("nvmlDeviceGetComputeRunningProcesses", h)
        if compute is None:  # a failed query is "unknown", never "no process"
            return None
        # Graphics contexts are not what training holds: a failed graphics query leaves
        # the compute list standing.
        graphics = self._query("nvmlDeviceGetGraphicsRunningProcesses", h)
        used: dict[int, float | None] = {}
        for p in (compute or []) + (graphics or []):
            pid = int(p.pid)
            mem = _num(getattr(p, "usedGpuMemory", None))
            old = used.get(pid)
            # A process listed as both compute and graphics holds one allocation.
            used[pid] = mem if old is None else (old if mem is None else max(old, mem))
        return sorted(used.items())

    def gpm(self, index: int) -> dict[str, float] | None:
        h = self._handle(index)
        nv = self._nvml
        if index not in self._gpm_spare:
            sample = self._query("nvmlGpmSampleAlloc")
            if sample is None:
                return None
            self._gpm_spare[index] = sample
        prev = self._gpm_prev.get(index)
        now = self._clock()
        if prev is not None and now - self._gpm_at.get(index, now) < GPM_MIN_GAP:
            return None  # too close to the previous sample for GPM's contract: skip
        cur = self._gpm_spare[index]
        if self._migs().gpm_sample(self._query, index, h, cur) is None:
            return None
        self._gpm_at[index] = now
        self._gpm_prev[index] = cur
        if prev is None:
            spare = self._query("nvmlGpmSampleAlloc")
            if spare is None:
                return None
            self._gpm_spare[index] = spare
            return None
        self._gpm_spare[index] = prev
        try:
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(_GPM_KEYS)
            req.sample1 = prev
            req.sample2 = cur
            for k, (_, const) in enumerate(_GPM_KEYS):
                req.metrics[k].metricId = getattr(nv, const)
        except Exception as exc:
            self._log("nvml:gpm-request", "cannot build a GPM request (%s)", _describe(exc))
            return None
        got = self._query("nvmlGpmMetricsGet", req)
        if got is None:
            return None
        out: dict[str, float] = {}
        for k, (key, _) in enumerate(_GPM_KEYS):
            m = got.metrics[k]
            if int(m.nvmlReturn) == 0:
                out[key] = float(m.value)
        return out or None

    def process_util(self, index: int) -> list[tuple[int, float]] | None:
        if self._migs().slot(index) is not None:
            return None  # NVML keeps no per-process utilization of a MIG instance
        return self._proc_util.read(index, self._handle(index))

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        for sample in list(self._gpm_prev.values()) + list(self._gpm_spare.values()):
            self._query("nvmlGpmSampleFree", sample)
        self._gpm_prev.clear()
        self._gpm_spare.clear()
        self._query("nvmlShutdown")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_SAMPLE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _sample_value(value_type: int, sample: Any) -> float | None:
    """The number in a ``c_nvmlSample_t`` of NVML value type ``value_type``."""
    try:
        return float(getattr(sample.sampleValue, _SAMPLE_FIELDS[int(value_type)]))
    except (IndexError, AttributeError, TypeError, ValueError):
        return None


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def open_gpu_backend(
    root_pid: int | None = None,
    *,
    log: Once | None = None,
    replay: str | None = None,
    clock: Callable[[], float] | None = None,
) -> GpuBackend | None:
    """The GPU backend to sample, or None when there is none (said in one log line).

    Precedence: ``replay`` argument, then ``$TUNESCOPE_GPU_REPLAY``, then the real NVML.
    ``root_pid`` is the watched process (the replay maps recorded trial pids onto it);
    ``clock`` (monotonic seconds) drives replay time, for tests.
    A replay that cannot be read raises CollectError: it was asked for explicitly.
    """
    log = log or Once(LOGGER_NAME)
    source = replay if replay else os.environ.get(REPLAY_ENV)
    if source:
        from tunescope.collect._replay import ReplayBackend

        backend = ReplayBackend.open(source, root_pid=root_pid, clock=clock)
        log(
            "gpu-backend",
            "GPU readings replayed from %s (%s)",
            backend.source,
            "synthesized" if backend.synthesized else "recorded",
            level=logging.INFO,
        )
        return backend
    try:
        nvml = NvmlBackend(log)
    except CollectError as exc:
        log("gpu-backend", "no GPU metrics: %s", exc, level=logging.INFO)
        return None
    if nvml.device_count() <= 0:
        log("gpu-backend", "no GPU metrics: NVML sees no GPU", level=logging.INFO)
        nvml.close()
        return None
    return nvml
