"""Findings on the trial's CPU side and its memory: input-bound, near out-of-memory (CPU),
CPU-bound, memory growth and evaluation spikes (the last two for CPU and GPU memory alike).

Each is a :class:`Rule` (see ``_rule.py``): its metadata, settings, measurement (a dataclass),
judgement and words together."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.analyze._data import F64, TrialData
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import MIB, dur, pct, size
from tunescope.store import Store, TrialInfo

__all__ = [
    "CpuBound",
    "EvalMemorySpike",
    "InputBound",
    "MemoryGrowth",
    "NearOomCpu",
    "data_wait_share",
]

FLUSH_MAX_S = 1.05
"""The SDK writes train.* samples at most every second (a little slack for a late flush): a
CPU sample at t falls in the period of the first train.data_wait sample after it."""
MAX_WAIT_EVENTS = 200_000
"""Beyond this many data_wait events the share is taken from the train.data_wait series."""
PER_EVALUATION_MAX = 50
"""Evaluations listed one by one in an evaluation spike's evidence."""

ADVICE_INPUT = (
    "Load batches in parallel: DataLoader(num_workers=N) with N up to the spare CPU cores, "
    "and persistent_workers=True so workers survive between epochs.",
    "Pin host memory (pin_memory=True) and copy with .to(device, non_blocking=True) so the "
    "transfer overlaps compute.",
    "Prefetch: keep batches ready before they are asked for (prefetch_factor, or a "
    "background prefetcher).",
    "Move expensive preprocessing offline: decode, tokenize and augment once, store the "
    "result (e.g. datasets.map(..., num_proc=N) with its cache, or tensors on disk).",
)
ADVICE_CPU_MEM = (
    "Raise the trial's memory limit (container, cgroup or job spec) if the host has room.",
    "Hold less in RAM: memory-map datasets (Arrow, numpy.memmap) instead of loading them, "
    "and drop references to large objects once used.",
    "Fewer or lighter DataLoader workers: each holds prefetch_factor batches and its own "
    "copy of any Python objects it touches.",
    "A smaller batch size (with gradient accumulation to keep the effective batch).",
)
ADVICE_CPU_BOUND = (
    "More DataLoader workers will not help: the CPU the trial may use is already full.",
    "Move preprocessing offline (pre-tokenize, pre-decode, pre-resize once and save).",
    "Do augmentation on the GPU (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI).",
    "Give the trial more CPU (cgroup quota, --cpus-per-task, a larger instance).",
    "Avoid oversubscription: set torch.set_num_threads / OMP_NUM_THREADS per worker.",
)
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


@dataclass(frozen=True)
class _Waits:
    """The data_wait events of a trial: per batch its start, end, wait and step time."""

    t: F64
    end: F64
    wait: F64
    step: F64

    @property
    def wait_s(self) -> float:
        return float(self.wait.sum())

    @property
    def step_s(self) -> float:
        return float(self.step.sum())


def _waits(d: TrialData) -> _Waits | None:
    n = d.store.count_events(d.trial.id, kinds=["data_wait"])
    if n == 0 or n > MAX_WAIT_EVENTS:
        return None
    lo, hi = d.bounds()
    rows = [
        (e.t, e.duration, e.value)
        for e in d.store.all_events(d.trial.id, lo, hi, kinds=["data_wait"])
        if e.duration is not None and e.value is not None
    ]
    if not rows:
        return None
    arr = np.asarray(rows, dtype=np.float64)
    t, wait, step = arr[:, 0], arr[:, 1], arr[:, 2].copy()
    end = t + step
    for a, b in d.evaluations():  # an evaluation between two batches is no step time
        step -= np.clip(np.minimum(end, b) - np.maximum(t, a), 0.0, None)
    step = np.maximum(step, wait)
    if float(step.sum()) <= 0:
        return None
    return _Waits(t, end, wait, step)


# ---------------------------------------------------------------------- input-bound
@dataclass(frozen=True, kw_only=True)
class InputWait(Measured):
    """Share of step time spent waiting for data; per batch when from data_wait events."""

    share_pct: float
    batches: int | None
    wait_s: float | None
    step_s: float | None
    source: str
    cpu_util_mean_pct: float | None
    """The trial's CPU in the span, None without a cpu.util series."""


