"""GPU probe: which GPUs the trial uses, and their readings as catalog metrics.

Which GPUs: those where any pid of the trial's process tree appears in the driver's process
list; once seen, a GPU stays selected for the rest of the trial. Where the driver cannot list
processes, the GPUs named by the root process's ``CUDA_VISIBLE_DEVICES`` (read from
``/proc/PID/environ``; indices or UUID prefixes), else all GPUs.

Containers: NVML reports pids of the host's pid namespace. A listed pid that is not a trial pid
but lives in a nested pid namespace (``NSpid`` in ``/proc/PID/status``: the first entry is its
pid where this ``/proc`` was mounted, the last its pid in its innermost namespace) is read as
that innermost pid when that is a trial pid: a sampler that sees the host's pids attributes
GPU memory to a trial whose pids are those inside its container. (When several namespaces'
processes would match, only the sampler's own namespace is taken; when that does not decide,
no pid is translated.) When processes are listed but none of them exists here (a process
counts as existing when ``/proc/PID`` is there or ``kill(pid, 0)`` answers anything but "no such
process": with ``hidepid=2`` other users' pids are hidden, not gone) and no trial pid was ever
matched, the pids are taken to be from another namespace: per-process information is treated
as unavailable from then on (logged once).

A failed process query after the driver has listed a GPU's processes before is "unknown":
that sample has no ``gpu.mem`` for it (never 0, never the device-wide value).

Shared GPUs and MIG: ``gpu.util`` is the whole device's, whoever runs on it; ``gpu.proc_util``
is the share of the trial's own processes (:mod:`tunescope.collect._gpushare`), recorded where
processes are listed and the driver reports their utilization. A MIG instance is a device of
its own, named ``<gpu>/mig<k>`` (:mod:`tunescope.collect._mig`); a GPU in MIG mode is not
sampled itself.

Emitted per selected device (device = the NVML index as a string, or ``0/mig1``), base units:
``gpu.util`` %, ``gpu.proc_util`` %, ``gpu.mem_bw.util`` %, ``gpu.mem`` bytes (the trial's
processes; the device's used memory with note :data:`DEVICE_WIDE_NOTE` when per-process memory
is unavailable), ``gpu.mem.used`` / ``gpu.mem.total`` bytes, ``gpu.power`` / ``gpu.power.limit``
W, ``gpu.temp`` °C, ``gpu.clock.sm`` MHz, ``gpu.throttle`` bitmask, ``gpu.energy`` J since the
sampler's first sample, and where GPM works ``gpu.sm_active``, ``gpu.tensor_active``,
``gpu.dram_active`` %.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

from tunescope._gpuid import cuda_to_nvml
from tunescope._once import Once
from tunescope.collect._gpu import GpuBackend, GpuInfo, GpuReading
from tunescope.collect._once import LOGGER_NAME

__all__ = [
    "DEVICE_WIDE_NOTE",
    "GPU_METRICS",
    "GpuProbe",
    "GpuValue",
    "cuda_to_nvml",
    "parse_visible_devices",
]

DEVICE_WIDE_NOTE = "device-wide: per-process memory unavailable"

GpuValue = tuple[str, str, float, str | None]
"""(metric key, device index as a string, value in base units, series note or None)."""

_READING_METRICS: tuple[tuple[str, str], ...] = (
    ("gpu.util", "util"),
    ("gpu.mem_bw.util", "mem_bw_util"),
    ("gpu.mem.used", "mem_used"),
    ("gpu.power", "power"),
    ("gpu.temp", "temp"),
    ("gpu.clock.sm", "clock_sm"),
    ("gpu.throttle", "throttle"),
)
_GPM_METRICS = (
    ("gpu.sm_active", "sm"),
    ("gpu.tensor_active", "tensor"),
    ("gpu.dram_active", "dram"),
)
GPU_METRICS: tuple[str, ...] = (
    *(k for k, _ in _READING_METRICS),
    "gpu.proc_util",
    "gpu.mem",
    "gpu.mem.total",
    "gpu.power.limit",
    "gpu.energy",
    *(k for k, _ in _GPM_METRICS),
)
"""Catalog keys this probe writes (device = GPU index, or ``<gpu>/mig<k>``)."""


def parse_visible_devices(value: str | None, infos: list[GpuInfo]) -> set[int] | None:
    """Backend indices of the devices named by a ``CUDA_VISIBLE_DEVICES`` value; None when
    unset (all).

    Like CUDA, parsing stops at the first token that names no device, so ``"-1"`` or ``""``
    select none. Tokens are GPU indices or (prefixes of) ``GPU-`` or ``MIG-`` UUIDs; a GPU in
    MIG mode (by index or UUID) stands for its instances. Indices are taken as NVML's (PCI bus)
    order, which matches CUDA when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """
    if value is None:
        return None
    chosen: set[int] = set()
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit():
            gpus = [i for i in infos if i.parent is None and i.index == int(token)]
        else:
            gpus = [i for i in infos if token and i.uuid.startswith(token)]
        if len(gpus) != 1:
            break
        g = gpus[0]
        chosen |= {i.index for i in infos if i.parent == g.index} if g.partitioned else {g.index}
    return chosen


def _nspid(proc: Path, pid: int) -> list[int] | None:
    """The ``NSpid`` entries of ``pid`` (outermost first), None when unreadable."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            try:
                return [int(x) for x in line.split()[1:]]
            except ValueError:
                return None
    return None


