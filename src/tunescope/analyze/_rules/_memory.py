"""Findings on memory over time, for CPU memory and each GPU's alike (``each = "memory"``):
memory that keeps growing through training, and what each evaluation adds to it.

Each is a :class:`Rule` (see ``_rule.py``): its metadata, settings, measurement (a dataclass),
judgement and words together."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from tunescope.analyze._data import F64
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import MIB, dur, pct, size

__all__ = ["EvalMemorySpike", "MemoryGrowth"]

PER_EVALUATION_MAX = 50
"""Evaluations listed one by one in an evaluation spike's evidence."""

ADVICE_GROWTH_CPU = (
    "Look for references kept across steps: losses or outputs appended to lists (append "
    "loss.item(), not loss), metrics accumulated as tensors, growing caches.",
    "Compare two tracemalloc snapshots (or a memray profile) taken some steps apart.",
    "Data-loader workers that touch Python lists or dicts copy them page by page (copy on "
    "access): hold dataset metadata in numpy arrays instead.",
)
ADVICE_GROWTH_GPU = (
    "Look for tensors kept across steps: a loss history without .item() or .detach() keeps "
    "every step's graph alive.",
    "Record the allocator's history (torch.cuda.memory._record_memory_history()) and open "
    "the snapshot at pytorch.org/memory_viz to see who allocates.",
    "Compare torch.mem.allocated with torch.mem.reserved: growth of reserved alone is the "
    "caching allocator keeping freed blocks (varying shapes), not a leak; pad inputs to a "
    "few fixed lengths.",
)
ADVICE_EVAL = (
    "Evaluate under torch.inference_mode() (or torch.no_grad()) with model.eval().",
    "Use a smaller evaluation batch size.",
    "Do not accumulate every logit: compute metrics batch by batch (HF Trainer: "
    "eval_accumulation_steps, preprocess_logits_for_metrics).",
    "Free training-only memory first (optimizer.zero_grad(set_to_none=True)).",
)


# ---------------------------------------------------------------------- memory growth
def _where(metric: str | None, device: str | None) -> str:
    return "CPU memory" if metric == "cpu.mem" else f"GPU {device} memory"


def _segment_means(t: F64, v: F64, w: F64, a: float, b: float, k: int) -> list[float]:
    edges = np.linspace(a, b, k + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, k - 1)
    means = []
    for i in range(k):
        sel = idx == i
        if sel.any():
            means.append(float(np.average(v[sel], weights=w[sel])))
    return means


@dataclass(frozen=True, kw_only=True)
class Growth(Measured):
    """Memory over training (span: the training span): its level at the start, the means of
    the segments of the second half, the largest fall below an earlier segment, the optimizer
    steps in the span and the limit (cpu.mem.limit or gpu.mem.total)."""

    start_bytes: float
    segment_means: tuple[float, ...]
    dip_bytes: float
    slope_bytes_per_min: float
    steps: int
    limit_bytes: float | None

    @property
    def end_bytes(self) -> float:
        return self.segment_means[-1]

    @property
    def rise_bytes(self) -> float:
        return self.end_bytes - self.start_bytes

    @property
    def rise_second_half_bytes(self) -> float:
        return self.end_bytes - self.segment_means[0]


