"""The replay GPU backend: recorded NVML readings played back as if from the driver.

It is the only stand-in for GPU hardware: it lets the GPU probe, the store and the page be
tested on machines without a GPU. Select it with ``$TUNESCOPE_GPU_REPLAY`` set to a file path
or to the name of a fixture shipped in ``tunescope/collect/replay/`` (see that folder's
README; :func:`builtin_fixtures` lists them).

File format (JSON, optionally gzip-compressed as ``.json.gz``), version 1::

    {"format": "tunescope-nvml-replay", "version": 1,
     "synthesized": false,            # true for generated fixtures, false for recordings
     "description": "...",
     "interval": 1.0,                 # seconds between frames when recorded
     "root_pid": 4242,                # the recorded training process
     "trial_pids": [4242, 4243],      # recorded pids that belonged to the trial
     "processes_supported": true,     # false: the driver listed no processes
     "devices": [{"name": "NVIDIA H200", "uuid": "GPU-...", "memory_total": 150754820096,
                  "power_limit_mw": 700000, "gpm_supported": true}],
     "frames": [{"t": 0.0,            # seconds since the recording started
                 "devices": [{"util": 97, "mem_bw_util": 41, "mem_used": 81604378624,
                              "power_mw": 612000, "temp": 64, "clock_sm": 1980,
                              "throttle": 0, "energy_mj": 123456789,
                              "gpm": {"sm": 71.5, "tensor": 43.0, "dram": 38.2},
                              "processes": [[4242, 79456894976]],
                              "process_util": [[4242, 96]]}]}]}

Readings are raw NVML values (power in mW, energy in mJ, memory in bytes); the backend converts
them as :class:`~tunescope.collect._gpu.NvmlBackend` does. ``gpm``, ``processes`` and
``process_util`` (per-process SM utilization %, ``[[pid, sm]]``) may be null or absent
(unsupported); any reading may be null (not reported).

Optional, all compatible with files that lack them: per device ``"parent": 0, "mig": 1`` (a
MIG instance of GPU 0, named ``0/mig1``) and ``"partitioned": true`` (a GPU in MIG mode, not
sampled itself); in the header ``"trials": {"a": [pids], "b": [pids]}``, the recorded pids of
each of several trials that shared the GPUs.

Pid mapping: a recorded pid of the trial being played is reported as the live trial's root
pid (so the replayed processes belong to the trial being sampled); any other recorded pid is
reported negated (``-pid``), which no live process has, so it stays foreign. The trial being
played is ``trial_pids``, or, for a source ``NAME#TRIAL`` (``shared_h100#b``), the pids of
``trials[TRIAL]``: two samplers replaying ``#a`` and ``#b`` see the same GPUs, each with its
own processes.

Time: frame ``k`` is current from ``t_k`` seconds after the backend was opened (the sampler's
start) until the next frame; after the last frame the last one is held.
"""

from __future__ import annotations

import bisect
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tunescope.collect._gpu import GpuInfo, GpuReading
from tunescope.errors import CollectError

__all__ = [
    "FIXTURE_DIR",
    "FORMAT",
    "ReplayBackend",
    "builtin_fixtures",
    "dump_replay",
    "load_replay",
]

FORMAT = "tunescope-nvml-replay"
FIXTURE_DIR = Path(__file__).parent / "replay"


def builtin_fixtures() -> list[str]:
    """Names of the fixtures shipped with tunescope (usable as ``$TUNESCOPE_GPU_REPLAY``)."""
    names = set()
    for p in FIXTURE_DIR.iterdir():
        for suffix in (".json.gz", ".json"):
            if p.name.endswith(suffix) and not p.name.startswith("_"):
                names.add(p.name[: -len(suffix)])
    return sorted(names)


