"""Findings on GPU-hours held without computing: a held GPU idle for a stretch
(``idle_stretch``), and a sweep whose pruned and failed trials held a large share of its
GPU-hours (``sweep_waste``). Both read what ``tunescope usage`` reads (``_usage.py``): the
GPUs attributed to a trial, its held span, and idle stretches by the same rule."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import dur, pct
from tunescope.analyze._usage import (
    BUSY_METRICS,
    held_gpu_seconds,
    held_span,
    idle_stretches,
    read_points,
)

__all__ = ["IdleStretch", "SweepWaste"]

ADVICE_STRETCH = (
    "Find what the trial did in the stretch (the page selects it): evaluation, checkpointing, "
    "data loading or a wait on other workers keep the GPU held while it computes nothing.",
    "Move long evaluations and checkpoint uploads off the GPU's critical path (evaluate less "
    "often or on a sample; save asynchronously), or release the GPU before a long CPU phase.",
    "A GPU held while its trial waits for a scheduler or a barrier is paid for: start trials "
    "when their data and peers are ready.",
)
ADVICE_SWEEP = (
    "Prune earlier: with ASHA (Ray Tune ASHAScheduler, Optuna SuccessiveHalvingPruner) lower "
    "grace_period / min_resource so bad trials stop after fewer steps, and raise "
    "reduction_factor (3 -> 4) so fewer trials reach each rung.",
    "Report the objective often (every evaluation) so the pruner can judge a trial early; a "
    "pruner that sees one value per epoch cannot stop a trial before an epoch has passed.",
    "Fix what makes trials fail before sweeping more: failed trials held GPUs for nothing "
    "(see their oom and near-out-of-memory findings), and a trial that must fail should fail "
    "at its first step (check shapes and memory on one batch first).",
)


@dataclass(frozen=True, kw_only=True)
class Stretches(Measured):
    """A held GPU's idle stretches (the span: the longest), by its busy measure."""

    busy_by: str
    count: int
    idle_s: float
    held_s: float
    longest_s: float


class IdleStretch(Rule[Stretches]):
    key = "idle_stretch"
    title = "Idle GPU stretch"
    severities = ("moderate", "low")
    uses = (FindingSettings.idle_gpu_util_pct, FindingSettings.idle_stretch_min_s)
    metrics = ("gpu.sm_active", "gpu.util")
    summary = (
        "A GPU the trial held sat idle (busy at or under idle_gpu_util_pct) for a stretch of "
        "idle_stretch_min_s or more: GPU-hours paid for and not used."
    )
    advice = ADVICE_STRETCH
    each = "gpu"
    yields_to = ("idle_gpu",)

    def measure(self, c: Case) -> Stretches | None:
        d, s, device = c.d, c.s, c.device
        metric = next((m for m in BUSY_METRICS if device in d.devices(m)), None)
        tr = None if metric is None else d.trace(metric, device)
        if metric is None or tr is None:
            return None
        busy = read_points(d.store, tr.series, d.interval())
        if busy is None:
            return None
        h0, h1 = held_span(d.trial, time.time())
        found = idle_stretches(busy, h0, h1, s.idle_gpu_util_pct, s.idle_stretch_min_s)
        if not found:
            return None
        a, b = max(found, key=lambda x: x[1] - x[0])
        return Stretches(
            busy_by=metric,
            count=len(found),
            idle_s=sum(y - x for x, y in found),
            held_s=h1 - h0,
            longest_s=b - a,
            t0=a,
            t1=b,
            metric=metric,
            device=device,
        )

    def judge(self, m: Stretches, s: FindingSettings) -> Severity | None:
        # an hour idle, or a tenth of the trial, is money worth a look first
        return "moderate" if m.idle_s >= 3600.0 or m.idle_s >= 0.1 * m.held_s else "low"

    def say(self, m: Stretches, s: FindingSettings, severity: Severity) -> Said:
        signal = "SM activity" if m.busy_by == "gpu.sm_active" else "utilization"
        share = 100.0 * m.idle_s / m.held_s if m.held_s > 0 else 0.0
        return Said(
            f"GPU {m.device} held but idle for {dur(m.longest_s)}",
            f"GPU {m.device} stayed at or under {pct(s.idle_gpu_util_pct)} {signal} for "
            f"{dur(m.longest_s)} at a stretch; {m.count} stretch(es) of "
            f"{dur(s.idle_stretch_min_s)} or more add up to {dur(m.idle_s)} "
            f"({pct(share)} of the time the trial held it).",
            {
                "busy_by": m.busy_by,
                "stretches": m.count,
                "idle_s": m.idle_s,
                "held_s": m.held_s,
                "idle_share_pct": share,
                "longest_s": m.longest_s,
                "idle_util_pct": s.idle_gpu_util_pct,
                "min_stretch_s": s.idle_stretch_min_s,
            },
            ADVICE_STRETCH,
        )


