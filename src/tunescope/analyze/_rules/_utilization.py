"""Findings on each GPU the trial holds: near out-of-memory, idle, under-used, and busy but not
working. One finding per GPU (``device`` is its index), so the page can select its series.

Each is a :class:`Rule` (see ``_rule.py``): its metadata, settings, measurement (a dataclass),
judgement and words together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.analyze._data import B, Trace, TrialData
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import pct, size

__all__ = ["BusyNotWorking", "GpuUnderused", "IdleGpu", "NearOomGpu"]

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
ADVICE_UNDERUSED = (
    "Check the input pipeline first: a GPU that waits for batches shows low utilization "
    "(see the input-bound and CPU-bound findings).",
    "Raise the per-device batch size while memory allows (gradient accumulation does not "
    "raise utilization).",
    "Use larger, fused kernels: torch.compile, fused optimizers (AdamW(fused=True)), "
    "scaled_dot_product_attention / FlashAttention.",
    "Remove host-device synchronisations from the step (.item(), .cpu(), printing tensors).",
    "If it stays low, a smaller GPU or a MIG slice may do (see the right-size finding).",
)
ADVICE_BUSY = (
    "Small kernels keep a kernel always running without filling the SMs: raise the batch "
    "size, or pack short sequences together.",
    "Use bf16/fp16 so matrix multiplications run on tensor cores.",
    "Cut kernel-launch overhead: torch.compile (mode='reduce-overhead' uses CUDA graphs).",
    "Profile a few steps (torch.profiler, Nsight Systems) to find the kernels that dominate.",
)
ADVICE_IDLE = (
    "If the trial should use this GPU, check that the model and the batches are moved to it "
    "(model.to(device); DDP, FSDP or device_map covering every GPU).",
    "Otherwise do not hold it: hide it with CUDA_VISIBLE_DEVICES or request fewer GPUs; a "
    "process that only creates a CUDA context still holds the device.",
)


def _training_means(d: TrialData, device: str | None, metric: str) -> tuple[float, int, Any]:
    tr = d.trace(metric, device)
    if tr is None:
        return math.nan, 0, None
    mask = d.training(tr)
    return tr.mean(mask), int(tr.n[mask].sum()), (tr, mask)


def _device_wide(d: TrialData, device: str | None) -> bool:
    tr = d.trace("gpu.mem", device)
    return tr is not None and (tr.series.note or "").startswith(DEVICE_WIDE)


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


# ---------------------------------------------------------------------- idle
@dataclass(frozen=True, kw_only=True)
class Idleness(Measured):
    """The share of a GPU's samples at or under the idle utilization, over the whole trial
    (the span)."""

    idle_share_pct: float
    util_mean_pct: float
    mem_peak_bytes: float | None


class IdleGpu(Rule[Idleness]):
    key = "idle_gpu"
    title = "Idle GPU"
    severities = ("moderate",)
    uses = (
        FindingSettings.idle_gpu_util_pct,
        FindingSettings.idle_gpu_share_pct,
        FindingSettings.min_samples,
    )
    metrics = ("gpu.util", "gpu.mem")
    summary = "A GPU the trial holds that stays near 0% for most of the run."
    advice = ADVICE_IDLE
    each = "gpu"

    def measure(self, c: Case) -> Idleness | None:
        d, s, device = c.d, c.s, c.device
        util = d.trace("gpu.util", device)
        if util is None or util.samples < s.min_samples:
            return None
        idle = util.v <= s.idle_gpu_util_pct
        mem = d.trace("gpu.mem", device)
        return Idleness(
            idle_share_pct=100.0 * float(util.n[idle].sum()) / float(util.n.sum()),
            util_mean_pct=util.mean(),
            mem_peak_bytes=None if mem is None else mem.peak(),
            t0=float(util.t[0]),
            t1=float(util.t[-1]),
            metric="gpu.util",
            device=device,
        )

    def judge(self, m: Idleness, s: FindingSettings) -> Severity | None:
        return None if m.idle_share_pct < s.idle_gpu_share_pct else "moderate"

    def say(self, m: Idleness, s: FindingSettings, severity: Severity) -> Said:
        held = (
            ""
            if m.mem_peak_bytes is None
            else f" while holding up to {size(m.mem_peak_bytes)} of its memory"
        )
        return Said(
            f"GPU {m.device} sits idle",
            f"GPU {m.device} was at or under {pct(s.idle_gpu_util_pct)} utilization for "
            f"{pct(m.idle_share_pct)} of the trial (mean {pct(m.util_mean_pct)}){held}.",
            {
                "idle_share_pct": m.idle_share_pct,
                "util_mean_pct": m.util_mean_pct,
                "mem_peak_bytes": m.mem_peak_bytes,
                "idle_util_pct": s.idle_gpu_util_pct,
                "share_threshold_pct": s.idle_gpu_share_pct,
            },
            ADVICE_IDLE,
        )


# ---------------------------------------------------------------------- under-used
@dataclass(frozen=True, kw_only=True)
class GpuUse(Measured):
    """A GPU's mean utilization, and SM activity where GPM reports it, while training
    (evaluations left out; the span: the training samples). ``metric``: the signal that is
    low, utilization first."""

    util_mean_pct: float
    sm_active_mean_pct: float | None
    samples: int
    evaluation_s_excluded: float


class GpuUnderused(Rule[GpuUse]):
    key = "gpu_underused"
    title = "GPU under-used"
    severities = ("moderate",)
    uses = (
        FindingSettings.gpu_underused_util_pct,
        FindingSettings.sm_active_low_pct,
        FindingSettings.busy_util_pct,
        FindingSettings.min_samples,
    )
    metrics = ("gpu.util", "gpu.sm_active")
    summary = (
        "Mean GPU utilization, or SM activity where GPM reports it, low while training "
        "(evaluations left out)."
    )
    advice = ADVICE_UNDERUSED
    each = "gpu"
    yields_to = ("idle_gpu",)

    def measure(self, c: Case) -> GpuUse | None:
        d, s, device = c.d, c.s, c.device
        util_mean, n, got = _training_means(d, device, "gpu.util")
        if got is None or n < s.min_samples:
            return None
        sm_mean, n_sm, _ = _training_means(d, device, "gpu.sm_active")
        tr, mask = got
        low_util = util_mean < s.gpu_underused_util_pct
        return GpuUse(
            util_mean_pct=util_mean,
            sm_active_mean_pct=sm_mean if n_sm >= s.min_samples else None,
            samples=n,
            evaluation_s_excluded=sum(b - a for a, b in d.evaluations()),
            t0=float(tr.t[mask].min()),
            t1=float(tr.t[mask].max()),
            metric="gpu.util" if low_util else "gpu.sm_active",
            device=device,
        )

    def judge(self, m: GpuUse, s: FindingSettings) -> Severity | None:
        low_util = m.util_mean_pct < s.gpu_underused_util_pct
        sm = m.sm_active_mean_pct
        low_sm = sm is not None and sm < s.sm_active_low_pct
        if not (low_util or low_sm):
            return None
        if not low_util and m.util_mean_pct >= s.busy_util_pct:
            return None  # busy but not working says it better
        return "moderate"

    def say(self, m: GpuUse, s: FindingSettings, severity: Severity) -> Said:
        low_util = m.metric == "gpu.util"
        sm = m.sm_active_mean_pct
        parts = [f"utilization averaged {pct(m.util_mean_pct)}"]
        if sm is not None:
            parts.append(f"SM activity {pct(sm)}")
        limits = (
            f"under {pct(s.gpu_underused_util_pct)}"
            if low_util
            else f"SM activity under {pct(s.sm_active_low_pct)}, which NVIDIA reads as "
            "ineffective use"
        )
        shown = m.util_mean_pct if low_util or sm is None else sm
        return Said(
            f"GPU {m.device} under-used: {pct(shown)} "
            f"{'utilization' if low_util else 'SM activity'} while training",
            f"While training on GPU {m.device} (evaluations left out), "
            f"{' and '.join(parts)}: {limits}.",
            {
                "util_mean_pct": m.util_mean_pct,
                "sm_active_mean_pct": sm,
                "samples": m.samples,
                "evaluation_s_excluded": m.evaluation_s_excluded,
                "signal": m.metric,
                "util_threshold_pct": s.gpu_underused_util_pct,
                "sm_threshold_pct": s.sm_active_low_pct,
            },
            ADVICE_UNDERUSED,
        )


# ---------------------------------------------------------------------- busy, not working
@dataclass(frozen=True, kw_only=True)
class BusySm(Measured):
    """A busy GPU's mean utilization and SM activity (GPM) while training; the span: the
    samples where both held (all training samples if none)."""

    util_mean_pct: float
    sm_active_mean_pct: float
    tensor_active_mean_pct: float | None


@dataclass(frozen=True, kw_only=True)
class BusyPower(Measured):
    """Without GPM: a busy GPU's mean power draw against its limit while training (the
    span: the training samples)."""

    util_mean_pct: float
    power_mean_w: float
    power_limit_w: float

    @property
    def power_pct(self) -> float:
        return 100.0 * self.power_mean_w / self.power_limit_w


class BusyNotWorking(Rule[BusySm | BusyPower]):
    key = "busy_not_working"
    title = "Busy but not working"
    severities = ("moderate", "low")
    uses = (
        FindingSettings.busy_util_pct,
        FindingSettings.sm_active_low_pct,
        FindingSettings.busy_power_pct,
        FindingSettings.min_samples,
    )
    metrics = ("gpu.util", "gpu.sm_active", "gpu.power", "gpu.power.limit")
    summary = (
        "GPU utilization high while SM activity is low; without GPM, low power draw "
        "against the limit (a weaker signal, severity low)."
    )
    advice = ADVICE_BUSY
    each = "gpu"
    yields_to = ("idle_gpu",)

    def measure(self, c: Case) -> BusySm | BusyPower | None:
        d, s, device = c.d, c.s, c.device
        util_mean, n, got = _training_means(d, device, "gpu.util")
        if got is None or n < s.min_samples or util_mean < s.busy_util_pct:
            return None
        util_tr: Trace = got[0]
        sm_mean, n_sm, sm_got = _training_means(d, device, "gpu.sm_active")
        if n_sm >= s.min_samples:
            sm_tr, sm_mask = sm_got
            u = util_tr.at(sm_tr.t, 1.5 * d.interval())
            hit: B = sm_mask & (u >= s.busy_util_pct) & (sm_tr.v < s.sm_active_low_pct)
            pick = hit if hit.any() else sm_mask
            tensor_mean, _, _ = _training_means(d, device, "gpu.tensor_active")
            return BusySm(
                util_mean_pct=util_mean,
                sm_active_mean_pct=sm_mean,
                tensor_active_mean_pct=tensor_mean if math.isfinite(tensor_mean) else None,
                t0=float(sm_tr.t[pick].min()),
                t1=float(sm_tr.t[pick].max()),
                metric="gpu.sm_active",
                device=device,
            )
        power_mean, n_p, p_got = _training_means(d, device, "gpu.power")
        limit_tr = d.trace("gpu.power.limit", device)
        if n_p < s.min_samples or limit_tr is None or not limit_tr.mean() > 0:
            return None
        p_tr, p_mask = p_got
        return BusyPower(
            util_mean_pct=util_mean,
            power_mean_w=power_mean,
            power_limit_w=limit_tr.mean(),
            t0=float(p_tr.t[p_mask].min()),
            t1=float(p_tr.t[p_mask].max()),
            metric="gpu.power",
            device=device,
        )

    def judge(self, m: BusySm | BusyPower, s: FindingSettings) -> Severity | None:
        if isinstance(m, BusySm):
            return None if m.sm_active_mean_pct >= s.sm_active_low_pct else "moderate"
        return None if m.power_pct >= s.busy_power_pct else "low"

    def say(self, m: BusySm | BusyPower, s: FindingSettings, severity: Severity) -> Said:
        util, device = m.util_mean_pct, m.device
        if isinstance(m, BusySm):
            sm = m.sm_active_mean_pct
            return Said(
                f"GPU {device} busy but not working: {pct(util)} utilization, "
                f"{pct(sm)} SM activity",
                f"While training, GPU {device} reported {pct(util)} utilization (a "
                f"kernel was running) but its SMs were only {pct(sm)} active "
                f"(GPM): the kernels occupy a fraction of the GPU.",
                {
                    "util_mean_pct": util,
                    "sm_active_mean_pct": sm,
                    "tensor_active_mean_pct": m.tensor_active_mean_pct,
                    "signal": "gpu.sm_active",
                    "util_threshold_pct": s.busy_util_pct,
                    "sm_threshold_pct": s.sm_active_low_pct,
                },
                ADVICE_BUSY,
            )
        return Said(
            f"GPU {device} busy but drawing little power (weaker signal: no SM activity "
            "on this GPU)",
            f"While training, GPU {device} reported {pct(util)} utilization but drew "
            f"{m.power_mean_w:.0f} W, {pct(m.power_pct)} of its {m.power_limit_w:.0f} W limit. "
            "This GPU has no GPM, so SM activity cannot confirm it: low power under high "
            "utilization often means small kernels that leave most SMs idle, but memory-"
            "bound work draws little power too.",
            {
                "util_mean_pct": util,
                "power_mean_w": m.power_mean_w,
                "power_limit_w": m.power_limit_w,
                "power_pct": m.power_pct,
                "signal": "gpu.power",
                "weak_signal": True,
                "util_threshold_pct": s.busy_util_pct,
                "power_threshold_pct": s.busy_power_pct,
            },
            ADVICE_BUSY,
        )
