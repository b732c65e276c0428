"""Host probe: the trial's process tree (CPU time, memory, count) and the whole machine.

The tree is the watched root process and all its descendants, found again at every sample so
that processes started later are included. A process once seen stays part of the trial until
it exits, even if it is re-parented (a daemonised child). The sampler's own process and its
descendants are excluded: the sampler is usually a child of the training process.

Everything is read from ``/proc`` with plain ``os`` calls (no psutil: it costs a Python object
and several file opens per process per sample). Finding descendants needs every process's
parent: ``/proc`` is listed, and ``/proc/PID/stat`` read, only for pids not seen at the
previous listing (a pid reused since gets another inode for ``/proc/PID``, so it is read
again); and the listing itself is skipped when the ``processes`` counter of ``/proc/stat``
(processes and threads made since boot) has not moved, since then no process can have joined
the tree. The tree's own processes are read every sample through descriptors kept open on
their ``/proc/PID/stat`` and ``/proc/PID/io`` (a ``pread`` each; such a descriptor stays bound
to its process, so a reused pid never reads another's counters).

``cpu.mem`` and PSS: reading ``smaps_rollup`` walks a process's page tables, a cost that grows
with its mapped memory (about 19 ms of CPU per GB), while ``/proc/PID/statm`` costs the same for
1 MB and 100 GB. So the tree's PSS is read in full (every live process's ``smaps_rollup``, at one
sample) only now and then, and in between each process's figure is its PSS at that read moved
by what ``statm`` shows since: the change of its anonymous RSS (``resident - shared``) and of
its file and shmem RSS (``shared``). Anonymous pages a process gains are its own (its PSS grows
by them exactly: a spike shows at its height at the next sample); a process whose anonymous
pages were all its own at the read (``Anonymous`` = ``Pss_Anon`` of ``smaps_rollup``) loses
exactly what its anonymous RSS drops. What ``statm`` cannot place is counted as *drift*, an
upper bound on how far the estimate may be from PSS, per process since the read:

* the file and shmem RSS change, in full (pages another process maps count part);
* what ``statm`` moved while ``smaps_rollup`` was read (the process's memory moving during the
  read: the read may hold the move or not), ``statm`` being read again after it, as the base;
* where the process shared anonymous pages at the read (forked workers, their parent), an
  anonymous drop (up to twice ``Anonymous - Pss_Anon``: the shared pages it mapped), and page
  faults its RSS growth does not explain, in pages (copies on write, which add a page to the
  tree without moving any RSS), up to the same bound.

The tree is read in full again:

1. when a process joined or left it (or became a zombie): shared pages changed hands;
2. when the drift summed over the tree passed :data:`PSS_DRIFT` of the tree's memory (at
   least :data:`PSS_DRIFT_FLOOR`);
3. otherwise, within a CPU budget of :data:`PSS_SHARE` of a core (the CPU time full reads
   took accrues to it; reads for rules 1 and 2 draw on it too, so the budget is an average):
   when any process's RSS or faults moved since the last read (a tree whose reads are cheap,
   a few MB, is read as before, at every change), and when :data:`PSS_REFRESH_S` passed since
   the last read (:data:`PSS_REFRESH_SOLO_S` for a tree of one process): PSS also moves with
   pages shared with processes outside the tree, with no sign in the tree's counters.

So a single-process tree, whose growth and shrinkage ``statm`` places exactly, is read at most
every :data:`PSS_REFRESH_SOLO_S` or as the budget allows; a forked tree is read again whenever
its workers copy or map shared pages in amounts that matter. :attr:`HostProbe.pss_reads`
counts the full reads.

Metrics (catalog keys, base units):

* ``cpu.util`` (%): CPU time (user + system) the tree used in the interval ending at the
  sample, / (wall length of the interval x ``cpu.capacity``) x 100. Absent at the first sample,
  which sets the baseline. Not clamped, so its integral is the CPU time used.
* ``cpu.capacity`` (cores): min(cgroup CPU quota, CPUs in the root's affinity mask), re-read
  every 10 s.
* ``cpu.mem`` (bytes): sum of proportional set sizes over the tree, so pages that forked
  workers share count once (read as below); RSS for a process whose PSS cannot be read
  (logged once).
* ``cpu.mem.limit`` (bytes): the cgroup memory limit, else the host's RAM (every 10 s).
* ``cpu.procs`` (count): live (non-zombie) processes in the tree.
* ``host.cpu.util`` (%): busy share of the host's CPU time since the previous sample, from
  ``/proc/stat`` as ``psutil.cpu_percent()`` counts it (absent at the first, which primes it).
* ``host.mem.used`` (bytes): ``MemTotal - MemAvailable`` of ``/proc/meminfo`` (psutil's
  ``virtual_memory().total - available``).
* ``disk.read`` / ``disk.write`` (bytes/s): ``read_bytes`` / ``write_bytes`` of
  ``/proc/PID/io`` (as ``psutil.Process.io_counters()``) summed over the tree, their growth in the
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

Cost per sample: three ``pread`` calls per process of the tree (``stat``, ``statm``, ``io``),
a ``smaps_rollup`` read per process at a full read (above), ``/proc/stat``,
``/proc/meminfo``, the namespace's ``/proc/PID/net/dev`` (a ``pread`` of a descriptor kept
while the process it was read through stays in that namespace: a ``stat`` of its
``/proc/PID/ns/net`` tells), and a ``/proc`` listing when a process was made anywhere on the
machine since the previous sample.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tunescope._once import Once
from tunescope.collect._cgroup import affinity_cores, cpu_limit, memory_limit
from tunescope.collect._once import LOGGER_NAME

__all__ = [
    "HOST_METRICS",
    "PSS_DRIFT",
    "PSS_DRIFT_FLOOR",
    "PSS_REFRESH_S",
    "PSS_REFRESH_SOLO_S",
    "PSS_SHARE",
    "HostProbe",
    "ProcInfo",
    "parse_net_dev",
    "start_and_state",
]

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

PSS_REFRESH_S = 10.0
"""Seconds after which a tree of several processes is read in full again though nothing moved
(see the module doc: pages shared outside the tree change PSS unseen), budget permitting."""

PSS_REFRESH_SOLO_S = 60.0
"""As :data:`PSS_REFRESH_S`, for a tree of one process."""

PSS_SHARE = 0.001
"""Share of a core the full PSS reads may take on average (rule 3 of the module doc)."""

PSS_DRIFT = 0.02
"""Drift bound: the share of the tree's memory the estimate may be off by before a full read."""