@dataclass(frozen=True, kw_only=True)
class SweepHours(Measured):
    """GPU-seconds held by a run's ended trials, by how they ended (the span: the run's
    first start to its last end)."""

    trials: int
    held_s: float
    failed_s: float
    pruned_s: float
    failed: int
    pruned: int

    @property
    def share_pct(self) -> float:
        return 100.0 * (self.failed_s + self.pruned_s) / self.held_s


class SweepWaste(Rule[SweepHours]):
    key = "sweep_waste"
    title = "Sweep waste"
    severities = ("moderate",)
    uses = (FindingSettings.sweep_waste_pct, FindingSettings.sweep_waste_min_trials)
    metrics = ("gpu.util", "gpu.sm_active", "gpu.mem")
    summary = (
        "Pruned and failed trials held sweep_waste_pct or more of a run's GPU-hours: prune "
        "earlier, fix what fails. Judged once per run, on its first trial."
    )
    advice = ADVICE_SWEEP

    def measure(self, c: Case) -> SweepHours | None:
        d, s = c.d, c.s
        trials = d.store.list_trials(d.trial.run_id)
        if not trials or trials[0].id != d.trial.id:
            return None  # one finding per run
        ended = [t for t in trials if t.state in ("completed", "failed", "pruned")]
        if len(ended) < s.sweep_waste_min_trials:
            return None
        now = time.time()
        held = {"completed": 0.0, "failed": 0.0, "pruned": 0.0}
        count = {"failed": 0, "pruned": 0}
        spans: list[float] = []
        for t in ended:
            spans += held_span(t, now)
            held[t.state] += held_gpu_seconds(d.store, t, now)
            if t.state in count:
                count[t.state] += 1
        total = sum(held.values())
        if not total > 0:
            return None
        return SweepHours(
            trials=len(ended),
            held_s=total,
            failed_s=held["failed"],
            pruned_s=held["pruned"],
            failed=count["failed"],
            pruned=count["pruned"],
            t0=min(spans),
            t1=max(spans),
            metric=None,
            device=None,
        )

    def judge(self, m: SweepHours, s: FindingSettings) -> Severity | None:
        return "moderate" if m.share_pct >= s.sweep_waste_pct else None

    def say(self, m: SweepHours, s: FindingSettings, severity: Severity) -> Said:
        return Said(
            f"Sweep waste: {pct(m.share_pct)} of the GPU-hours went to pruned and failed trials",
            f"Of {m.held_s / 3600.0:.2f} GPU-hours held by the run's {m.trials} ended trials, "
            f"{m.pruned} pruned trial(s) held {m.pruned_s / 3600.0:.2f} and {m.failed} failed "
            f"trial(s) {m.failed_s / 3600.0:.2f}: {pct(m.share_pct)}, at or above "
            f"{pct(s.sweep_waste_pct)}.",
            {
                "trials": m.trials,
                "held_gpu_s": m.held_s,
                "pruned_gpu_s": m.pruned_s,
                "failed_gpu_s": m.failed_s,
                "pruned_trials": m.pruned,
                "failed_trials": m.failed,
                "share_pct": m.share_pct,
                "threshold_pct": s.sweep_waste_pct,
            },
            ADVICE_SWEEP,
        )
