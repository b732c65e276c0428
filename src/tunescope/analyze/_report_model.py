"""What a report holds: plain data, read from the store once by ``build_report`` and turned into
documents by the renderers (``_report_text``, ``_report_json``, ``_report_md``,
``_report_html``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tunescope.analyze._charts import TrialChart
from tunescope.analyze._objective import Objective
from tunescope.analyze._rules import Finding
from tunescope.analyze._serving import ServingRun
from tunescope.analyze._settings import EffectiveSettings
from tunescope.analyze._sizing import Sizing
from tunescope.analyze._summary import TrialSummary
from tunescope.store import RunInfo

__all__ = ["REPORT_FORMATS", "Report", "TrialReport"]

REPORT_FORMATS = ("text", "json", "md", "html")


@dataclass(frozen=True)
class TrialReport(TrialSummary):
    """A trial's summary (peaks, means, event counts, :attr:`duration`) with its findings,
    chart (when asked), sampler gaps and objective."""

    findings: list[Finding]
    chart: TrialChart | None = None
    gaps: list[tuple[float, float]] = field(default_factory=list)
    """(t, duration) of each span with no hardware samples: the sampler died and was
    restarted (``sampler_gap`` events)."""
    objective: Objective = field(default_factory=Objective)
    """The value(s) a search scored the trial with, and its direction(s)."""


@dataclass(frozen=True)
class Report:
    run: RunInfo
    store_url: str
    trials: list[TrialReport]
    generated: float = field(default_factory=time.time)
    settings: EffectiveSettings = field(default_factory=EffectiveSettings)
    """The finding settings the report used, each with where its value came from."""
    serving: ServingRun | None = None
    """A load run's levels (None for other runs)."""
    sizing: Sizing | None = None
    """The answer for the workload asked (``--workload``), None when none was."""