PSS_DRIFT_FLOOR = float(1 << 20)
"""The drift bound's least value, bytes."""

_MAX_KEPT_FDS = 512
"""Descriptors kept open on ``/proc/PID/{stat,io}`` at most (past that, opened at each read)."""

_READ = 4096
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = float(os.sysconf("SC_CLK_TCK"))


class _Member:
    """What the probe keeps about one process of the tree between samples."""

    __slots__ = (
        "anon",
        "base",
        "cpu",
        "create_time",
        "faults",
        "ino",
        "io_fd",
        "io_ok",
        "pid",
        "ppid",
        "pss",
        "pss_ok",
        "rss",
        "shared",
        "shared_anon",
        "start",
        "stat_fd",
        "statm_fd",
        "unsure",
        "zombie",
    )

    def __init__(self, pid: int, ino: int) -> None:
        self.pid = pid
        self.ino = ino  # of /proc/PID: a reused pid gets another
        self.start: int | None = None  # clock ticks after boot
        self.create_time = 0.0
        self.stat_fd = -1
        self.statm_fd = -1
        self.io_fd = -1
        self.io_ok = True
        self.pss_ok = True
        self.zombie = False
        self.ppid = 0
        self.cpu = 0.0
        self.rss = 0
        self.faults = 0
        self.anon = 0  # anonymous RSS (statm: resident - shared), bytes
        self.shared = 0  # file and shmem RSS (statm: shared), bytes
        self.pss: float | None = None  # at the last full read
        self.base: tuple[int, int, int] | None = None  # (anon, shared, faults) then
        self.shared_anon = 0.0  # Anonymous - Pss_Anon then: > 0 when it shared anon pages
        self.unsure = 0.0  # what statm moved while that read ran, bytes

    def estimate(self) -> tuple[float, float]:
        """(PSS now as estimated from the last full read, drift bound), bytes; see the
        module doc."""
        if self.pss is None or self.base is None:
            return 0.0, 0.0
        anon0, shared0, faults0 = self.base
        d_anon, d_shared = self.anon - anon0, self.shared - shared0
        drift = float(abs(d_shared)) + self.unsure
        if self.shared_anon > 0:
            cap = 2.0 * self.shared_anon
            unexplained = (self.faults - faults0) * _PAGE - max(0, d_anon) - max(0, d_shared)
            drift += min(cap, float(max(0, -d_anon))) + min(cap, float(max(0, unexplained)))
        return max(0.0, self.pss + d_anon + d_shared), drift