class MemoryGrowth(Rule[Growth]):
    key = "memory_growth"
    title = "Memory growth"
    severities = ("moderate",)
    uses = (
        FindingSettings.growth_min_pct,
        FindingSettings.growth_min_mib,
        FindingSettings.growth_max_dip_pct,
        FindingSettings.growth_segments,
        FindingSettings.min_samples,
    )
    metrics = ("cpu.mem", "gpu.mem", "cpu.mem.limit", "gpu.mem.total")
    summary = "CPU or GPU memory that keeps climbing through training."
    advice = ADVICE_GROWTH_CPU + ADVICE_GROWTH_GPU
    each = "memory"

    def measure(self, c: Case) -> Growth | None:
        d, s, metric, device = c.d, c.s, str(c.metric), c.device
        tr = d.trace(metric, device)
        if tr is None:
            return None
        a, b = d.train_span() or (float(tr.t[0]), float(tr.t[-1]))
        mask = (tr.t >= a) & (tr.t <= b)
        segs = int(s.growth_segments)
        if int(mask.sum()) < max(s.min_samples, 2 * segs) or not b > a:
            return None
        t, v, w = tr.t[mask], tr.v[mask], tr.n[mask]
        mid = (a + b) / 2.0
        second = t >= mid
        means = _segment_means(t[second], v[second], w[second], mid, b, segs)
        if len(means) < 3:
            return None
        arr = np.asarray(means)
        minutes = (b - mid) / 60.0 * (segs - 1) / segs
        rise2 = means[-1] - means[0]
        if metric == "cpu.mem":
            limit_tr = d.trace("cpu.mem.limit")
        else:
            limit_tr = d.trace("gpu.mem.total", device)
        return Growth(
            start_bytes=_segment_means(t, v, w, a, b, 2 * segs)[0],
            segment_means=tuple(means),
            dip_bytes=float(np.max(np.maximum.accumulate(arr) - arr)),
            slope_bytes_per_min=rise2 / minutes if minutes > 0 else math.nan,
            steps=d.store.count_events(d.trial.id, a, b, kinds=["optimizer_step"]),
            limit_bytes=float(limit_tr.v[-1]) if limit_tr is not None else None,
            t0=a,
            t1=b,
            metric=metric,
            device=device,
        )

    def judge(self, m: Growth, s: FindingSettings) -> Severity | None:
        rise2 = m.rise_second_half_bytes
        need = max(s.growth_min_pct / 100.0 * max(m.segment_means[0], 0.0), s.growth_min_mib * MIB)
        if rise2 < need or m.dip_bytes > s.growth_max_dip_pct / 100.0 * rise2:
            return None
        return "moderate"

    def say(self, m: Growth, s: FindingSettings, severity: Severity) -> Said:
        slope, limit = m.slope_bytes_per_min, m.limit_bytes
        to_limit = (limit - m.end_bytes) / slope if limit is not None and slope > 0 else None
        per_step = m.rise_bytes / m.steps if m.steps else None
        where = _where(m.metric, m.device)
        extra = f", about {size(per_step)} per optimizer step" if per_step else ""
        if to_limit is not None and limit is not None:
            extra += (
                f"; at this pace it reaches the {size(limit)} limit in about "
                f"{dur(max(0.0, to_limit) * 60.0)}"
            )
        return Said(
            f"{where} keeps growing: +{size(m.rise_bytes)} over training",
            f"{where} rose from {size(m.start_bytes)} to {size(m.end_bytes)} during training "
            f"and was still climbing in its second half (+{size(m.rise_second_half_bytes)}, "
            f"{size(slope)}/min, never falling back more than {size(m.dip_bytes)}){extra}.",
            {
                "start_bytes": m.start_bytes,
                "end_bytes": m.end_bytes,
                "rise_bytes": m.rise_bytes,
                "rise_second_half_bytes": m.rise_second_half_bytes,
                "slope_bytes_per_min": slope,
                "dip_bytes": m.dip_bytes,
                "steps": m.steps,
                "bytes_per_step": per_step,
                "limit_bytes": limit,
                "minutes_to_limit": to_limit,
                "min_pct": s.growth_min_pct,
                "min_mib": s.growth_min_mib,
            },
            ADVICE_GROWTH_CPU if m.metric == "cpu.mem" else ADVICE_GROWTH_GPU,
        )


# ---------------------------------------------------------------------- evaluation spikes
@dataclass(frozen=True)
class EvalRise:
    """What one evaluation added to memory over the level just before it."""

    t: float
    duration: float
    before_bytes: float
    peak_bytes: float
    added_bytes: float
    above_training_peak_bytes: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class EvalSpikes(Measured):
    """Every evaluation's rise (span: the largest), and the peaks in and out of them."""

    rises: tuple[EvalRise, ...]
    peak_in_eval_bytes: float
    peak_outside_eval_bytes: float

    @property
    def worst(self) -> EvalRise:
        return max(self.rises, key=lambda r: r.added_bytes)

    @property
    def sets_peak(self) -> bool:
        if not math.isfinite(self.peak_outside_eval_bytes):
            return True
        return bool(self.peak_in_eval_bytes > self.peak_outside_eval_bytes)

    @property
    def adds_to_peak_bytes(self) -> float:
        if not math.isfinite(self.peak_outside_eval_bytes):
            return math.nan
        return max(0.0, self.peak_in_eval_bytes - self.peak_outside_eval_bytes)


