"""Limits a process may use, read from its cgroup (v2 unified or v1 per-controller).

The cgroup of a process comes from ``/proc/PID/cgroup``; where each hierarchy is mounted
comes from ``/proc/self/mountinfo`` (its mount point and the hierarchy path mounted there,
which is not ``/`` inside many containers). The effective limit is the tightest one on the way
from the process's cgroup up to the mount point, since every ancestor's limit applies too.

Units: CPU limits in cores (quota / period, e.g. 1.5), memory limits in bytes. ``None`` means
no limit is set (or none could be read); callers then fall back to affinity or host RAM.
Every function here reads plain files and never raises for a missing or odd file.

OOM kills: the kernel counts the processes its OOM killer ended in a memory cgroup, in
``memory.events`` (v2, the cgroup and its descendants) or ``memory.oom_control`` (v1, Linux
4.13+), under ``oom_kill``. :func:`oom_kills` reads that counter for a process's innermost
memory cgroup; :class:`tunescope.collect._loop.OomWatch` compares it across a trial.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CgroupMount",
    "affinity_cores",
    "cgroup_dirs",
    "cpu_limit",
    "memory_limit",
    "oom_kills",
    "parse_cfs",
    "parse_cpu_max",
    "parse_memory_limit",
    "parse_mountinfo",
    "parse_oom_kill",
    "parse_proc_cgroup",
    "read_oom_kill",
]

UNLIMITED_BYTES = 1 << 60
"""cgroup v1 reports "no memory limit" as a huge page-rounded number (2^63 - 4096); anything
at or above this is read as no limit."""


@dataclass(frozen=True)
class CgroupMount:
    """One mounted cgroup hierarchy: ``version`` 1 or 2, the v1 ``controllers`` it carries,
    the hierarchy path ``root`` mounted at ``mountpoint``."""

    version: int
    controllers: frozenset[str]
    root: str
    mountpoint: str


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` ("QUOTA PERIOD", microseconds) as cores; ``max`` means none."""
    parts = text.split()
    if not parts or parts[0] == "max":
        return None
    try:
        quota = int(parts[0])
        period = int(parts[1]) if len(parts) > 1 else 100_000
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` as cores; a quota of -1 means
    none."""
    try:
        quota = int(quota_text.strip())
        period = int(period_text.strip())
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return quota / period


def parse_memory_limit(text: str) -> int | None:
    """v2 ``memory.max`` or v1 ``memory.limit_in_bytes`` in bytes; ``max`` or a v1
    "unlimited" value (>= 2^60) means none."""
    value = text.strip()
    if not value or value == "max":
        return None
    try:
        n = int(value)
    except ValueError:
        return None
    if n <= 0 or n >= UNLIMITED_BYTES:
        return None
    return n


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """``/proc/PID/cgroup`` as (v1 controller -> path, v2 path or None).

    Lines are ``ID:CONTROLLERS:PATH``; the v2 line is ``0::PATH``. Named v1 hierarchies
    (``name=systemd``) are kept under their name.
    """
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path
            continue
        for c in controllers.split(","):
            if c:
                v1[c] = path
    return v1, v2


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The cgroup hierarchies in a ``/proc/self/mountinfo`` text.

    Fields: ``ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS``.
    """
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lf = left.split()
        rf = right.split()
        if len(lf) < 5 or len(rf) < 1:
            continue
        fstype = rf[0]
        root, mountpoint = _unescape(lf[3]), _unescape(lf[4])
        if fstype == "cgroup2":
            mounts.append(CgroupMount(2, frozenset(), root, mountpoint))
        elif fstype == "cgroup":
            opts = rf[2].split(",") if len(rf) > 2 else []
            ctrls = frozenset(o for o in opts if o not in ("rw", "ro") and "=" not in o)
            mounts.append(CgroupMount(1, ctrls, root, mountpoint))
    return mounts


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _chain(mount: CgroupMount, path: str) -> list[Path]:
    """Directories from the process's cgroup up to the mount point, innermost first."""
    base = Path(mount.mountpoint)
    root = mount.root.rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        rel = path[len(root) :]
    elif not root:
        rel = path
    else:
        # Mounted from a different part of the hierarchy (cgroup namespace): the mount point
        # is the best we can see.
        return [base]
    rel = rel.strip("/")
    inner = base / rel if rel else base
    if not inner.is_dir():
        return [base]
    chain = [inner]
    while chain[-1] != base and base in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def cgroup_dirs(
    pid: int, controller: str, *, proc: Path = Path("/proc")
) -> tuple[int, list[Path]] | None:
    """(cgroup version, directories innermost first) holding ``controller``'s files for
    ``pid``, or None when neither a v1 hierarchy with that controller nor a v2 one is
    mounted. A v1 hierarchy that carries the controller wins over v2 (hybrid hosts mount v2
    without controllers)."""
    text = _read(proc / str(pid) / "cgroup")
    mounts_text = _read(proc / "self" / "mountinfo")
    if text is None or mounts_text is None:
        return None
    v1, v2 = parse_proc_cgroup(text)
    mounts = parse_mountinfo(mounts_text)
    if controller in v1:
        for m in mounts:
            if m.version == 1 and controller in m.controllers:
                return 1, _chain(m, v1[controller])
    if v2 is not None:
        for m in mounts:
            if m.version == 2:
                return 2, _chain(m, v2)
    return None


def cpu_limit(pid: int, *, proc: Path = Path("/proc")) -> float | None:
    """The CPU quota of ``pid``'s cgroup in cores (tightest along the path), None if none."""
    found = cgroup_dirs(pid, "cpu", proc=proc)
    if found is None:
        return None
    version, dirs = found
    best: float | None = None
    for d in dirs:
        if version == 2:
            text = _read(d / "cpu.max")
            limit = parse_cpu_max(text) if text is not None else None
        else:
            quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
            limit = parse_cfs(quota, period) if quota is not None and period is not None else None
        if limit is not None and (best is None or limit < best):
            best = limit
    return best


def memory_limit(pid: int, *, proc: Path = Path("/proc")) -> int | None:
    """The memory limit of ``pid``'s cgroup in bytes (tightest along the path), None if
    none."""
    found = cgroup_dirs(pid, "memory", proc=proc)
    if found is None:
        return None
    version, dirs = found
    name = "memory.max" if version == 2 else "memory.limit_in_bytes"
    best: int | None = None
    for d in dirs:
        text = _read(d / name)
        limit = parse_memory_limit(text) if text is not None else None
        if limit is not None and (best is None or limit < best):
            best = limit
    return best


def affinity_cores(pid: int) -> int | None:
    """How many CPUs ``pid`` may run on (``os.sched_getaffinity``), None if unreadable."""
    try:
        return len(os.sched_getaffinity(pid))
    except (OSError, AttributeError):
        return None


def parse_oom_kill(text: str) -> int | None:
    """The ``oom_kill`` count of a v2 ``memory.events`` or v1 ``memory.oom_control`` text,
    None when it has none (a v1 kernel older than 4.13)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "oom_kill":
            try:
                return int(parts[1])
            except ValueError:
                return None
    return None


def oom_kills(pid: int, *, proc: Path = Path("/proc")) -> tuple[Path, int] | None:
    """(the file read, its ``oom_kill`` count) for ``pid``'s innermost memory cgroup; None
    when the process is gone or no counter can be read."""
    found = cgroup_dirs(pid, "memory", proc=proc)
    if found is None:
        return None
    version, dirs = found
    path = dirs[0] / ("memory.events" if version == 2 else "memory.oom_control")
    text = _read(path)
    count = None if text is None else parse_oom_kill(text)
    return None if count is None else (path, count)


def read_oom_kill(path: Path) -> int | None:
    """The ``oom_kill`` count in ``path`` now (a file :func:`oom_kills` named), None if it
    cannot be read (the cgroup was removed)."""
    text = _read(path)
    return None if text is None else parse_oom_kill(text)
