"""Rules on each GPU the trial holds: near out-of-memory, idle, under-used, and busy but not
working. One finding per GPU (``device`` is its index), so the page can select its series."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tunescope.analyze._data import TrialData
from tunescope.analyze._finding import Finding
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import pct, size

__all__ = ["busy_not_working", "gpu_devices", "gpu_underused", "idle_gpu", "near_oom_gpu"]

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


def gpu_devices(d: TrialData) -> list[str]:
    """GPU indices the trial has series for (utilization or memory), sorted."""
    devs = {x for m in ("gpu.util", "gpu.mem") for x in d.devices(m) if x is not None}
    return sorted(devs, key=lambda x: (len(x), x))


def near_oom_gpu(d: TrialData, s: FindingSettings, device: str) -> list[Finding]:
    """Peak GPU memory near the device's memory, or torch allocator retries."""
    mem, used = d.trace("gpu.mem", device), d.trace("gpu.mem.used", device)
    total_tr = d.trace("gpu.mem.total", device)
    retries_tr = d.trace("torch.alloc_retries", device)
    evidence: dict[str, Any] = {
        "threshold_pct": s.gpu_mem_near_oom_pct,
        "retries_threshold": s.alloc_retries_min,
    }
    spans: list[float] = []
    reasons: list[str] = []
    peak_pct = math.nan
    if total_tr is not None and (mem is not None or used is not None):
        total = float(total_tr.v[-1])
        peaks = [(tr.peak(), tr) for tr in (mem, used) if tr is not None]
        peak, worst = max(peaks, key=lambda p: p[0])
        peak_pct = 100.0 * peak / total if total > 0 else math.nan
        evidence.update(
            {
                "total_bytes": total,
                "peak_pct": peak_pct,
                "peak_bytes": None if mem is None else mem.peak(),
                "device_peak_bytes": None if used is None else used.peak(),
            }
        )
        if peak_pct >= s.gpu_mem_near_oom_pct:
            above = worst.hi >= s.gpu_mem_near_oom_pct / 100.0 * total
            spans += [float(worst.t[above].min()), float(worst.t[above].max())]
            whose = (
                "the device"
                if worst is used or _device_wide(d, device)
                else "the trial's processes"
            )
            reasons.append(
                f"{whose} held up to {size(peak)} of its {size(total)} ({pct(peak_pct)})"
            )
    retries = 0.0
    if retries_tr is not None:
        retries = retries_tr.peak()
        evidence["alloc_retries"] = retries
        if retries >= s.alloc_retries_min > 0 or (s.alloc_retries_min == 0 and retries > 0):
            rose = retries_tr.hi > retries_tr.lo[0]
            first = float(retries_tr.t[rose].min()) if rose.any() else float(retries_tr.t[0])
            last = float(retries_tr.t[int(np.argmax(retries_tr.hi))])
            spans += [first, last]
            reasons.append(
                f"the torch allocator had to free its cache and retry {retries:.0f} time(s)"
            )
    if not reasons:
        return []
    return [
        Finding(
            rule="near_oom_gpu",
            trial_id=d.trial.id,
            severity="high",
            title=f"Near out-of-memory on GPU {device}",
            message=f"On GPU {device}, {' and '.join(reasons)}: one larger batch or a longer "
            "sequence away from a CUDA out-of-memory error.",
            evidence=evidence,
            t0=min(spans),
            t1=max(spans),
            metric="gpu.mem",
            device=device,
            advice=ADVICE_GPU_OOM,
        )
    ]


def _device_wide(d: TrialData, device: str) -> bool:
    tr = d.trace("gpu.mem", device)
    return tr is not None and (tr.series.note or "").startswith(DEVICE_WIDE)


def idle_gpu(d: TrialData, s: FindingSettings, device: str) -> list[Finding]:
    """A GPU the trial holds that stays near 0% for most of the run."""
    util = d.trace("gpu.util", device)
    if util is None or util.samples < s.min_samples:
        return []
    idle = util.v <= s.idle_gpu_util_pct
    share = 100.0 * float(util.n[idle].sum()) / float(util.n.sum())
    if share < s.idle_gpu_share_pct:
        return []
    mem = d.trace("gpu.mem", device)
    held = "" if mem is None else f" while holding up to {size(mem.peak())} of its memory"
    return [
        Finding(
            rule="idle_gpu",
            trial_id=d.trial.id,
            severity="moderate",
            title=f"GPU {device} sits idle",
            message=(
                f"GPU {device} was at or under {pct(s.idle_gpu_util_pct)} utilization for "
                f"{pct(share)} of the trial (mean {pct(util.mean())}){held}."
            ),
            evidence={
                "idle_share_pct": share,
                "util_mean_pct": util.mean(),
                "mem_peak_bytes": None if mem is None else mem.peak(),
                "idle_util_pct": s.idle_gpu_util_pct,
                "share_threshold_pct": s.idle_gpu_share_pct,
            },
            t0=float(util.t[0]),
            t1=float(util.t[-1]),
            metric="gpu.util",
            device=device,
            advice=ADVICE_IDLE,
        )
    ]


def _training_means(d: TrialData, device: str, metric: str) -> tuple[float, int, Any]:
    tr = d.trace(metric, device)
    if tr is None:
        return math.nan, 0, None
    mask = d.training(tr)
    return tr.mean(mask), int(tr.n[mask].sum()), (tr, mask)


