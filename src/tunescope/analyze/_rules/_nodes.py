"""Findings across the nodes of a multi-node trial (series of several hosts): the straggler.

In synchronous data-parallel training every node does the same work per step and then waits,
in the gradient all-reduce, for the slowest. The slowest node therefore shows in how busy it is
compared with the others: on GPUs, a node whose GPUs wait for its input (or its slower CPU)
has a lower utilization than the nodes whose GPUs sit in the collective's kernel; without GPUs,
the node still computing keeps its CPU busy while the others idle in the collective. Step time
cannot single it out: every node steps together.

Each is a :class:`Rule` (see ``_rule.py``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from tunescope.analyze._data import TrialData
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import pct

__all__ = ["StragglerNode"]

ADVICE_STRAGGLER = (
    "Look at the straggler's own input pipeline first: more DataLoader workers, data on a "
    "local disk of that node rather than a remote file system, preprocessing done offline.",
    "Check that node's hardware and neighbours: a GPU throttled by heat or power "
    "(clocks, temperature), another job sharing its GPUs or CPUs, fewer CPU cores or a "
    "slower interconnect than the other nodes.",
    "Balance the work: equal shards per rank, and sequences bucketed by length so that no "
    "rank gets the longest batches.",
    "If the node cannot be fixed, leave it out of the job: the others run at its pace.",
)


def _host_mean(d: TrialData, metric: str, host: str, least: float) -> tuple[float, int]:
    """Sample-weighted mean of ``metric`` over ``host``'s devices while training, and the
    samples it rests on; NaN when fewer than ``least`` samples."""
    total = weight = 0.0
    for device in d.devices(metric, host):
        tr = d.trace(metric, device, host)
        if tr is None:
            continue
        mask = d.training(tr)
        total += float((tr.v[mask] * tr.n[mask]).sum())
        weight += float(tr.n[mask].sum())
    n = int(weight)
    return (total / weight if weight > 0 and n >= least else math.nan), n


@dataclass(frozen=True, kw_only=True)
class Straggling(Measured):
    """Each node's mean of ``metric`` while training (``means``: host → mean, in %), the
    straggler (``host``), the median of the other nodes and the gap between the two as a
    share of the busier; ``lower``: whether the straggler is the less busy (GPUs) or the
    busier (CPU only)."""

    host: str
    means: dict[str, float]
    samples: dict[str, int]
    others_median: float
    gap_pct: float
    lower: bool


class StragglerNode(Rule[Straggling]):
    key = "straggler_node"
    title = "Straggler node"
    severities = ("moderate",)
    uses = (
        FindingSettings.straggler_gap_pct,
        FindingSettings.straggler_min_diff_pct,
        FindingSettings.min_samples,
    )
    metrics = ("gpu.util", "cpu.util")
    summary = (
        "One node of a multi-node trial that the others wait for: GPU utilization well "
        "under the other nodes' (or, without GPUs, its CPU well above theirs)."
    )
    advice = ADVICE_STRAGGLER

    def measure(self, c: Case) -> Straggling | None:
        d, s = c.d, c.s
        gpu_hosts = [h for h in d.hosts() if d.devices("gpu.util", h)]
        metric, lower = ("gpu.util", True) if len(gpu_hosts) >= 2 else ("cpu.util", False)
        hosts = gpu_hosts if lower else [h for h in d.hosts() if d.devices("cpu.util", h)]
        means: dict[str, float] = {}
        samples: dict[str, int] = {}
        for h in hosts:
            mean, n = _host_mean(d, metric, h, s.min_samples)
            if math.isfinite(mean):
                means[h], samples[h] = mean, n
        if len(means) < 2:
            return None
        best: tuple[float, str, float] | None = None
        for h, mean in means.items():
            others = statistics.median(v for k, v in means.items() if k != h)
            busier = max(mean, others)
            lag = (others - mean) if lower else (mean - others)
            gap = 100.0 * lag / busier if busier > 0 else 0.0
            if best is None or gap > best[0]:
                best = (gap, h, others)
        assert best is not None
        gap, host, others = best
        span = d.train_span()
        return Straggling(
            host=host,
            means=means,
            samples=samples,
            others_median=others,
            gap_pct=gap,
            lower=lower,
            t0=span[0] if span else None,
            t1=span[1] if span else None,
            metric=metric,
            device=None,
        )

    def judge(self, m: Straggling, s: FindingSettings) -> Severity | None:
        diff = abs(m.means[m.host] - m.others_median)
        if m.gap_pct >= s.straggler_gap_pct and diff >= s.straggler_min_diff_pct:
            return "moderate"
        return None

    def say(self, m: Straggling, s: FindingSettings, severity: Severity) -> Said:
        mine = m.means[m.host]
        n_others = len(m.means) - 1
        others = "the other node" if n_others == 1 else f"the median of the {n_others} others"
        if m.lower:
            what = (
                f"its GPUs averaged {pct(mine)} utilization while training, {others} "
                f"{pct(m.others_median)} ({pct(m.gap_pct)} lower): they wait for it in every "
                "gradient all-reduce"
            )
        else:
            what = (
                f"its processes kept {pct(mine)} of its CPU busy while training, {others} "
                f"{pct(m.others_median)} ({pct(m.gap_pct)} less): they wait for it in every "
                "gradient all-reduce"
            )
        evidence: dict[str, Any] = {
            "host": m.host,
            "metric": m.metric,
            "host_means_pct": dict(sorted(m.means.items())),
            "host_samples": dict(sorted(m.samples.items())),
            "others_median_pct": m.others_median,
            "gap_pct": m.gap_pct,
            "gap_threshold_pct": s.straggler_gap_pct,
            "min_diff_pct": s.straggler_min_diff_pct,
        }
        return Said(
            f"Node {m.host} is a straggler",
            f"Node {m.host} holds the job back: {what}.",
            evidence,
            ADVICE_STRAGGLER,
        )