class InputBound(Rule[InputWait]):
    key = "input_bound"
    title = "Input-bound"
    severities = ("high", "moderate")
    uses = (
        FindingSettings.input_wait_high_pct,
        FindingSettings.input_wait_moderate_pct,
        FindingSettings.input_min_batches,
        FindingSettings.min_samples,
        FindingSettings.cpu_bound_cpu_pct,
    )
    metrics = ("train.data_wait", "train.step_time", "cpu.util")
    summary = "Share of step time spent waiting for the next batch (trial.watch())."
    advice = ADVICE_INPUT

    def measure(self, c: Case) -> InputWait | None:
        d, s = c.d, c.s
        ev = _waits(d)
        moderate = s.input_wait_moderate_pct
        if ev is not None:
            if len(ev.t) < s.input_min_batches:
                return None
            share = 100.0 * ev.wait_s / ev.step_s
            flagged = ev.wait >= moderate / 100.0 * ev.step
            if not flagged.any():
                flagged = np.ones(len(ev.t), dtype=bool)
            t0, t1 = float(ev.t[flagged].min()), float(ev.end[flagged].max())
            batches, wait_s, step_s = len(ev.t), ev.wait_s, ev.step_s
            source = "data_wait events"
        else:
            tr = d.trace("train.data_wait")
            if tr is None or tr.samples < max(s.min_samples, 1):
                return None
            share = tr.mean()
            flagged = tr.hi >= moderate
            if not flagged.any():
                flagged = np.ones(len(tr.t), dtype=bool)
            t0 = float(tr.t[flagged].min()) - 1.0
            t1 = float(tr.t[flagged].max())
            batches, wait_s, step_s, source = None, None, None, "train.data_wait series"
        cpu = d.trace("cpu.util")
        cpu_mean = None
        if cpu is not None:
            in_span = (cpu.t >= t0) & (cpu.t <= t1)
            cpu_mean = cpu.mean(in_span) if in_span.any() else cpu.mean()
        return InputWait(
            share_pct=share,
            batches=batches,
            wait_s=wait_s,
            step_s=step_s,
            source=source,
            cpu_util_mean_pct=cpu_mean,
            t0=t0,
            t1=t1,
            metric="train.data_wait",
            device=None,
        )

    def judge(self, m: InputWait, s: FindingSettings) -> Severity | None:
        if not m.share_pct >= s.input_wait_moderate_pct:
            return None
        return "high" if m.share_pct >= s.input_wait_high_pct else "moderate"

    def say(self, m: InputWait, s: FindingSettings, severity: Severity) -> Said:
        share, moderate = m.share_pct, s.input_wait_moderate_pct
        ev: dict[str, Any] = {
            "share_pct": share,
            "batches": m.batches,
            "wait_s": m.wait_s,
            "step_s": m.step_s,
            "source": m.source,
            "high_pct": s.input_wait_high_pct,
            "moderate_pct": moderate,
        }
        detail = ""
        if m.batches and m.wait_s is not None and m.step_s is not None:
            ev["mean_wait_ms"] = 1000.0 * m.wait_s / m.batches
            ev["mean_step_ms"] = 1000.0 * m.step_s / m.batches
            detail = (
                f" ({m.batches} batches: {ev['mean_wait_ms']:.1f} ms of "
                f"{ev['mean_step_ms']:.1f} ms per step on average)"
            )
        advice: tuple[str, ...] = ADVICE_INPUT
        if m.cpu_util_mean_pct is not None:
            ev["cpu_util_mean_pct"] = m.cpu_util_mean_pct
            if m.cpu_util_mean_pct >= s.cpu_bound_cpu_pct:
                advice = (ADVICE_CPU_BOUND[0], *ADVICE_INPUT[1:], *ADVICE_CPU_BOUND[1:3])
            else:
                detail += f"; the trial's CPU was {pct(m.cpu_util_mean_pct)} busy meanwhile"
        level = "highly" if severity == "high" else "moderately"
        return Said(
            f"Input-bound: {pct(share)} of step time waiting for data",
            f"Training waited for the next batch {pct(share)} of its step time{detail}: "
            f"{level} input-bound (moderate from {pct(moderate)}, high from "
            f"{pct(s.input_wait_high_pct)}).",
            ev,
            advice,
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


# ---------------------------------------------------------------------- CPU-bound
@dataclass(frozen=True, kw_only=True)
class CpuSaturation(Measured):
    """The share of training samples in which the trial's CPU was saturated while the GPU
    (``signal`` gpu.util) or, without a GPU, the training loop (train.data_wait) waited; the
    means over those samples; the span: from the first to the last of them."""

    share_pct: float
    cpu_util_mean_pct: float
    other_mean_pct: float
    """Mean GPU utilization, or data-wait share without a GPU, in those samples."""
    signal: str
    cpu_capacity_cores: float | None


class CpuBound(Rule[CpuSaturation]):
    key = "cpu_bound"
    title = "CPU-bound"
    severities = ("high", "moderate")
    uses = (
        FindingSettings.cpu_bound_cpu_pct,
        FindingSettings.cpu_bound_window_s,
        FindingSettings.cpu_bound_gpu_pct,
        FindingSettings.cpu_bound_wait_pct,
        FindingSettings.cpu_bound_share_pct,
        FindingSettings.min_samples,
    )
    metrics = ("cpu.util", "cpu.capacity", "gpu.util", "train.data_wait")
    summary = (
        "The trial's CPU near its capacity while the GPU waits (or, without a GPU, "
        "while the training loop waits for data)."
    )
    advice = ADVICE_CPU_BOUND

    def measure(self, c: Case) -> CpuSaturation | None:
        d, s = c.d, c.s
        cpu = d.trace("cpu.util")
        if cpu is None:
            return None
        mask = d.training(cpu)
        if int(mask.sum()) < s.min_samples:
            return None
        t = cpu.t[mask]
        smooth = cpu.rolling(s.cpu_bound_window_s)[mask]
        busy = smooth >= s.cpu_bound_cpu_pct
        gpus = [tr for dev in d.devices("gpu.util") if (tr := d.trace("gpu.util", dev)) is not None]
        if gpus:
            vals = np.vstack([g.at(t, 1.5 * d.interval()) for g in gpus])
            # the mean of the GPUs that have a sample near each time, NaN where none has one
            seen = np.isfinite(vals)
            n_seen = seen.sum(axis=0)
            other = np.where(seen, vals, 0.0).sum(axis=0) / np.where(n_seen > 0, n_seen, np.nan)
            waiting = other < s.cpu_bound_gpu_pct
            signal = "gpu.util"
        else:
            wait = d.trace("train.data_wait")
            if wait is None:
                return None
            other = wait.after(t, FLUSH_MAX_S)
            waiting = other >= s.cpu_bound_wait_pct
            signal = "train.data_wait"
        hit = busy & waiting
        if not hit.any():
            return None
        share = 100.0 * float(cpu.n[mask][hit].sum()) / float(cpu.n[mask].sum())
        cap_tr = d.trace("cpu.capacity")
        return CpuSaturation(
            share_pct=share,
            cpu_util_mean_pct=float(np.average(smooth[hit], weights=cpu.n[mask][hit])),
            other_mean_pct=float(np.nanmean(other[hit])),
            signal=signal,
            cpu_capacity_cores=None
            if cap_tr is None
            else float(np.nanmean(cap_tr.at(t[hit], math.inf))),
            t0=float(t[hit].min()),
            t1=float(t[hit].max()),
            metric="cpu.util",
            device=None,
        )

    def judge(self, m: CpuSaturation, s: FindingSettings) -> Severity | None:
        if m.share_pct < s.cpu_bound_share_pct:
            return None
        return "high" if m.signal == "gpu.util" else "moderate"

    def say(self, m: CpuSaturation, s: FindingSettings, severity: Severity) -> Said:
        gpu = m.signal == "gpu.util"
        evidence: dict[str, Any] = {
            "cpu_threshold_pct": s.cpu_bound_cpu_pct,
            "share_threshold_pct": s.cpu_bound_share_pct,
        }
        if gpu:
            evidence["gpu_threshold_pct"] = s.cpu_bound_gpu_pct
        else:
            evidence["wait_threshold_pct"] = s.cpu_bound_wait_pct
        evidence.update(
            {
                "share_pct": m.share_pct,
                "cpu_util_mean_pct": m.cpu_util_mean_pct,
                "signal": m.signal,
                "cpu_capacity_cores": m.cpu_capacity_cores,
            }
        )
        if gpu:
            evidence["gpu_util_mean_pct"] = m.other_mean_pct
            label, what = "the GPU", f"GPU utilization averaged {pct(m.other_mean_pct)}"
        else:
            evidence["data_wait_mean_pct"] = m.other_mean_pct
            label = "the training loop"
            what = f"training waited for data {pct(m.other_mean_pct)} of its step time"
        cap = m.cpu_capacity_cores
        cores = "" if cap is None else f" of the {cap:.2g} cores it may use"
        return Said(
            f"CPU-bound: the CPU is full while {label} waits",
            f"For {pct(m.share_pct)} of training the trial's CPU was at or above "
            f"{pct(s.cpu_bound_cpu_pct)}{cores} (mean {pct(m.cpu_util_mean_pct)}) while "
            f"{label} waited: {what}.",
            evidence,
            ADVICE_CPU_BOUND,
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


def data_wait_share(store: Store, trial: TrialInfo) -> float | None:
    """Percent of step time a trial spent waiting for data, computed as the input-bound
    finding computes it (evaluations between batches excluded); None without data."""
    d = TrialData(store, trial)
    ev = _waits(d)
    if ev is not None:
        return 100.0 * ev.wait_s / ev.step_s
    tr = d.trace("train.data_wait")
    return None if tr is None or tr.samples == 0 else float(tr.mean())
