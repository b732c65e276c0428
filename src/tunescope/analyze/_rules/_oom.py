"""Out of memory, and near it: the ``oom`` finding (a trial that ran out of memory, as its
recorded end says), ``near_oom_gpu`` (each GPU) and ``near_oom_cpu`` (the trial's CPU memory
against its limit).

A trial ends ``failed`` with ``out of memory (killed by the kernel)`` when the kernel's OOM
killer ended it (the sampler read its memory cgroup's ``oom_kill`` counter and the exit
signal), and with ``out of memory (CUDA)...`` when ``torch.cuda.OutOfMemoryError`` ended it
(see ``tunescope/_protocol.py``). The ``oom`` finding shows the memory series' last minute
before the end (``cpu.mem`` for the kernel's kill; for CUDA the torch allocator's
``torch.mem.allocated``, else ``gpu.mem``, on the device that held the most) and gives the
advice of the near-OOM rules.

Each is a :class:`Rule` (see ``_rule.py``): its metadata, settings, measurement (a dataclass),
judgement and words together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope._protocol import OOM_CUDA, OOM_KERNEL
from tunescope.analyze._data import TrialData
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import dur, pct, size

__all__ = ["MAX_EVIDENCE_POINTS", "NearOomCpu", "NearOomGpu", "OutOfMemory"]

MAX_EVIDENCE_POINTS = 240
"""At most this many (t, bytes) points of the last minute in the evidence (the last ones)."""
DEVICE_WIDE = "device-wide"
"""Start of the sampler's note on a ``gpu.mem`` series that holds the device's used memory."""

ADVICE_GPU_OOM = (
    "Lower the per-device batch size and keep the effective batch with gradient accumulation.",
    "Enable activation (gradient) checkpointing.",
    "Use bf16 mixed precision; for fine-tunes, LoRA/QLoRA adapters or 8-bit optimizers "
    "shrink the optimizer state.",
    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to reduce fragmentation (what "
    "allocator retries point at).",
    "Shard weights and optimizer state across GPUs (FSDP, DeepSpeed ZeRO).",
)
ADVICE_CPU_MEM = (
    "Raise the trial's memory limit (container, cgroup or job spec) if the host has room.",
    "Hold less in RAM: memory-map datasets (Arrow, numpy.memmap) instead of loading them, "
    "and drop references to large objects once used.",
    "Fewer or lighter DataLoader workers: each holds prefetch_factor batches and its own "
    "copy of any Python objects it touches.",
    "A smaller batch size (with gradient accumulation to keep the effective batch).",
)


def _device_wide(d: TrialData, device: str | None) -> bool:
    tr = d.trace("gpu.mem", device)
    return tr is not None and (tr.series.note or "").startswith(DEVICE_WIDE)


# ---------------------------------------------------------------------- out of memory
@dataclass(frozen=True, kw_only=True)
class OomEnd:
    """How the trial ran out of memory (``kind``: ``kernel`` or ``cuda``), its recorded
    reason, and the memory series' points over the window before the end
    (``oom_window_s``: the last minute)."""

    kind: str
    reason: str
    end: float
    window_s: float
    points: tuple[tuple[float, float], ...]
    limit_bytes: float | None


@dataclass(frozen=True, kw_only=True)
class OomMeasured(Measured):
    oom: OomEnd

    @property
    def peak_bytes(self) -> float | None:
        return max((v for _t, v in self.oom.points), default=None)


class OutOfMemory(Rule[OomMeasured]):
    key = "oom"
    title = "Out of memory"
    severities = ("high",)
    uses = (FindingSettings.oom_window_s,)
    metrics = ("cpu.mem", "cpu.mem.limit", "torch.mem.allocated", "gpu.mem")
    summary = (
        "The trial ran out of memory: the kernel's OOM killer ended it, or a CUDA "
        "out-of-memory error did."
    )
    advice = ADVICE_CPU_MEM + ADVICE_GPU_OOM

    def measure(self, c: Case) -> OomMeasured | None:
        window = c.s.oom_window_s
        info = c.d.trial
        error = info.error or ""
        if info.state != "failed":
            return None
        if error.startswith(OOM_KERNEL):
            kind, candidates = "kernel", ["cpu.mem"]
        elif error.startswith(OOM_CUDA):
            kind, candidates = "cuda", ["torch.mem.allocated", "gpu.mem"]
        else:
            return None
        end = info.end if info.end is not None else info.heartbeat or info.start
        best: tuple[float, str, str | None, tuple[tuple[float, float], ...]] | None = None
        for metric in candidates:
            for device in c.d.devices(metric):
                tr = c.d.trace(metric, device)
                if tr is None:
                    continue
                keep = (tr.t >= end - window) & (tr.t <= end + 1.0)
                pts = tuple(
                    (float(t), float(v)) for t, v in zip(tr.t[keep], tr.hi[keep], strict=True)
                )[-MAX_EVIDENCE_POINTS:]
                peak = max((v for _t, v in pts), default=-math.inf)
                if pts and (best is None or peak > best[0]):
                    best = (peak, metric, device, pts)
            if best is not None:
                break  # the allocator's own series, when the trial has it
        limit = None
        if kind == "kernel":
            lim = c.d.trace("cpu.mem.limit")
            if lim is not None and len(lim) and np.isfinite(lim.v[-1]):
                limit = float(lim.v[-1])
        metric = best[1] if best is not None else candidates[0]
        return OomMeasured(
            oom=OomEnd(
                kind=kind,
                reason=error,
                end=end,
                window_s=window,
                points=best[3] if best is not None else (),
                limit_bytes=limit,
            ),
            t0=end - window,
            t1=end,
            metric=metric,
            device=best[2] if best is not None else None,
        )

    def judge(self, m: OomMeasured, s: FindingSettings) -> Severity | None:
        return "high"

    def say(self, m: OomMeasured, s: FindingSettings, severity: Severity) -> Said:
        o = m.oom
        peak = m.peak_bytes
        advice: tuple[str, ...]
        held = f"; in its last minute it held up to {size(peak)}" if peak is not None else ""
        if o.kind == "kernel":
            title = "Out of memory: the kernel's OOM killer ended the trial"
            limit = f" of the {size(o.limit_bytes)} it may use" if o.limit_bytes else ""
            message = (
                f"The trial's memory cgroup ran out and the kernel killed it{held}{limit}. "
                "Nothing of the training's own shutdown ran."
            )
            advice = ADVICE_CPU_MEM
        else:
            title = "Out of memory (CUDA): the GPU memory ran out"
            where = "" if m.device is None else f" on GPU {m.device}"
            message = f"torch.cuda.OutOfMemoryError ended the trial{where}{held} ({o.reason})."
            advice = ADVICE_GPU_OOM
        evidence: dict[str, Any] = {
            "kind": o.kind,
            "reason": o.reason,
            "end": o.end,
            "window_s": o.window_s,
            "metric": m.metric,
            "device": m.device,
            "last_minute": [[t, v] for t, v in o.points],
            "peak_bytes": peak,
            "limit_bytes": o.limit_bytes,
        }
        return Said(title, message, evidence, advice)


# ---------------------------------------------------------------------- near OOM (GPU)
@dataclass(frozen=True, kw_only=True)
class GpuMemPeak(Measured):
    """A GPU's peak memory against its size, and the torch allocator's retries. ``near``:
    the reasons it is near out-of-memory, as said in the message; the span covers the samples
    at or above the threshold and the retries."""

    total_bytes: float | None
    peak_pct: float
    peak_bytes: float | None
    device_peak_bytes: float | None
    alloc_retries: float | None
    near: tuple[str, ...]


class NearOomGpu(Rule[GpuMemPeak]):
    key = "near_oom_gpu"
    title = "Near out-of-memory (GPU)"
    severities = ("high",)
    uses = (FindingSettings.gpu_mem_near_oom_pct, FindingSettings.alloc_retries_min)
    metrics = ("gpu.mem", "gpu.mem.used", "gpu.mem.total", "torch.alloc_retries")
    summary = "Peak GPU memory near the device's memory, or torch allocator retries."
    advice = ADVICE_GPU_OOM
    each = "gpu"

    def measure(self, c: Case) -> GpuMemPeak | None:
        d, s, device = c.d, c.s, c.device
        mem, used = d.trace("gpu.mem", device), d.trace("gpu.mem.used", device)
        total_tr = d.trace("gpu.mem.total", device)
        retries_tr = d.trace("torch.alloc_retries", device)
        spans: list[float] = []
        near: list[str] = []
        total = peak_pct = math.nan
        has_total = total_tr is not None and (mem is not None or used is not None)
        if total_tr is not None and has_total:
            total = float(total_tr.v[-1])
            peaks = [(tr.peak(), tr) for tr in (mem, used) if tr is not None]
            peak, worst = max(peaks, key=lambda p: p[0])
            peak_pct = 100.0 * peak / total if total > 0 else math.nan
            if peak_pct >= s.gpu_mem_near_oom_pct:
                above = worst.hi >= s.gpu_mem_near_oom_pct / 100.0 * total
                spans += [float(worst.t[above].min()), float(worst.t[above].max())]
                whose = (
                    "the device"
                    if worst is used or _device_wide(d, device)
                    else "the trial's processes"
                )
                near.append(
                    f"{whose} held up to {size(peak)} of its {size(total)} ({pct(peak_pct)})"
                )
        retries = None
        if retries_tr is not None:
            retries = retries_tr.peak()
            least = s.alloc_retries_min
            if retries >= least > 0 or (least == 0 and retries > 0):
                rose = retries_tr.hi > retries_tr.lo[0]
                first = float(retries_tr.t[rose].min()) if rose.any() else float(retries_tr.t[0])
                last = float(retries_tr.t[int(np.argmax(retries_tr.hi))])
                spans += [first, last]
                near.append(
                    f"the torch allocator had to free its cache and retry {retries:.0f} time(s)"
                )
        return GpuMemPeak(
            total_bytes=total if has_total else None,
            peak_pct=peak_pct,
            peak_bytes=None if mem is None else mem.peak(),
            device_peak_bytes=None if used is None else used.peak(),
            alloc_retries=retries,
            near=tuple(near),
            t0=min(spans, default=None),
            t1=max(spans, default=None),
            metric="gpu.mem",
            device=device,
        )

    def judge(self, m: GpuMemPeak, s: FindingSettings) -> Severity | None:
        return "high" if m.near else None

    def say(self, m: GpuMemPeak, s: FindingSettings, severity: Severity) -> Said:
        evidence: dict[str, Any] = {
            "threshold_pct": s.gpu_mem_near_oom_pct,
            "retries_threshold": s.alloc_retries_min,
        }
        if m.total_bytes is not None:
            evidence.update(
                {
                    "total_bytes": m.total_bytes,
                    "peak_pct": m.peak_pct,
                    "peak_bytes": m.peak_bytes,
                    "device_peak_bytes": m.device_peak_bytes,
                }
            )
        if m.alloc_retries is not None:
            evidence["alloc_retries"] = m.alloc_retries
        return Said(
            f"Near out-of-memory on GPU {m.device}",
            f"On GPU {m.device}, {' and '.join(m.near)}: one larger batch or a longer "
            "sequence away from a CUDA out-of-memory error.",
            evidence,
            ADVICE_GPU_OOM,
        )


# ---------------------------------------------------------------------- near OOM (CPU)
@dataclass(frozen=True, kw_only=True)
class CpuMemPeak(Measured):
    """The trial's CPU memory at its peak share of the limit, and how long it stayed at or
    above the threshold (the span: those samples)."""

    peak_bytes: float
    limit_bytes: float
    peak_pct: float
    seconds_above: float


class NearOomCpu(Rule[CpuMemPeak]):
    key = "near_oom_cpu"
    title = "Near out-of-memory (CPU)"
    severities = ("high",)
    uses = (FindingSettings.cpu_mem_near_limit_pct,)
    metrics = ("cpu.mem", "cpu.mem.limit")
    summary = "Peak CPU memory of the trial near the limit it runs under."
    advice = ADVICE_CPU_MEM

    def measure(self, c: Case) -> CpuMemPeak | None:
        d, s = c.d, c.s
        mem, lim = d.trace("cpu.mem"), d.trace("cpu.mem.limit")
        if mem is None or lim is None or mem.samples < 1:
            return None
        limit = lim.at(mem.t, math.inf)
        ok = np.isfinite(limit) & (limit > 0)
        if not ok.any():
            return None
        ratio = np.where(ok, mem.hi / np.where(ok, limit, 1.0), 0.0) * 100.0
        k = int(np.argmax(ratio))
        above = ratio >= s.cpu_mem_near_limit_pct
        if not above.any():
            return None  # under the threshold: nothing to measure a span of
        return CpuMemPeak(
            peak_bytes=float(mem.hi[k]),
            limit_bytes=float(limit[k]),
            peak_pct=float(ratio[k]),
            seconds_above=float(mem.n[above].sum()) * d.interval(),
            t0=float(mem.t[above].min()),
            t1=float(mem.t[above].max()),
            metric="cpu.mem",
            device=None,
        )

    def judge(self, m: CpuMemPeak, s: FindingSettings) -> Severity | None:
        return None if m.peak_pct < s.cpu_mem_near_limit_pct else "high"

    def say(self, m: CpuMemPeak, s: FindingSettings, severity: Severity) -> Said:
        return Said(
            f"Near out-of-memory (CPU): peak at {pct(m.peak_pct)} of the memory limit",
            f"The trial's processes held up to {size(m.peak_bytes)} of RAM, "
            f"{pct(m.peak_pct)} of the {size(m.limit_bytes)} it may use, and stayed at "
            f"or above {pct(s.cpu_mem_near_limit_pct)} for about {dur(m.seconds_above)}; "
            "beyond the limit the kernel's OOM killer ends the trial.",
            {
                "peak_bytes": m.peak_bytes,
                "limit_bytes": m.limit_bytes,
                "peak_pct": m.peak_pct,
                "seconds_above": m.seconds_above,
                "threshold_pct": s.cpu_mem_near_limit_pct,
            },
            ADVICE_CPU_MEM,
        )