def _resolve(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if "/" not in source and "\\" not in source:
        for suffix in (".json.gz", ".json"):
            candidate = FIXTURE_DIR / f"{source}{suffix}"
            if candidate.is_file():
                return candidate
    known = ", ".join(builtin_fixtures()) or "none"
    raise CollectError(
        f"GPU replay {source!r} is neither a file nor a builtin fixture (builtin: {known})"
    )


def load_replay(source: str | Path) -> tuple[Path, dict[str, Any]]:
    """(path, checked document) of a replay named by path or builtin fixture name.
    CollectError names what is wrong with a file that is not a valid replay."""
    path = _resolve(str(source))
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError, EOFError) as exc:
        raise CollectError(f"cannot read GPU replay {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CollectError(f"{path} is not a tunescope NVML replay (format != {FORMAT!r})")
    if doc.get("version") != 1:
        raise CollectError(f"{path}: replay version {doc.get('version')!r} is not supported")
    devices, frames = doc.get("devices"), doc.get("frames")
    if not isinstance(devices, list) or not isinstance(frames, list) or not frames:
        raise CollectError(f"{path}: a replay needs a device list and at least one frame")
    trials = doc.get("trials")
    if trials is not None and not (
        isinstance(trials, dict)
        and all(isinstance(v, list) and all(isinstance(x, int) for x in v) for v in trials.values())
    ):
        raise CollectError(f"{path}: trials must map each trial's name to its list of pids")
    times = [f.get("t") for f in frames]
    if not all(isinstance(t, int | float) for t in times) or times != sorted(times):
        raise CollectError(f"{path}: frame times must be numbers in increasing order")
    for k, f in enumerate(frames):
        if len(f.get("devices", [])) != len(devices):
            raise CollectError(
                f"{path}: frame {k} has {len(f.get('devices', []))} devices, "
                f"the header {len(devices)}"
            )
    return path, doc


def dump_replay(doc: dict[str, Any], path: str | Path) -> Path:
    """Write a replay document: JSON with the header first and one frame per line (readable
    diffs), gzip-compressed when ``path`` ends in ``.gz``. Returns the path."""
    path = Path(path)
    header = {k: v for k, v in doc.items() if k != "frames"}
    lines = [json.dumps(header, indent=1)[:-2] + ',\n "frames": [']
    frames = doc.get("frames", [])
    for k, frame in enumerate(frames):
        sep = "," if k + 1 < len(frames) else ""
        lines.append("  " + json.dumps(frame, separators=(",", ":")) + sep)
    lines.append(" ]\n}\n")
    text = "\n".join(lines)
    data = gzip.compress(text.encode(), mtime=0) if path.name.endswith(".gz") else text.encode()
    path.write_bytes(data)
    return path


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def split_source(source: str | Path) -> tuple[str, str | None]:
    """(replay, trial) of a source ``NAME#TRIAL``; (source, None) without ``#``, or when the
    source is a file whose name holds one."""
    text = str(source)
    name, sep, trial = text.rpartition("#")
    if not sep or not name or "/" in trial or Path(text).expanduser().is_file():
        return text, None
    return name, trial


class ReplayBackend:
    """A :class:`~tunescope.collect._gpu.GpuBackend` over a recorded file (module doc)."""

    def __init__(
        self,
        doc: dict[str, Any],
        *,
        source: str = "<memory>",
        root_pid: int | None = None,
        clock: Callable[[], float] | None = None,
        trial: str | None = None,
    ) -> None:
        self.source = source
        self.synthesized = bool(doc.get("synthesized", False))
        self._doc = doc
        self._devices: list[dict[str, Any]] = doc["devices"]
        self._frames: list[dict[str, Any]] = doc["frames"]
        self._times = [float(f["t"]) for f in self._frames]
        self._processes_supported = bool(doc.get("processes_supported", True))
        self._trial = {int(p) for p in doc.get("trial_pids", [])}
        if trial is not None:
            trials = doc.get("trials") or {}
            if trial not in trials:
                known = ", ".join(sorted(trials)) or "none"
                raise CollectError(f"GPU replay {source}: no trial {trial!r} (trials: {known})")
            self._trial = {int(p) for p in trials[trial]}
        self._root = root_pid
        self._clock = clock or time.monotonic
        self._start = self._clock()
        self._gpm_primed: set[int] = set()

    @classmethod
    def open(
        cls,
        source: str | Path,
        *,
        root_pid: int | None = None,
        clock: Callable[[], float] | None = None,
    ) -> ReplayBackend:
        """Load a replay by path or builtin fixture name (see :func:`load_replay`), and
        ``#TRIAL`` to play one of its ``trials`` (module doc)."""
        name, trial = split_source(source)
        path, doc = load_replay(name)
        return cls(doc, source=str(path), root_pid=root_pid, clock=clock, trial=trial)

    def elapsed(self) -> float:
        """Replay time in seconds since the backend was opened."""
        return self._clock() - self._start

    def _frame(self, index: int) -> dict[str, Any]:
        k = max(0, bisect.bisect_right(self._times, self.elapsed()) - 1)
        dev: dict[str, Any] = self._frames[k]["devices"][index]
        return dev

    def _map_pid(self, pid: int) -> int:
        if self._root is None:
            return pid
        return self._root if pid in self._trial else -abs(pid)

    # ------------------------------------------------------------------ the protocol
    def device_count(self) -> int:
        return len(self._devices)

    def device_info(self, index: int) -> GpuInfo:
        d = self._devices[index]
        limit = d.get("power_limit_mw")
        return GpuInfo(
            index=index,
            name=str(d.get("name", f"GPU {index}")),
            uuid=str(d.get("uuid", "")),
            memory_total=_f(d.get("memory_total")),
            power_limit=None if limit is None else float(limit) / 1000.0,
            gpm_supported=bool(d.get("gpm_supported", False)),
            parent=None if d.get("parent") is None else int(d["parent"]),
            mig=None if d.get("mig") is None else int(d["mig"]),
            partitioned=bool(d.get("partitioned", False)),
        )

    def read(self, index: int) -> GpuReading:
        r = self._frame(index)
        power = r.get("power_mw")
        return GpuReading(
            util=_f(r.get("util")),
            mem_bw_util=_f(r.get("mem_bw_util")),
            mem_used=_f(r.get("mem_used")),
            power=None if power is None else float(power) / 1000.0,
            temp=_f(r.get("temp")),
            clock_sm=_f(r.get("clock_sm")),
            throttle=_f(r.get("throttle")),
            energy_mj=_f(r.get("energy_mj")),
        )

    def processes(self, index: int) -> list[tuple[int, float | None]] | None:
        if not self._processes_supported:
            return None
        procs = self._frame(index).get("processes")
        if procs is None:
            return None
        return [(self._map_pid(int(pid)), _f(used)) for pid, used in procs]

    def gpm(self, index: int) -> dict[str, float] | None:
        if not self._devices[index].get("gpm_supported", False):
            return None
        if index not in self._gpm_primed:  # like NVML: the first sample opens the interval
            self._gpm_primed.add(index)
            return None
        g = self._frame(index).get("gpm")
        if not g:
            return None
        return {k: float(v) for k, v in g.items() if v is not None}

    def process_util(self, index: int) -> list[tuple[int, float]] | None:
        util = self._frame(index).get("process_util")
        if util is None or not self._processes_supported:
            return None
        return [(self._map_pid(int(pid)), float(sm)) for pid, sm in util]

    def close(self) -> None:
        pass