def _pid_namespace(proc: Path, pid: int | str) -> str | None:
    try:
        return os.readlink(proc / str(pid) / "ns" / "pid")
    except OSError:
        return None


EXEC_WAIT_S = 0.2
"""How long a process caught inside ``execve`` is waited for (see :func:`_environ_var`)."""


def _environ_var(pid: int, name: str, proc: Path) -> tuple[bool, str | None]:
    """(readable, value) of an environment variable of ``pid`` as it was at exec time.

    A process caught inside ``execve`` (its new memory in place, its arguments and environment
    not yet: ``/proc`` shows both empty, for microseconds that a busy machine stretches; the
    parent of a process just started may already have been told its ``exec`` succeeded) is
    read again until either shows, for up to :data:`EXEC_WAIT_S`."""
    base = proc / str(pid)
    deadline = time.monotonic() + EXEC_WAIT_S
    try:
        data = (base / "environ").read_bytes()
        while not data and not (base / "cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.005)
            data = (base / "environ").read_bytes()
    except OSError:
        return False, None
    prefix = name.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(prefix):
            return True, item[len(prefix) :].decode(errors="replace")
    return True, None


class GpuProbe:
    """Reads the trial's GPUs from a backend; see the module doc. Never raises."""

    def __init__(
        self,
        backend: GpuBackend,
        root_pid: int,
        *,
        log: Once | None = None,
        proc: Path = Path("/proc"),
    ) -> None:
        self.backend = backend
        self._log = log or Once(LOGGER_NAME)
        self._proc = proc
        infos: list[GpuInfo] = []
        try:
            count = backend.device_count()
            infos = [backend.device_info(i) for i in range(count)]
        except Exception as exc:
            self._log("gpu-info", "cannot list GPUs (%s); GPU metrics are left out", exc)
        self.infos = [i for i in infos if not i.partitioned]  # its MIG instances instead
        readable, cvd = _environ_var(root_pid, "CUDA_VISIBLE_DEVICES", proc)
        if not readable:
            self._log(
                "gpu-environ",
                "cannot read the environment of process %d; where GPU "
                "processes are not listed, every GPU is counted",
                root_pid,
                level=logging.INFO,
            )
        self.cuda_visible_devices = cvd
        """The root process's ``CUDA_VISIBLE_DEVICES`` (None: unset or unreadable)."""
        self.visible = parse_visible_devices(cvd, infos)
        self.selected: set[int] = set()
        self.foreign_namespace = False
        self._matched = False
        self._energy0: dict[int, float] = {}
        self._first = True
        self._listed_before: set[int] = set()
        self._nested: dict[int, tuple[int, str | None] | None] = {}

    def _exists(self, pid: int) -> bool:
        if pid <= 0:
            return False
        if (self._proc / str(pid)).exists():
            return True
        try:
            os.kill(pid, 0)
        except OSError as exc:
            return exc.errno != errno.ESRCH  # EPERM: it exists, /proc hides it (hidepid)
        return True

    def _translate(
        self, procs: dict[int, list[tuple[int, float | None]] | None], trial: set[int]
    ) -> dict[int, list[tuple[int, float | None]] | None]:
        """``procs`` with host pids of processes in a nested pid namespace read as their
        innermost pid where that is a trial pid (module doc)."""
        listed = {pid for ps in procs.values() if ps for pid, _ in ps}
        for gone in set(self._nested) - listed:
            del self._nested[gone]
        found: dict[int, tuple[int, str | None]] = {}
        for pid in listed - trial:
            if pid not in self._nested:
                ns = _nspid(self._proc, pid) if pid > 0 else None
                self._nested[pid] = (
                    (ns[-1], _pid_namespace(self._proc, pid)) if ns and len(ns) > 1 else None
                )
            nested = self._nested[pid]
            if nested is not None and nested[0] in trial:
                found[pid] = nested
        if not found:
            return procs
        spaces = {space for _, space in found.values()}
        if len(spaces) > 1:
            own = _pid_namespace(Path("/proc"), "self")
            if own not in spaces:
                self._log(
                    "gpu-pid-ambiguous",
                    "GPU processes of several pid namespaces match the trial's pids; "
                    "they are not attributed",
                    level=logging.INFO,
                )
                return procs
            found = {p: v for p, v in found.items() if v[1] == own}
        return {
            i: None if ps is None else [(found[p][0] if p in found else p, u) for p, u in ps]
            for i, ps in procs.items()
        }

    def _check_namespace(
        self, procs: dict[int, list[tuple[int, float | None]] | None], trial: set[int]
    ) -> None:
        if self._matched or self.foreign_namespace:
            return
        listed = {pid for ps in procs.values() if ps for pid, _ in ps}
        if listed & trial:
            self._matched = True
        elif listed and not any(self._exists(p) for p in listed):
            self.foreign_namespace = True
            self._log(
                "gpu-pid-namespace",
                "the GPU driver lists process ids that do not "
                "exist here (another pid namespace, e.g. a container): recording "
                "device-wide GPU memory for the visible GPUs",
                level=logging.INFO,
            )

    def sample(self, trial_pids: set[int]) -> list[GpuValue]:
        """Read the trial's GPUs now. ``trial_pids``: pids of the trial's process tree."""
        try:
            return self._sample(trial_pids)
        except Exception as exc:  # a backend bug must not stop host sampling
            self._log("gpu-sample", "GPU sampling failed (%s: %s)", type(exc).__name__, exc)
            return []

    def _sample(self, trial_pids: set[int]) -> list[GpuValue]:
        b = self.backend
        procs = self._translate({i.index: b.processes(i.index) for i in self.infos}, trial_pids)
        self._check_namespace(procs, trial_pids)
        per_process: dict[int, bool] = {}
        unknown: set[int] = set()
        for info in self.infos:
            i = info.index
            listed = procs[i]
            if listed is not None:
                self._listed_before.add(i)
            elif i in self._listed_before and not self.foreign_namespace:
                unknown.add(i)  # a failed query: this sample says nothing of its processes
                per_process[i] = False
                continue
            per_process[i] = listed is not None and not self.foreign_namespace
            if per_process[i]:
                if listed and any(pid in trial_pids for pid, _ in listed):
                    self.selected.add(i)
            elif self.visible is None or i in self.visible:
                self.selected.add(i)
        readings: dict[int, GpuReading] = {}
        if self._first:
            self._first = False
            for info in self.infos:
                readings[info.index] = b.read(info.index)
        out: list[GpuValue] = []
        for info in self.infos:
            i = info.index
            if i not in readings and i in self.selected:
                readings[i] = b.read(i)
            r = readings.get(i)
            if r is not None and r.energy_mj is not None and i not in self._energy0:
                self._energy0[i] = r.energy_mj
            if i not in self.selected or r is None:
                continue
            values = self._values(info, r, procs[i] if per_process[i] else None, trial_pids)
            if i in unknown:
                values = [v for v in values if v[0] != "gpu.mem"]
            out.extend(values)
        return out

    def _values(
        self,
        info: GpuInfo,
        r: GpuReading,
        listed: list[tuple[int, float | None]] | None,
        trial_pids: set[int],
    ) -> list[GpuValue]:
        dev = info.device
        out: list[GpuValue] = []
        for key, attr in _READING_METRICS:
            v = getattr(r, attr)
            if v is not None:
                out.append((key, dev, float(v), None))
        if info.memory_total is not None:
            out.append(("gpu.mem.total", dev, info.memory_total, None))
        if info.power_limit is not None:
            out.append(("gpu.power.limit", dev, info.power_limit, None))
        mine = [used for pid, used in listed or [] if pid in trial_pids]
        if listed is not None and all(u is not None for u in mine):
            out.append(("gpu.mem", dev, float(sum(u for u in mine if u is not None)), None))
        elif r.mem_used is not None:
            if listed is not None:
                self._log(
                    "gpu-proc-mem",
                    "the GPU driver does not report per-process memory; "
                    "recording device-wide GPU memory",
                    level=logging.INFO,
                )
            out.append(("gpu.mem", dev, r.mem_used, DEVICE_WIDE_NOTE))
        if listed is not None:
            share = self.backend.process_util(info.index)
            if share is not None:
                mine_util = sum(u for pid, u in share if pid in trial_pids)
                out.append(("gpu.proc_util", dev, min(100.0, mine_util), None))
        e0 = self._energy0.get(info.index)
        if r.energy_mj is not None and e0 is not None:
            out.append(("gpu.energy", dev, max(0.0, r.energy_mj - e0) / 1000.0, None))
        if info.gpm_supported:
            g = self.backend.gpm(info.index)
            if g:
                for key, name in _GPM_METRICS:
                    if name in g:
                        out.append((key, dev, float(g[name]), None))
        return out

    def close(self) -> None:
        try:
            self.backend.close()
        except Exception:
            pass