def _read(path: str, size: int = _READ) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def _pread_whole(fd: int, size: int) -> bytes:
    """The whole of the ``/proc`` file open as ``fd``, from offset 0: read into ``size`` bytes,
    grown fourfold until what is read leaves room (procfs regenerates it at each read)."""
    text = os.pread(fd, size, 0)
    while len(text) >= size:
        size *= 4
        text = os.pread(fd, size, 0)
    return text


def _stat_fields(proc: str, pid: int) -> list[bytes] | None:
    """``/proc/PID/stat`` fields after the command name (state first), None if unreadable."""
    try:
        raw = _read(f"{proc}/{pid}/stat")
        return raw[raw.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None


def _ppid_of(proc: str, pid: int) -> int | None:
    f = _stat_fields(proc, pid)
    try:
        return None if f is None else int(f[1])
    except (ValueError, IndexError):
        return None


def start_and_state(
    pid: int, proc: str = "/proc", *, strict: bool = False
) -> tuple[int, bytes] | None:
    """(start time in clock ticks after boot, state letter) of process ``pid``, None if it
    does not exist (or cannot be read; with ``strict``, an error other than "no such
    process" is raised)."""
    if strict:
        try:
            raw = _read(f"{proc}/{pid}/stat")
        except (FileNotFoundError, ProcessLookupError):
            return None
        f: list[bytes] | None = raw[raw.rfind(b")") + 2 :].split()
    else:
        f = _stat_fields(proc, pid)
    try:
        return None if f is None else (int(f[19]), f[0])
    except (ValueError, IndexError):
        return None


def _boot_time(proc: str) -> float:
    try:
        with open(f"{proc}/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _read_pss(base: str) -> tuple[float, float] | None:
    """(PSS, ``Anonymous - Pss_Anon``) in bytes from ``smaps_rollup`` (Linux 4.14+), else
    summed over ``smaps``; the second is ``Anonymous`` where no ``Pss_Anon`` is given (before
    Linux 5.8), as if every anonymous page were shared. None when the process has no memory
    left (it is exiting)."""
    try:
        with open(base + "/smaps_rollup", "rb") as fh:
            text = fh.read()
    except FileNotFoundError:
        with open(base + "/smaps", "rb") as fh:  # FileNotFoundError too: it is gone
            text = fh.read()
    if not text:
        return None
    total = anon = pss_anon = 0
    found = has_pss_anon = False
    for line in text.split(b"\n"):
        if line.startswith(b"Pss:"):
            total += int(line.split()[1])
            found = True
        elif line.startswith(b"Anonymous:"):
            anon += int(line.split()[1])
        elif line.startswith(b"Pss_Anon:"):
            pss_anon += int(line.split()[1])
            has_pss_anon = True
    if not found:
        raise ValueError("no Pss line")
    shared_anon = max(0, anon - pss_anon) if has_pss_anon else anon
    return total * 1024.0, shared_anon * 1024.0


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
        self._proc_s = str(proc)
        got = start_and_state(root_pid, self._proc_s)
        self._root_start = None if got is None else got[0]
        if got is None:
            self._log("root-gone", "process %d does not exist; recording an empty tree", root_pid)
        self._boot = _boot_time(self._proc_s)
        self._members: dict[int, _Member] = {}
        self._parents: dict[int, tuple[int, int]] = {}
        self._live: frozenset[tuple[int, int | None]] = frozenset()
        self._kept_fds = 0
        self._host_fds: dict[str, int] = {}
        self._host_cpu_prev: tuple[float, float] | None = None
        self._host_stat = b""
        self._forks: int | None = None
        self._cpu: dict[Key, float] = {}
        self._io: dict[Key, tuple[float, float]] = {}
        self._keys: set[Key] = set()
        self._ppid: dict[Key, int] = {}
        self._net: dict[str, tuple[float, float]] | None = None
        self._netns: int | None = None
        self._net_fd: tuple[int, int, int] | None = None  # (pid, namespace, fd) of net/dev
        self._last: float | None = None
        self._capacity: float | None = None
        self._limits_at: float | None = None
        self._limits_cache: tuple[float, float] | None = None
        self.seen_pids: set[int] = set()
        """Every pid ever seen in the tree (the root included)."""
        self.current_pids: set[int] = set()
        """Pids of the tree at the last sample."""
        self.pss_reads = 0
        """Full PSS reads of the tree so far (see the module doc)."""
        self._pss_at = -float("inf")  # monotonic time of the last full read
        self._pss_cost = 0.0  # CPU seconds it took
        self._pss_budget = 0.0  # CPU seconds rule 3 may spend now
        self._budget_at: float | None = None

    # ------------------------------------------------------------------ process tree
    def _scan(self) -> dict[int, int]:
        """{pid: inode of /proc/PID} of every process now (one directory listing)."""
        out: dict[int, int] = {}
        try:
            with os.scandir(self._proc_s) as it:
                for e in it:
                    name = e.name
                    if name.isdigit():
                        out[int(name)] = e.inode()
        except OSError as exc:  # pragma: no cover - /proc unreadable
            self._log("proc-scan", "cannot list %s (%s)", self._proc_s, exc)
        return out

    def _discover(self, listing: dict[int, int]) -> list[int]:
        """Pids of the tree now: the root and its descendants (the sampler's subtree left
        out), then members seen before that left it by re-parenting."""
        parents = self._parents
        fresh: dict[int, tuple[int, int]] = {}
        children: dict[int, list[int]] = {}
        members = self._members
        for pid, ino in listing.items():
            got = parents.get(pid)
            if got is None or got[0] != ino:  # new since the last sample, or a reused pid
                m = members.get(pid)
                if m is not None and m.ino == ino:
                    got = (ino, m.ppid)
                else:
                    ppid = _ppid_of(self._proc_s, pid)
                    if ppid is None:
                        continue
                    got = (ino, ppid)
            elif (m := members.get(pid)) is not None:
                got = (ino, m.ppid)  # a member's parent as read at the last sample
            fresh[pid] = got
            children.setdefault(got[1], []).append(pid)
        self._parents = fresh
        found: list[int] = []
        seen: set[int] = set()
        if self._root_alive(listing):
            stack = [self.root_pid]
            while stack:
                pid = stack.pop()
                if pid == self.exclude_pid or pid in seen:
                    continue
                seen.add(pid)
                found.append(pid)
                stack.extend(children.get(pid, ()))
        for pid, m in members.items():  # the same process (inode), not a reused pid
            if pid not in seen and listing.get(pid) == m.ino and pid != self.exclude_pid:
                found.append(pid)
        return found

    def _root_alive(self, listing: dict[int, int]) -> bool:
        if self._root_start is None or self.root_pid not in listing:
            return False
        m = self._members.get(self.root_pid)
        if m is not None and m.ino == listing[self.root_pid]:
            return True  # the same /proc entry: the same process
        got = start_and_state(self.root_pid, self._proc_s)
        return got is not None and got[0] == self._root_start

    def _open(self, pid: int, name: str) -> int:
        """A descriptor of /proc/PID/NAME kept for the next samples (it stays bound to this
        process: once it is gone, reads fail with ESRCH, even if its pid is reused), or -1
        when enough are kept already (the file is then opened at each read)."""
        if self._kept_fds >= _MAX_KEPT_FDS:
            return -1
        fd = os.open(f"{self._proc_s}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        self._kept_fds += 1
        return fd

    def _reread(self, m: _Member, fd: int, name: str) -> bytes:
        if fd >= 0:
            return os.pread(fd, _READ, 0)
        return _read(f"{self._proc_s}/{m.pid}/{name}")

    def _close(self, m: _Member) -> None:
        for fd in (m.stat_fd, m.statm_fd, m.io_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                self._kept_fds -= 1
        m.stat_fd = m.statm_fd = m.io_fd = -1

    def close(self) -> None:
        """Close the descriptors kept open for the tree's processes."""
        for m in self._members.values():
            self._close(m)
        self._members = {}
        for fd in self._host_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._host_fds = {}
        self._close_net()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def _stat(self, pid: int, ino: int) -> _Member | None:
        """The member ``pid`` with its ``/proc/PID/stat`` read now; None if it vanished."""
        m = self._members.get(pid)
        if m is not None and m.ino != ino:  # the pid was reused: another process
            self._close(m)
            m = None
        try:
            if m is None:
                m = _Member(pid, ino)
                m.stat_fd = self._open(pid, "stat")
            raw = self._reread(m, m.stat_fd, "stat")
            fields = raw[raw.rindex(b")") + 2 :].split()
            start = int(fields[19])
        except (OSError, ValueError, IndexError) as exc:
            if m is not None:
                self._close(m)
            if not isinstance(exc, (FileNotFoundError, ProcessLookupError)):
                self._log(
                    "cpu-" + type(exc).__name__,
                    "cannot read CPU times of process %d (%s); it is left out",
                    pid,
                    exc,
                )
            return None
        if m.start is None:
            m.start = start
            m.create_time = self._boot + start / _TICK
        elif m.start != start:  # pragma: no cover - the inode check sees reuse first
            self._close(m)
            return None
        m.zombie = fields[0] in (b"Z", b"X")
        m.ppid = int(fields[1])
        m.cpu = (int(fields[11]) + int(fields[12])) / _TICK
        m.rss = int(fields[21]) * _PAGE
        m.faults = int(fields[7]) + int(fields[9])
        return m

    def _read_io(self, m: _Member) -> tuple[float, float] | None:
        """(read bytes, written bytes) of ``/proc/PID/io``, None if unreadable."""
        if not m.io_ok or m.zombie:
            return None
        try:
            if m.io_fd < 0 and m.stat_fd >= 0:
                m.io_fd = self._open(m.pid, "io")
            f = self._reread(m, m.io_fd, "io").split()
            if f[8] != b"read_bytes:" or f[10] != b"write_bytes:":
                raise ValueError("unexpected layout")
            return float(f[9]), float(f[11])
        except (FileNotFoundError, ProcessLookupError):
            return None
        except (OSError, ValueError, IndexError) as exc:
            m.io_ok = False  # e.g. another user's process: not tried again
            self._log(
                "io",
                "cannot read disk I/O counters of process %d (%s); its disk bytes are left out",
                m.pid,
                exc,
            )
            return None

    def _statm(self, m: _Member) -> None:
        """``m``'s anonymous and file + shmem RSS from ``/proc/PID/statm`` (kept as they were
        when it cannot be read: it is exiting)."""
        try:
            if m.statm_fd < 0 and m.stat_fd >= 0:
                m.statm_fd = self._open(m.pid, "statm")
            f = self._reread(m, m.statm_fd, "statm").split()
            resident, shared = int(f[1]) * _PAGE, int(f[2]) * _PAGE
        except (OSError, ValueError, IndexError):
            return
        m.anon, m.shared = max(0, resident - shared), shared

    def _pss_tree(self, members: list[_Member], mono: float, changed: bool) -> None:
        """Read the PSS of every process of ``members`` when the rules of the module doc
        call for it."""
        if self._budget_at is not None:
            cap = max(2.0 * self._pss_cost, PSS_SHARE)
            self._pss_budget = min(cap, self._pss_budget + (mono - self._budget_at) * PSS_SHARE)
        self._budget_at = mono
        if not members:
            return
        need = changed or any(m.pss is None for m in members)
        if not need:
            est = drift = 0.0
            for m in members:
                e, d = m.estimate()
                est += e
                drift += d
            need = drift > max(PSS_DRIFT * est, PSS_DRIFT_FLOOR)
        if not need and self._pss_budget >= self._pss_cost:
            period = PSS_REFRESH_SOLO_S if len(members) == 1 else PSS_REFRESH_S
            need = mono - self._pss_at >= period or any(
                m.base != (m.anon, m.shared, m.faults) for m in members
            )
        if not need:
            return
        t0 = time.thread_time()  # CPU time: a loaded machine does not lengthen it
        for m in members:
            m.base = before = (m.anon, m.shared, m.faults)
            try:
                got = _read_pss(f"{self._proc_s}/{m.pid}")
            except (FileNotFoundError, ProcessLookupError):
                got = None
            except (OSError, ValueError) as exc:
                m.pss_ok = False
                self._log(
                    "pss",
                    "cannot read PSS of process %d (%s); using RSS, which counts "
                    "pages shared between processes more than once",
                    m.pid,
                    exc,
                )
                continue
            m.pss, m.shared_anon = (None, 0.0) if got is None else got
            # statm again: what moved while smaps_rollup was read may be in the PSS or not
            # (counted twice, or not at all, by an estimate from the earlier base)
            self._statm(m)
            m.base = (m.anon, m.shared, m.faults)
            m.unsure = float(abs(m.anon - before[0]) + abs(m.shared - before[1]))
        self._pss_cost = time.thread_time() - t0
        self._pss_budget -= self._pss_cost
        self._pss_at = mono
        self.pss_reads += 1

    def tree(self, mono: float | None = None) -> list[ProcInfo]:
        """The processes of the trial now, the sampler's own subtree left out."""
        mono = time.monotonic() if mono is None else mono
        forks = self._forks_since_boot()
        members: dict[int, _Member] = {}
        if forks is None or forks != self._forks:
            listing = self._scan()
            for pid in self._discover(listing):
                m = self._stat(pid, listing[pid])
                if m is not None:
                    members[pid] = m
        else:  # no process was made since the last scan: the tree can only have shrunk
            for pid, m in list(self._members.items()):
                got = self._stat(pid, m.ino)
                if got is not None:
                    members[pid] = got
        self._forks = forks
        for pid, old in self._members.items():
            if members.get(pid) is not old:
                self._close(old)
        self._members = members
        live = frozenset((m.pid, m.start) for m in members.values() if not m.zombie)
        changed = live != self._live  # a process came or went: shared pages changed hands
        self._live = live
        alive = [m for m in members.values() if not m.zombie]
        for m in alive:
            self._statm(m)
        self._pss_tree([m for m in alive if m.pss_ok], mono, changed)
        out: list[ProcInfo] = []
        for m in members.values():
            io = self._read_io(m)
            mem: float | None = None
            if m.zombie:
                pass
            elif not m.pss_ok:
                mem = float(m.rss)
            elif m.pss is not None:
                mem = m.estimate()[0]
            out.append(
                ProcInfo(
                    m.pid,
                    m.create_time,
                    m.cpu,
                    mem,
                    m.pss_ok,
                    m.zombie,
                    io,
                    m.ppid,
                )
            )
        return out

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
        return float(limit if limit is not None else _PAGE * os.sysconf("SC_PHYS_PAGES"))

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
                ns, text = self._net_dev(pid)
                got = (ns, parse_net_dev(text.decode("ascii")))
            except (OSError, UnicodeDecodeError):
                continue
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

    def _net_dev(self, pid: int) -> tuple[int, bytes]:
        """(namespace inode, ``/proc/PID/net/dev``) of process ``pid``, through the descriptor
        kept from the previous read while ``pid`` is in the same namespace (a descriptor is
        bound to the namespace it was opened in: a process that moved, or a pid that left,
        opens anew)."""
        ns = os.stat(f"{self._proc_s}/{pid}/ns/net").st_ino
        kept = self._net_fd
        if kept is None or kept[0] != pid or kept[1] != ns:
            self._close_net()
            fd = os.open(f"{self._proc_s}/{pid}/net/dev", os.O_RDONLY | os.O_CLOEXEC)
            self._net_fd = kept = (pid, ns, fd)
        return ns, _pread_whole(kept[2], _READ)  # many interfaces: more than _READ

    def _close_net(self) -> None:
        if self._net_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._net_fd[2])
            self._net_fd = None

    # ------------------------------------------------------------------ the whole host
    def _host_fd(self, name: str) -> int:
        """A descriptor of ``/proc/NAME``, kept open (procfs regenerates the file per read)."""
        fd = self._host_fds.get(name)
        if fd is None:
            fd = self._host_fds[name] = os.open(
                f"{self._proc_s}/{name}", os.O_RDONLY | os.O_CLOEXEC
            )
        return fd

    def _host_read(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes of ``/proc/NAME`` (see :meth:`_host_fd`)."""
        return os.pread(self._host_fd(name), size, 0)

    def _forks_since_boot(self) -> int | None:
        """The ``processes`` line of ``/proc/stat`` (processes and threads made since boot),
        read with the rest of the file for :meth:`_host_cpu`; None if unreadable."""
        try:  # a machine with many interrupts has a long one: read as long as the last
            text = _pread_whole(self._host_fd("stat"), max(_READ, 2 * len(self._host_stat)))
        except OSError:
            self._host_stat = b""
            return None
        self._host_stat = text
        at = text.find(b"\nprocesses ")
        if at < 0:
            return None
        try:
            return int(text[at + 11 : text.index(b"\n", at + 1)])
        except ValueError:
            return None

    def _meminfo(self) -> tuple[float, float]:
        """(MemTotal, MemAvailable) of ``/proc/meminfo`` in bytes."""
        total = available = None
        for line in self._host_read("meminfo", 16384).split(b"\n"):
            if line.startswith(b"MemTotal:"):
                total = float(line.split()[1]) * 1024.0
            elif line.startswith(b"MemAvailable:"):
                available = float(line.split()[1]) * 1024.0
                break
        if total is None:
            raise ValueError("no MemTotal in meminfo")
        if available is None:  # pragma: no cover - Linux before 3.14
            import psutil

            available = float(psutil.virtual_memory().available)
        return total, available

    def _host_cpu(self) -> float | None:
        """% of the host's CPU time busy since the previous call (the first primes it), as
        ``psutil.cpu_percent()`` counts it: all time less idle and iowait, guest time being
        part of user time already."""
        line = (self._host_stat or self._host_read("stat", _READ)).split(b"\n", 1)[0]
        f = [float(x) for x in line.split()[1:]]
        f += [0.0] * (10 - len(f))
        total = sum(f[:8])  # user nice system idle iowait irq softirq steal
        idle = f[3] + f[4]
        prev, self._host_cpu_prev = self._host_cpu_prev, (total, idle)
        if prev is None:
            return None
        d_total = total - prev[0]
        if d_total <= 0:
            return 0.0
        return max(0.0, min(100.0, (d_total - max(0.0, idle - prev[1])) / d_total * 100.0))

    # ------------------------------------------------------------------ one sample
    def sample(self, mono: float) -> dict[str, float]:
        """Read every host metric at monotonic time ``mono`` (seconds); keys are catalog
        keys, values in base units. Never raises for a process that vanished."""
        procs = self.tree(mono)
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
            total, available = self._meminfo()
            values["host.mem.used"] = total - available
        except (OSError, ValueError) as exc:  # pragma: no cover - /proc unreadable
            self._log("host-mem", "cannot read host memory (%s)", exc)
        try:
            host_cpu = self._host_cpu()
            if host_cpu is not None and not first:
                values["host.cpu.util"] = host_cpu
        except (OSError, ValueError) as exc:  # pragma: no cover - /proc unreadable
            self._log("host-cpu", "cannot read host CPU use (%s)", exc, level=logging.WARNING)
        return values
