"""GPU probe: which GPUs the trial uses, and their readings as catalog metrics.

Which GPUs: those where any pid of the trial's process tree appears in the driver's process
list; once seen, a GPU stays selected for the rest of the trial. Where the driver cannot list
processes, the GPUs named by the root process's ``CUDA_VISIBLE_DEVICES`` (read from
``/proc/PID/environ``; indices or UUID prefixes), else all GPUs.

Containers: NVML reports pids of the host's pid namespace. When processes are listed but none
of them exists here and no trial pid was ever matched, the pids are taken to be from another
namespace: per-process information is treated as unavailable from then on (logged once).

Emitted per selected GPU (device = the NVML index as a string), base units:
``gpu.util`` %, ``gpu.mem_bw.util`` %, ``gpu.mem`` bytes (the trial's processes; the device's
used memory with note :data:`DEVICE_WIDE_NOTE` when per-process memory is unavailable),
``gpu.mem.used`` / ``gpu.mem.total`` bytes, ``gpu.power`` / ``gpu.power.limit`` W, ``gpu.temp``
°C, ``gpu.clock.sm`` MHz, ``gpu.throttle`` bitmask, ``gpu.energy`` J since the sampler's first
sample, and where GPM works ``gpu.sm_active``, ``gpu.tensor_active``, ``gpu.dram_active`` %.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tunescope._once import Once
from tunescope.collect._gpu import GpuBackend, GpuInfo, GpuReading
from tunescope.collect._once import LOGGER_NAME

__all__ = ["DEVICE_WIDE_NOTE", "GPU_METRICS", "GpuProbe", "GpuValue", "parse_visible_devices"]

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
    "gpu.mem",
    "gpu.mem.total",
    "gpu.power.limit",
    "gpu.energy",
    *(k for k, _ in _GPM_METRICS),
)
"""Catalog keys this probe writes (device = GPU index)."""


def parse_visible_devices(value: str | None, infos: list[GpuInfo]) -> set[int] | None:
    """NVML indices named by a ``CUDA_VISIBLE_DEVICES`` value; None when unset (all).

    Like CUDA, parsing stops at the first token that names no device, so ``"-1"`` or ``""``
    select none. Tokens are indices or (prefixes of) ``GPU-`` UUIDs. Indices are taken as
    NVML's (PCI bus) order, which matches CUDA when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """
    if value is None:
        return None
    chosen: set[int] = set()
    for token in (t.strip() for t in value.split(",")):
        if token.isdigit() and int(token) < len(infos):
            chosen.add(int(token))
            continue
        match = [i.index for i in infos if token and i.uuid.startswith(token)]
        if len(match) != 1:
            break
        chosen.add(match[0])
    return chosen


def _environ_var(pid: int, name: str, proc: Path) -> tuple[bool, str | None]:
    """(readable, value) of an environment variable of ``pid`` as it was at exec time."""
    try:
        data = (proc / str(pid) / "environ").read_bytes()
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
        self.infos: list[GpuInfo] = []
        try:
            count = backend.device_count()
            self.infos = [backend.device_info(i) for i in range(count)]
        except Exception as exc:
            self._log("gpu-info", "cannot list GPUs (%s); GPU metrics are left out", exc)
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
        self.visible = parse_visible_devices(cvd, self.infos)
        self.selected: set[int] = set()
        self.foreign_namespace = False
        self._matched = False
        self._energy0: dict[int, float] = {}
        self._first = True

    def _exists(self, pid: int) -> bool:
        return pid > 0 and (self._proc / str(pid)).exists()

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
        procs = {i.index: b.processes(i.index) for i in self.infos}
        self._check_namespace(procs, trial_pids)
        per_process: dict[int, bool] = {}
        for info in self.infos:
            i = info.index
            listed = procs[i]
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
            out.extend(self._values(info, r, procs[i] if per_process[i] else None, trial_pids))
        return out

    def _values(
        self,
        info: GpuInfo,
        r: GpuReading,
        listed: list[tuple[int, float | None]] | None,
        trial_pids: set[int],
    ) -> list[GpuValue]:
        dev = str(info.index)
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
