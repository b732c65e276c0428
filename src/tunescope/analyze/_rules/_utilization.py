"""Findings on how much each GPU the trial holds computes: idle, under-used, and busy but not
working. One finding per GPU (``device`` is its index), so the page can select its series
(near out-of-memory on a GPU is in ``_oom.py``).

Each is a :class:`Rule` (see ``_rule.py``): its metadata, settings, measurement (a dataclass),
judgement and words together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tunescope.analyze._data import B, Trace, TrialData
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import pct, size

__all__ = ["BusyNotWorking", "GpuUnderused", "IdleGpu"]

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
