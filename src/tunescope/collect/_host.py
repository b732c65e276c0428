"""Host probe: the trial's process tree (CPU time, memory, count) and the whole machine.

The tree is the watched root process and all its descendants (``psutil`` children, recursive),
found again at every sample so that processes started later are included. A process once seen
stays part of the trial until it exits, even if it is re-parented (a daemonised child). The
sampler's own process and its descendants are excluded: the sampler is usually a child of the
training process.

Metrics (catalog keys, base units):

* ``cpu.util`` (%): CPU time (user + system) the tree used in the interval ending at the
  sample, / (wall length of the interval x ``cpu.capacity``) x 100. Absent at the first sample,
  which sets the baseline. Not clamped, so its integral is the CPU time used.
* ``cpu.capacity`` (cores): min(cgroup CPU quota, CPUs in the root's affinity mask), re-read
  every 10 s.
* ``cpu.mem`` (bytes): sum of proportional set sizes over the tree, so pages that forked
  workers share count once; RSS for a process whose PSS cannot be read (logged once).
* ``cpu.mem.limit`` (bytes): the cgroup memory limit, else the host's RAM (every 10 s).
* ``cpu.procs`` (count): live (non-zombie) processes in the tree.
* ``host.cpu.util`` (%): ``psutil.cpu_percent()`` since the previous sample (absent at the
  first, which primes it).
* ``host.mem.used`` (bytes): ``virtual_memory().total - available``.
* ``disk.read`` / ``disk.write`` (bytes/s): ``read_bytes`` / ``write_bytes`` of
  ``/proc/PID/io`` (``psutil.Process.io_counters()``) summed over the tree, their growth in the
  interval / its wall length. These count what reaches the storage layer: a read served from
  the page cache counts nothing, a write counts when it dirties the page cache (so a file
  written and deleted before it is flushed still counts). Absent at the first sample.
* ``net.recv`` / ``net.sent`` (bytes/s): received / transmitted bytes of every interface but
  ``lo`` in ``/proc/PID/net/dev`` of the root process (else of a live process of the tree), over
  the interval. Linux counts network bytes per interface, not per process, so this is the
  traffic of the trial's *network namespace*: the trial's own when it runs in a container or
  its own namespace, the whole machine's when it shares the host's. ``lo`` is left out because
  loopback traffic is both sent and received by the same namespace and is not network use.
  Absent at the first sample, and at a sample where the namespace read is another one than at
  the previous sample (the root exited and another process of the tree is read).

Processes that appear or vanish between samples never give negative deltas: CPU time is
tracked per (pid, create time); a process new since the previous sample counts its whole CPU
time in its first interval; one that vanished contributes nothing more (the CPU time it used
after the previous sample and before exiting is not seen: at most one interval's worth).
Disk bytes follow the same rule per (pid, create time): a delta is clamped at zero, and a
process that is in the tree but whose counters could not be read at the previous sample counts
from now on, not its whole history. Unlike CPU times, Linux adds a child's I/O to its parent's
``/proc/PID/io`` when the parent reaps it: the probe takes what it already counted for a
process that left the tree off the growth of its parent (the nearest ancestor still in the
tree), so a child's bytes count once, and those it moved after the last sample that saw it
count too, in the interval it was reaped. A child reaped outside the tree (re-parented to
init) loses only that last part.
Network counters are kept per interface: one that appears, or whose counters drop (deleted
and made again), counts from zero (interfaces start at zero); one that goes away contributes
nothing more.

Cost per sample: one more small ``/proc`` file read per process of the tree
(``/proc/PID/io``) and one for the namespace (``/proc/PID/net/dev``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from tunescope._once import Once
from tunescope.collect._cgroup import affinity_cores, cpu_limit, memory_limit
from tunescope.collect._once import LOGGER_NAME

__all__ = ["HOST_METRICS", "HostProbe", "ProcInfo", "parse_net_dev"]

HOST_METRICS = (
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
)
"""Catalog keys this probe writes (device None)."""

Key = tuple[int, float]

LIMITS_TTL = 10.0
"""Seconds between re-reads of the cgroup limits and affinity (they rarely change)."""


@dataclass(frozen=True)
class ProcInfo:
    """One process of the tree at one sample. ``cpu`` in seconds (user + system),
    ``mem`` in bytes (PSS, or RSS when ``pss`` is False), ``io`` (read bytes, written bytes)
    reaching storage; each None if unreadable."""

    pid: int
    create_time: float
    cpu: float | None
    mem: float | None
    pss: bool
    zombie: bool
    io: tuple[float, float] | None = None
    ppid: int = 0


def parse_net_dev(text: str) -> dict[str, tuple[float, float]]:
    """``/proc/PID/net/dev`` as {interface: (received bytes, transmitted bytes)}, ``lo`` left
    out; lines that do not parse are skipped."""
    out: dict[str, tuple[float, float]] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        name = name.strip()
        if not sep or name == "lo" or len(fields) < 9:
            continue
        try:
            out[name] = (float(fields[0]), float(fields[8]))
        except ValueError:
            continue
    return out


class HostProbe:
    """Samples the process tree rooted at ``root_pid`` and the host; see the module doc."""

    def __init__(
        self,
        root_pid: int,
        *,
        exclude_pid: int | None = None,
        proc: Path = Path("/proc"),
        log: Once | None = None,
    ) -> None:
        self.root_pid = root_pid
        self.exclude_pid = os.getpid() if exclude_pid is None else exclude_pid
        self._proc = proc
        self._log = log or Once(LOGGER_NAME)
        self._root: psutil.Process | None
        try:
            self._root = psutil.Process(root_pid)
        except psutil.Error:
            self._root = None
            self._log("root-gone", "process %d does not exist; recording an empty tree", root_pid)
        self._members: dict[Key, psutil.Process] = {}
        self._cpu: dict[Key, float] = {}
        self._io: dict[Key, tuple[float, float]] = {}
        self._keys: set[Key] = set()
        self._ppid: dict[Key, int] = {}
        self._net: dict[str, tuple[float, float]] | None = None
        self._netns: int | None = None
        self._last: float | None = None
        self._capacity: float | None = None
        self._limits_at: float | None = None
        self._limits_cache: tuple[float, float] | None = None
        self.seen_pids: set[int] = set()
        """Every pid ever seen in the tree (the root included)."""
        self.current_pids: set[int] = set()
        """Pids of the tree at the last sample."""

    # ------------------------------------------------------------------ process tree
    def _candidates(self) -> dict[int, psutil.Process]:
        found: dict[int, psutil.Process] = {}
        root = self._root
        if root is not None:
            try:
                if root.is_running():
                    found[root.pid] = root
                    for child in root.children(recursive=True):
                        found[child.pid] = child
            except psutil.Error:
                pass
        for key, p in list(self._members.items()):
            if key[0] not in found:
                try:
                    if p.is_running():
                        found[p.pid] = p
                except psutil.Error:
                    pass
        return found

    def _read(self, p: psutil.Process) -> tuple[ProcInfo, int] | None:
        """(info, parent pid) of a live process, None if it vanished."""
        try:
            with p.oneshot():
                ppid = p.ppid()
                ctime = p.create_time()
                zombie = p.status() == psutil.STATUS_ZOMBIE
                times = p.cpu_times()
                cpu = times.user + times.system
        except psutil.NoSuchProcess:
            return None
        except psutil.Error as exc:
            self._log(
                "cpu-" + type(exc).__name__,
                "cannot read CPU times of process %d (%s); it is left out",
                p.pid,
                exc,
            )
            return None
        mem: float | None = None
        pss = True
        if not zombie:
            try:
                mem = float(p.memory_full_info().pss)
            except psutil.NoSuchProcess:
                return None
            except (psutil.Error, OSError, AttributeError) as exc:
                pss = False
                self._log(
                    "pss",
                    "cannot read PSS of process %d (%s); using RSS, which counts "
                    "pages shared between processes more than once",
                    p.pid,
                    exc,
                )
                try:
                    mem = float(p.memory_info().rss)
                except psutil.NoSuchProcess:
                    return None
                except psutil.Error:
                    mem = None
        io: tuple[float, float] | None = None
        if not zombie:
            try:
                c = p.io_counters()
                io = (float(c.read_bytes), float(c.write_bytes))
            except psutil.NoSuchProcess:
                return None
            except (psutil.Error, OSError, AttributeError) as exc:
                self._log(
                    "io",
                    "cannot read disk I/O counters of process %d (%s); its disk bytes are left out",
                    p.pid,
                    exc,
                )
        return ProcInfo(p.pid, ctime, cpu, mem, pss, zombie, io, ppid), ppid

    def tree(self) -> list[ProcInfo]:
        """The processes of the trial now, the sampler's own subtree left out."""
        candidates = self._candidates()
        infos: dict[int, tuple[ProcInfo, int, psutil.Process]] = {}
        for pid, p in candidates.items():
            if pid == self.exclude_pid:
                continue
            got = self._read(p)
            if got is not None:
                infos[pid] = (got[0], got[1], p)
        parent = {pid: ppid for pid, (_, ppid, _) in infos.items()}
        out: list[ProcInfo] = []
        members: dict[Key, psutil.Process] = {}
        for pid, (info, _, p) in infos.items():
            if self._descends_from_excluded(pid, parent):
                continue
            out.append(info)
            members[(info.pid, info.create_time)] = p
        self._members = members
        return out

    def _descends_from_excluded(self, pid: int, parent: dict[int, int]) -> bool:
        """Whether the sampler is an ancestor of ``pid`` below the root. The walk stops at the
        root, so a root that is itself a child of the sampler (in-process use) is kept."""
        seen: set[int] = set()
        cur = pid
        while cur != self.root_pid and cur in parent and cur not in seen:
            seen.add(cur)
            cur = parent[cur]
            if cur == self.exclude_pid:
                return True
        return False

    # ------------------------------------------------------------------ limits
    def _limits(self, mono: float) -> tuple[float, float]:
        """(capacity, memory limit), re-read at most every :data:`LIMITS_TTL` seconds."""
        if (
            self._limits_at is None
            or mono - self._limits_at >= LIMITS_TTL
            or self._limits_cache is None
        ):
            self._limits_cache = (self.capacity(), self.memory_limit())
            self._limits_at = mono
        return self._limits_cache

    def capacity(self) -> float:
        """Cores the trial may use: min(cgroup quota, affinity of the root), else of the
        sampler itself when the root is gone; at least a hundredth of a core."""
        for pid in (self.root_pid, os.getpid()):
            cores = affinity_cores(pid)
            if cores is None:
                continue
            quota = cpu_limit(pid, proc=self._proc)
            cap = float(cores) if quota is None else min(float(cores), quota)
            self._capacity = max(cap, 0.01)
            return self._capacity
        if self._capacity is None:
            self._capacity = float(os.cpu_count() or 1)
        return self._capacity

    def memory_limit(self) -> float:
        """Bytes the trial may hold: its cgroup memory limit, else the host's RAM."""
        limit = memory_limit(self.root_pid, proc=self._proc)
        if limit is None:
            limit = memory_limit(os.getpid(), proc=self._proc)
        return float(limit if limit is not None else psutil.virtual_memory().total)

    # ------------------------------------------------------------------ disk and network
    def _disk(self, procs: list[ProcInfo], values: dict[str, float], mono: float) -> None:
        """``disk.read`` / ``disk.write`` over the interval (see the module doc)."""
        now_keys = {(i.pid, i.create_time) for i in procs}
        live = {i.pid for i in procs}
        # Linux adds a reaped child's I/O to its parent's counters: what was already counted
        # for a process that left the tree is taken off its parent's growth (the nearest one
        # still in the tree, through parents that left too), so it counts once.
        counted: dict[int, list[float]] = {}
        gone = {k: v for k, v in self._io.items() if k not in now_keys}
        gone_by_pid = {k[0]: k for k in gone}
        for key, (r, w) in gone.items():
            parent, seen = self._ppid.get(key, 0), {key[0]}
            while parent in gone_by_pid and parent not in seen:
                seen.add(parent)
                parent = self._ppid.get(gone_by_pid[parent], 0)
            if parent in live:
                acc = counted.setdefault(parent, [0.0, 0.0])
                acc[0] += r
                acc[1] += w
        io_now: dict[Key, tuple[float, float]] = {}
        read = written = 0.0
        for info in procs:
            key = (info.pid, info.create_time)
            prev = self._io.get(key)
            if info.io is None:
                if prev is not None:  # a zombie, or unreadable now: keep what was counted
                    io_now[key] = prev
                continue
            io_now[key] = info.io
            if prev is not None:
                off = counted.get(info.pid, (0.0, 0.0))
                read += max(0.0, info.io[0] - prev[0] - off[0])
                written += max(0.0, info.io[1] - prev[1] - off[1])
            elif key not in self._keys:  # new since the previous sample: all its I/O is new
                read += info.io[0]
                written += info.io[1]
        if self._last is not None and mono > self._last:
            values["disk.read"] = read / (mono - self._last)
            values["disk.write"] = written / (mono - self._last)
        self._io = io_now
        self._keys = now_keys
        self._ppid = {(i.pid, i.create_time): i.ppid for i in procs}

    def _network(self, procs: list[ProcInfo], values: dict[str, float], mono: float) -> None:
        """``net.recv`` / ``net.sent`` of the trial's network namespace (see the module doc)."""
        got: tuple[int, dict[str, tuple[float, float]]] | None = None
        pids = [self.root_pid, *(i.pid for i in procs if i.pid != self.root_pid)]
        for pid in pids:
            try:
                ns = os.stat(self._proc / str(pid) / "ns" / "net").st_ino
                text = (self._proc / str(pid) / "net" / "dev").read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError):
                continue
            got = (ns, parse_net_dev(text))
            break
        if got is None:
            if procs:  # a tree that has ended has no namespace left to read: nothing to say
                self._log("net", "cannot read the network counters of the trial's namespace")
            self._net = None
            return
        ns, now = got
        prev = self._net if ns == self._netns else None
        if prev is not None and self._last is not None and mono > self._last:
            recv = sent = 0.0
            for name, (rx, tx) in now.items():
                # a new interface, or one made again (its counters dropped), starts at zero
                b_rx, b_tx = prev.get(name, (0.0, 0.0))
                recv += rx - b_rx if rx >= b_rx else rx
                sent += tx - b_tx if tx >= b_tx else tx
            values["net.recv"] = recv / (mono - self._last)
            values["net.sent"] = sent / (mono - self._last)
        self._net, self._netns = now, ns

    # ------------------------------------------------------------------ one sample
    def sample(self, mono: float) -> dict[str, float]:
        """Read every host metric at monotonic time ``mono`` (seconds); keys are catalog
        keys, values in base units. Never raises for a process that vanished."""
        procs = self.tree()
        values: dict[str, float] = {}
        capacity, mem_limit = self._limits(mono)
        values["cpu.capacity"] = capacity
        values["cpu.mem.limit"] = mem_limit
        cpu_now: dict[Key, float] = {}
        used = 0.0
        for info in procs:
            if info.cpu is None:
                continue
            key = (info.pid, info.create_time)
            cpu_now[key] = info.cpu
            prev = self._cpu.get(key)
            used += info.cpu if prev is None else max(0.0, info.cpu - prev)
        first = self._last is None
        if self._last is not None and mono > self._last:
            values["cpu.util"] = used / ((mono - self._last) * capacity) * 100.0
        self._disk(procs, values, mono)
        self._network(procs, values, mono)
        self._cpu = cpu_now
        self._last = mono
        values["cpu.mem"] = sum(i.mem for i in procs if i.mem is not None and not i.zombie)
        values["cpu.procs"] = float(sum(1 for i in procs if not i.zombie))
        self.current_pids = {i.pid for i in procs}
        self.seen_pids |= self.current_pids
        try:
            vm = psutil.virtual_memory()
            values["host.mem.used"] = float(vm.total - vm.available)
        except (OSError, psutil.Error) as exc:  # pragma: no cover - /proc unreadable
            self._log("host-mem", "cannot read host memory (%s)", exc)
        try:
            host_cpu = psutil.cpu_percent(interval=None)
            if not first:
                values["host.cpu.util"] = float(host_cpu)
        except (OSError, psutil.Error) as exc:  # pragma: no cover - /proc unreadable
            self._log("host-cpu", "cannot read host CPU use (%s)", exc, level=logging.WARNING)
        return values
