"""Findings on what feeds the training loop: input-bound (training waits for the next batch)
and CPU-bound (the CPU that prepares the batches is full while the GPU waits), and
:func:`data_wait_share`, the input-bound share for the summaries.

Each is a :class:`Rule` (see ``_rule.py``): its metadata, settings, measurement (a dataclass),
judgement and words together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.analyze._data import F64, TrialData
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import pct
from tunescope.store import Store, TrialInfo

__all__ = ["CpuBound", "InputBound", "data_wait_share"]

FLUSH_MAX_S = 1.05
"""The SDK writes train.* samples at most every second (a little slack for a late flush): a
CPU sample at t falls in the period of the first train.data_wait sample after it."""
MAX_WAIT_EVENTS = 200_000
"""Beyond this many data_wait events the share is taken from the train.data_wait series."""

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
ADVICE_CPU_BOUND = (
    "More DataLoader workers will not help: the CPU the trial may use is already full.",
    "Move preprocessing offline (pre-tokenize, pre-decode, pre-resize once and save).",
    "Do augmentation on the GPU (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI).",
    "Give the trial more CPU (cgroup quota, --cpus-per-task, a larger instance).",
    "Avoid oversubscription: set torch.set_num_threads / OMP_NUM_THREADS per worker.",
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


def data_wait_share(store: Store, trial: TrialInfo) -> float | None:
    """Percent of step time a trial spent waiting for data, computed as the input-bound
    finding computes it (evaluations between batches excluded); None without data."""
    d = TrialData(store, trial)
    ev = _waits(d)
    if ev is not None:
        return 100.0 * ev.wait_s / ev.step_s
    tr = d.trace("train.data_wait")
    return None if tr is None or tr.samples == 0 else float(tr.mean())
