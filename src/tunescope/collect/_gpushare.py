"""Shared GPUs: how much of a GPU each process used, so trials packed on one GPU each get
their own share (``gpu.proc_util``) beside the device-wide utilization (``gpu.util``).

NVML keeps, per device, a short buffer of per-process samples: the share of each sampling
period in which a process's kernels ran (``smUtil``, like ``utilization.gpu`` but per process).
:class:`ProcessUtilReader` asks for the samples newer than the last one it read
(``nvmlDeviceGetProcessesUtilizationInfo`` where the driver has it, else
``nvmlDeviceGetProcessUtilization``) and turns them into one figure per process: the sum of its
``smUtil`` over the samples of the interval / the number of distinct sample times on the device
in that interval (a process without a sample at a time counts 0 there). NVML answers NotFound
when no process ran since the last read: every process used 0%. The first read of a device only
marks where the next one starts (the buffer before it covers an unknown span), so it says
nothing, as GPM's first sample does.

Not available: on a MIG instance (NVML keeps no per-process utilization in MIG mode) and on
drivers that do not support either call (then nothing is recorded; the gateway logs it once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ProcessUtilReader", "not_found_as", "split_samples"]

Query = Callable[..., Any]
"""The NVML gateway, :meth:`tunescope.collect._gpu.NvmlBackend._query`."""

NEW_CALL = "nvmlDeviceGetProcessesUtilizationInfo"
OLD_CALL = "nvmlDeviceGetProcessUtilization"
_FAILED = object()


def not_found_as(value: Any, nvml: Any, name: str) -> str | Callable[..., Any]:
    """``nvml.<name>`` made to return ``value`` where NVML answers NotFound, an expected
    answer there (no sample since the last read, no MIG instance at an index), not a failure;
    other errors still reach the gateway. The bare name when ``pynvml`` lacks the function
    (the gateway says so)."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return name

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            if type(exc).__name__ == "NVMLError_NotFound":
                return value
            raise

    call.__name__ = name
    return call


def split_samples(samples: list[Any]) -> list[tuple[int, float]]:
    """(pid, SM utilization %) per process from NVML process-utilization samples (objects
    with ``pid``, ``timeStamp`` and ``smUtil``): the sum of its ``smUtil`` over the distinct
    sample times of the device (module doc). Values over 100 (N/A markers) are left out."""
    stamps = {int(s.timeStamp) for s in samples}
    if not stamps:
        return []
    total: dict[int, float] = {}
    for s in samples:
        sm = int(s.smUtil)
        if 0 <= sm <= 100:
            total[int(s.pid)] = total.get(int(s.pid), 0.0) + sm
    return sorted((pid, v / len(stamps)) for pid, v in total.items())


class ProcessUtilReader:
    """Per-process SM utilization of each device since the previous read (module doc).
    Never raises: what the driver refuses is None (said once by the gateway)."""

    def __init__(self, query: Query, nvml: Any) -> None:
        self._query = query
        self._nvml = nvml
        self._seen: dict[int, int] = {}
        self._primed: set[int] = set()
        self._new = hasattr(nvml, NEW_CALL)

    def _samples(self, handle: Any, since: int) -> list[Any] | None:
        if self._new:
            call = not_found_as([], self._nvml, NEW_CALL)
            got = self._query(call, handle, since, default=_FAILED)
            if got is not _FAILED:
                return list(got)
            self._new = False  # a driver older than the call: the older one from now on
        got = self._query(not_found_as([], self._nvml, OLD_CALL), handle, since)
        return None if got is None else list(got)

    def read(self, index: int, handle: Any) -> list[tuple[int, float]] | None:
        """(pid, %) of the processes that ran on device ``index`` (``handle``) since the last
        read, [] when none ran; None at the first read and when the driver cannot say."""
        if handle is None:
            return None
        since = self._seen.get(index, 0)
        samples = self._samples(handle, since)
        if samples is None:
            return None
        fresh = [s for s in samples if int(s.timeStamp) > since]
        if fresh:
            self._seen[index] = max(int(s.timeStamp) for s in fresh)
        if index not in self._primed:
            self._primed.add(index)
            return None
        return split_samples(fresh)