class EvalMemorySpike(Rule[EvalSpikes]):
    key = "eval_memory_spike"
    title = "Evaluation memory spike"
    severities = ("moderate", "low")
    uses = (
        FindingSettings.eval_spike_min_pct,
        FindingSettings.eval_spike_min_mib,
        FindingSettings.eval_spike_baseline_max_s,
    )
    metrics = ("cpu.mem", "gpu.mem")
    summary = "How much each evaluation adds to memory over the level just before it."
    advice = ADVICE_EVAL
    each = "memory"

    def measure(self, c: Case) -> EvalSpikes | None:
        d, s, metric, device = c.d, c.s, str(c.metric), c.device
        evals = d.evaluations()
        tr = d.trace(metric, device)
        if not evals or tr is None:
            return None
        step = d.interval()
        in_any = d.in_eval(tr.t, pad=step)
        peak_in = float(tr.hi[in_any].max()) if in_any.any() else math.nan
        peak_out = float(tr.hi[~in_any].max()) if (~in_any).any() else math.nan
        rises: list[EvalRise] = []
        for a, b in evals:
            inside = (tr.t >= a) & (tr.t <= b + step)
            width = max(3.0 * step, min(b - a, s.eval_spike_baseline_max_s))
            before = (tr.t >= a - width) & (tr.t < a) & ~in_any
            if not inside.any() or not before.any():
                continue
            base = float(np.average(tr.v[before], weights=tr.n[before]))
            peak = float(tr.hi[inside].max())
            # how far the evaluation went above the training peak
            above = max(0.0, peak - peak_out) if math.isfinite(peak_out) else math.nan
            rises.append(EvalRise(a, b - a, base, peak, peak - base, above))
        if not rises:
            return None
        worst = max(rises, key=lambda r: r.added_bytes)
        return EvalSpikes(
            rises=tuple(rises),
            peak_in_eval_bytes=peak_in,
            peak_outside_eval_bytes=peak_out,
            t0=worst.t,
            t1=worst.t + worst.duration,
            metric=metric,
            device=device,
        )

    def judge(self, m: EvalSpikes, s: FindingSettings) -> Severity | None:
        worst = m.worst
        need = max(
            s.eval_spike_min_pct / 100.0 * max(worst.before_bytes, 0.0),
            s.eval_spike_min_mib * MIB,
        )
        if worst.added_bytes < need:
            return None
        return "moderate" if m.sets_peak else "low"

    def say(self, m: EvalSpikes, s: FindingSettings, severity: Severity) -> Said:
        worst, where = m.worst, _where(m.metric, m.device)
        added = [r.added_bytes for r in m.rises]
        share = (
            100.0 * worst.added_bytes / worst.before_bytes if worst.before_bytes > 0 else math.nan
        )
        tail = (
            f" Evaluation sets the trial's peak memory ({size(m.adds_to_peak_bytes)} above the "
            "training peak), so it decides how much memory the trial needs."
            if m.sets_peak and math.isfinite(m.adds_to_peak_bytes)
            else ""
        )
        return Said(
            f"Evaluation adds up to {size(worst.added_bytes)} to {where}",
            f"Across {len(m.rises)} evaluation(s), {where} rose by up to "
            f"{size(worst.added_bytes)} ({pct(share)}) over the level just before "
            f"(mean {size(float(np.mean(added)))}).{tail}",
            {
                "evaluations": len(m.rises),
                "max_added_bytes": worst.added_bytes,
                "mean_added_bytes": float(np.mean(added)),
                "max_added_pct": share,
                "peak_in_eval_bytes": m.peak_in_eval_bytes,
                "peak_outside_eval_bytes": m.peak_outside_eval_bytes,
                "sets_peak": m.sets_peak,
                "adds_to_peak_bytes": m.adds_to_peak_bytes,
                "per_evaluation": [r.to_dict() for r in m.rises[:PER_EVALUATION_MAX]],
                "min_pct": s.eval_spike_min_pct,
                "min_mib": s.eval_spike_min_mib,
            },
            ADVICE_EVAL,
        )