def gpu_underused(d: TrialData, s: FindingSettings, device: str) -> list[Finding]:
    """Mean utilization (or GPM SM activity) low while training, evaluations left out."""
    util_mean, n, got = _training_means(d, device, "gpu.util")
    if got is None or n < s.min_samples:
        return []
    sm_mean, n_sm, _ = _training_means(d, device, "gpu.sm_active")
    has_sm = n_sm >= s.min_samples
    low_util = util_mean < s.gpu_underused_util_pct
    low_sm = has_sm and sm_mean < s.sm_active_low_pct
    if not (low_util or low_sm):
        return []
    if not low_util and util_mean >= s.busy_util_pct:
        return []  # busy but not working says it better
    tr, mask = got
    excluded = sum(b - a for a, b in d.evaluations())
    parts = [f"utilization averaged {pct(util_mean)}"]
    if has_sm:
        parts.append(f"SM activity {pct(sm_mean)}")
    metric = "gpu.util" if low_util else "gpu.sm_active"
    limits = (
        f"under {pct(s.gpu_underused_util_pct)}"
        if low_util
        else f"SM activity under {pct(s.sm_active_low_pct)}, which NVIDIA reads as ineffective use"
    )
    return [
        Finding(
            rule="gpu_underused",
            trial_id=d.trial.id,
            severity="moderate",
            title=f"GPU {device} under-used: {pct(util_mean if low_util else sm_mean)} "
            f"{'utilization' if low_util else 'SM activity'} while training",
            message=(
                f"While training on GPU {device} (evaluations left out), "
                f"{' and '.join(parts)}: {limits}."
            ),
            evidence={
                "util_mean_pct": util_mean,
                "sm_active_mean_pct": sm_mean if has_sm else None,
                "samples": n,
                "evaluation_s_excluded": excluded,
                "signal": metric,
                "util_threshold_pct": s.gpu_underused_util_pct,
                "sm_threshold_pct": s.sm_active_low_pct,
            },
            t0=float(tr.t[mask].min()),
            t1=float(tr.t[mask].max()),
            metric=metric,
            device=device,
            advice=ADVICE_UNDERUSED,
        )
    ]


def busy_not_working(d: TrialData, s: FindingSettings, device: str) -> list[Finding]:
    """GPU-Util high while SM activity is low; without GPM, low power against the limit."""
    util_mean, n, got = _training_means(d, device, "gpu.util")
    if got is None or n < s.min_samples or util_mean < s.busy_util_pct:
        return []
    util_tr = got[0]
    sm_mean, n_sm, sm_got = _training_means(d, device, "gpu.sm_active")
    if n_sm >= s.min_samples:
        if sm_mean >= s.sm_active_low_pct:
            return []
        sm_tr, sm_mask = sm_got
        u = util_tr.at(sm_tr.t, 1.5 * d.interval())
        hit = sm_mask & (u >= s.busy_util_pct) & (sm_tr.v < s.sm_active_low_pct)
        pick = hit if hit.any() else sm_mask
        tensor_mean, _, _ = _training_means(d, device, "gpu.tensor_active")
        return [
            Finding(
                rule="busy_not_working",
                trial_id=d.trial.id,
                severity="moderate",
                title=f"GPU {device} busy but not working: {pct(util_mean)} utilization, "
                f"{pct(sm_mean)} SM activity",
                message=(
                    f"While training, GPU {device} reported {pct(util_mean)} utilization (a "
                    f"kernel was running) but its SMs were only {pct(sm_mean)} active "
                    f"(GPM): the kernels occupy a fraction of the GPU."
                ),
                evidence={
                    "util_mean_pct": util_mean,
                    "sm_active_mean_pct": sm_mean,
                    "tensor_active_mean_pct": tensor_mean if math.isfinite(tensor_mean) else None,
                    "signal": "gpu.sm_active",
                    "util_threshold_pct": s.busy_util_pct,
                    "sm_threshold_pct": s.sm_active_low_pct,
                },
                t0=float(sm_tr.t[pick].min()),
                t1=float(sm_tr.t[pick].max()),
                metric="gpu.sm_active",
                device=device,
                advice=ADVICE_BUSY,
            )
        ]
    power_mean, n_p, p_got = _training_means(d, device, "gpu.power")
    limit_tr = d.trace("gpu.power.limit", device)
    if n_p < s.min_samples or limit_tr is None or not limit_tr.mean() > 0:
        return []
    limit = limit_tr.mean()
    share = 100.0 * power_mean / limit
    if share >= s.busy_power_pct:
        return []
    p_tr, p_mask = p_got
    return [
        Finding(
            rule="busy_not_working",
            trial_id=d.trial.id,
            severity="low",
            title=f"GPU {device} busy but drawing little power (weaker signal: no SM activity "
            "on this GPU)",
            message=(
                f"While training, GPU {device} reported {pct(util_mean)} utilization but drew "
                f"{power_mean:.0f} W, {pct(share)} of its {limit:.0f} W limit. This GPU "
                "has no GPM, so SM activity cannot confirm it: low power under high "
                "utilization often means small kernels that leave most SMs idle, but memory-"
                "bound work draws little power too."
            ),
            evidence={
                "util_mean_pct": util_mean,
                "power_mean_w": power_mean,
                "power_limit_w": limit,
                "power_pct": share,
                "signal": "gpu.power",
                "weak_signal": True,
                "util_threshold_pct": s.busy_util_pct,
                "power_threshold_pct": s.busy_power_pct,
            },
            t0=float(p_tr.t[p_mask].min()),
            t1=float(p_tr.t[p_mask].max()),
            metric="gpu.power",
            device=device,
            advice=ADVICE_BUSY,
        )
    ]
