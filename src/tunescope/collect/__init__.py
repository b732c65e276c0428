"""The sampler: records a trial's hardware use from a process of its own.

Run as ``python -m tunescope.collect --store URL --trial ID --pid PID [--interval S]`` (see
:mod:`tunescope.collect._main` for the stdin/stdout protocol). Probes:

* host (:class:`HostProbe`): CPU time, PSS memory, disk I/O and processes of the trial's
  process tree, network bytes of its network namespace, cgroup/affinity capacity, host CPU
  and RAM;
* GPU (:class:`GpuProbe`) over a :class:`GpuBackend`: the real NVML (:class:`NvmlBackend`,
  GPM on Hopper and newer) or recorded readings (:class:`ReplayBackend`, chosen with
  ``$TUNESCOPE_GPU_REPLAY``).

Importing this package costs nothing: the names below load on first use (PEP 562), so
``python -m tunescope.collect`` ignores SIGINT before anything slow is imported, and
``pynvml`` is imported only when NVML is opened. Only the CLI may import this package (the
layering rule); it imports nothing of tunescope but the metric catalog, the store contract and
the errors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunescope.collect._cgroup import cpu_limit, memory_limit
    from tunescope.collect._gpu import (
        REPLAY_ENV,
        GpuBackend,
        GpuInfo,
        GpuReading,
        NvmlBackend,
        open_gpu_backend,
    )
    from tunescope.collect._gpuprobe import DEVICE_WIDE_NOTE, GpuProbe
    from tunescope.collect._host import HostProbe
    from tunescope.collect._loop import (
        MIN_INTERVAL,
        OomWatch,
        Sampler,
        StopSignal,
        end_of,
        failure_message,
    )
    from tunescope.collect._main import main
    from tunescope.collect._replay import ReplayBackend, builtin_fixtures, load_replay
    from tunescope.collect._spawn import give_terminal, spawn, terminal_is_ours

_WHERE = {
    "cpu_limit": "_cgroup",
    "memory_limit": "_cgroup",
    "REPLAY_ENV": "_gpu",
    "GpuBackend": "_gpu",
    "GpuInfo": "_gpu",
    "GpuReading": "_gpu",
    "NvmlBackend": "_gpu",
    "open_gpu_backend": "_gpu",
    "DEVICE_WIDE_NOTE": "_gpuprobe",
    "GpuProbe": "_gpuprobe",
    "HostProbe": "_host",
    "MIN_INTERVAL": "_loop",
    "Sampler": "_loop",
    "StopSignal": "_loop",
    "failure_message": "_loop",
    "OomWatch": "_loop",
    "end_of": "_loop",
    "main": "_main",
    "ReplayBackend": "_replay",
    "builtin_fixtures": "_replay",
    "load_replay": "_replay",
    "spawn": "_spawn",
    "give_terminal": "_spawn",
    "terminal_is_ours": "_spawn",
}

__all__ = [
    "DEVICE_WIDE_NOTE",
    "MIN_INTERVAL",
    "REPLAY_ENV",
    "GpuBackend",
    "GpuInfo",
    "GpuProbe",
    "GpuReading",
    "HostProbe",
    "NvmlBackend",
    "OomWatch",
    "ReplayBackend",
    "Sampler",
    "StopSignal",
    "builtin_fixtures",
    "cpu_limit",
    "end_of",
    "failure_message",
    "give_terminal",
    "load_replay",
    "main",
    "memory_limit",
    "open_gpu_backend",
    "spawn",
    "terminal_is_ours",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tunescope.collect' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tunescope.collect.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
