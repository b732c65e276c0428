"""Record real NVML readings into a replay file (the format of :mod:`tunescope.collect._replay`).

    python -m tunescope.collect.record_nvml OUT.json --seconds N --interval S [--pid PID]

Run it on a GPU machine while a fine-tune runs; ``--pid`` names the training process, whose
process tree becomes the recording's trial (without it, every process seen on a GPU counts).
``OUT`` ending in ``.gz`` is compressed. Readings are stored raw (power in mW, energy in mJ,
memory in bytes), with each process's SM utilization (``process_util``) and MIG instances as
devices of their own. Exit codes: 0 written, 1 no NVML or no GPU (one line on stderr), 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil

from tunescope._once import Once
from tunescope.collect._gpu import GpuBackend, GpuInfo, NvmlBackend
from tunescope.collect._once import LOGGER_NAME
from tunescope.collect._replay import FORMAT, dump_replay
from tunescope.errors import CollectError

__all__ = ["main", "record"]

MIN_INTERVAL = 0.1


def _tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid} | {c.pid for c in root.children(recursive=True)}
    except psutil.Error:
        return set()


def _raw(v: float | None, scale: float = 1.0) -> float | int | None:
    if v is None:
        return None
    x = v * scale
    return round(x) if float(x).is_integer() or scale != 1.0 else x


def _device(i: GpuInfo) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": i.name,
        "uuid": i.uuid,
        "memory_total": _raw(i.memory_total),
        "power_limit_mw": _raw(i.power_limit, 1000.0),
        "gpm_supported": i.gpm_supported,
    }
    if i.parent is not None:
        d.update(parent=i.parent, mig=i.mig)
    if i.partitioned:
        d["partitioned"] = True
    return d


def record(
    backend: GpuBackend,
    seconds: float,
    interval: float,
    pid: int | None = None,
    *,
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Sample ``backend`` every ``interval`` s for ``seconds`` s (or until ``stop()`` is
    true) into a replay document. GPUs in MIG mode are recorded with their instances
    (``parent``/``mig`` devices); per-process SM utilization as ``process_util``."""
    n = backend.device_count()
    infos = [backend.device_info(i) for i in range(n)]
    devices = [_device(i) for i in infos]
    frames: list[dict[str, Any]] = []
    trial: set[int] = set()
    supported = True
    t0 = time.monotonic()
    k = 0
    while True:
        now = time.monotonic() - t0
        if now > seconds + 1e-9 or (stop is not None and stop() and frames):
            break
        if pid is not None:
            trial |= _tree(pid)
        per = []
        for i in infos:
            r = backend.read(i.index)
            procs = backend.processes(i.index)
            gpm = backend.gpm(i.index) if i.gpm_supported else None
            share = backend.process_util(i.index)
            if procs is None:
                supported = False
            elif pid is None:
                trial |= {p for p, _ in procs}
            per.append(
                {
                    "util": _raw(r.util),
                    "mem_bw_util": _raw(r.mem_bw_util),
                    "mem_used": _raw(r.mem_used),
                    "power_mw": _raw(r.power, 1000.0),
                    "temp": _raw(r.temp),
                    "clock_sm": _raw(r.clock_sm),
                    "throttle": _raw(r.throttle),
                    "energy_mj": _raw(r.energy_mj),
                    "gpm": gpm,
                    "processes": None if procs is None else [[p, _raw(u)] for p, u in procs],
                    "process_util": None if share is None else [[p, round(u, 2)] for p, u in share],
                }
            )
        frames.append({"t": round(now, 3), "devices": per})
        k += 1
        delay = t0 + k * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": False,
        "description": f"recorded with tunescope.collect.record_nvml on {len(infos)} GPU(s): "
        + ", ".join(sorted({i.name for i in infos})),
        "interval": interval,
        "root_pid": pid if pid is not None else min(trial, default=0),
        "trial_pids": sorted(trial),
        "processes_supported": supported,
        "devices": devices,
        "frames": frames,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tunescope.collect.record_nvml",
        description="Record NVML readings into a GPU replay file.",
    )
    p.add_argument("out", metavar="OUT.json", type=Path)
    p.add_argument("--seconds", type=float, default=60.0, help="how long to record (60)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between frames (1.0)")
    p.add_argument(
        "--pid",
        type=int,
        default=None,
        help="the training process (its tree is the trial); default: every process seen on a GPU",
    )
    args = p.parse_args(argv)
    if not math.isfinite(args.interval) or args.interval < MIN_INTERVAL:
        p.error(f"--interval must be at least {MIN_INTERVAL} seconds")
    if not math.isfinite(args.seconds) or args.seconds <= 0:
        p.error("--seconds must be positive")
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(logging.StreamHandler(sys.stderr))
    logger.propagate = False
    try:
        backend = NvmlBackend(Once(logger))
    except CollectError as exc:
        print(f"record_nvml: cannot record: {exc}", file=sys.stderr)
        return 1
    try:
        if backend.device_count() <= 0:
            print("record_nvml: cannot record: NVML sees no GPU", file=sys.stderr)
            return 1
        doc = record(backend, args.seconds, args.interval, args.pid)
    finally:
        backend.close()
    dump_replay(doc, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
