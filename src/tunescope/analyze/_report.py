"""Reports: a run's findings and per-trial peaks and means, as text, JSON, Markdown or HTML.

:func:`build_report` reads the store once into a :class:`Report` (plain data, in
``_report_model``; charts' series included when asked, ``_charts``); :func:`render_report`
turns it into a document with one renderer per format (``_report_text``, ``_report_json``,
``_report_md``, ``_report_html``). Markdown links one PNG per trial (returned as files for the
caller to write next to the document); HTML embeds them as base64, so the file stands alone.
Charts show the four headline metrics against the time elapsed since the run began, with
optimizer steps (green) and evaluations (orange, shaded) where the catalog draws markers, as
the page does.
"""

from __future__ import annotations

import json

from tunescope.analyze._charts import ChartLine, ChartPanel, TrialChart, trial_chart, trial_png
from tunescope.analyze._gpu_catalog import GPU_CATALOG, GpuType
from tunescope.analyze._objective import trial_objective
from tunescope.analyze._report_html import html_document
from tunescope.analyze._report_json import report_dict
from tunescope.analyze._report_md import image_names, markdown
from tunescope.analyze._report_model import REPORT_FORMATS, Report, TrialReport
from tunescope.analyze._report_text import text
from tunescope.analyze._rules import findings_for_trial
from tunescope.analyze._serving import serving_run
from tunescope.analyze._settings import EffectiveSettings, FindingSettings
from tunescope.analyze._sizing import Workload, size_workload
from tunescope.analyze._summary import sampler_gaps, summarize_trial
from tunescope.errors import ConfigError
from tunescope.store import Store, run_and_trials

__all__ = [
    "REPORT_FORMATS",
    "SUMMARY_KEYS",
    "ChartLine",
    "ChartPanel",
    "Report",
    "TrialChart",
    "TrialReport",
    "build_report",
    "image_names",
    "render_report",
    "report_dict",
]

SUMMARY_KEYS = (
    "cpu.util",
    "cpu.mem",
    "gpu.util",
    "gpu.mem",
    "gpu.sm_active",
    "gpu.power",
    "train.data_wait",
    "train.step_time",
    "train.throughput",
)
"""Metrics whose peak and mean a report lists (those the trial has)."""


def build_report(
    store: Store,
    run: int | str,
    *,
    trial: str | None = None,
    settings: FindingSettings | EffectiveSettings | None = None,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
    charts: bool = False,
    workload: Workload | None = None,
) -> Report:
    """Read a run's report: every trial (or the one called ``trial``) with its peaks, means,
    event counts and findings, and with ``charts`` the series to draw. NotFound for an
    unknown run or trial. ``settings``: the findings' thresholds (default: the defaults;
    ``tunescope report`` passes :func:`load_settings`'s). A load run's report holds its
    levels; ``workload``: size it too (ConfigError when the run is not a load run)."""
    effective = EffectiveSettings.of(settings)
    info, trials = run_and_trials(store, run, trial)
    out = []
    for t in trials:
        keys = tuple(k for k in SUMMARY_KEYS if store.list_series(t.id, k))
        s = summarize_trial(store, t, keys)
        out.append(
            TrialReport(
                t,
                s.metrics,
                s.optimizer_steps,
                s.evaluations,
                s.checkpoints,
                findings_for_trial(store, t, effective.settings, catalog=catalog),
                trial_chart(store, t, info.start) if charts else None,
                sampler_gaps(store, t),
                trial_objective(store, t),
            )
        )
    serving = serving_run(store, info.id)
    sizing = None
    if workload is not None:
        if serving is None:
            raise ConfigError(
                f"run {info.name!r} has no load levels: --workload sizes a run made by "
                "tunescope load"
            )
        sizing = size_workload(store, serving, workload, effective.settings, catalog)
    return Report(info, store.url, out, settings=effective, serving=serving, sizing=sizing)


def render_report(
    report: Report, fmt: str, *, image_stem: str = "report"
) -> tuple[str, dict[str, bytes]]:
    """The report as a ``fmt`` document (see :data:`REPORT_FORMATS`) and, for ``md``, the
    PNG files it links (file name -> bytes) to be written beside it. ``md`` and ``html``
    need the report built with ``charts=True`` and matplotlib installed (ConfigError
    otherwise)."""
    if fmt not in REPORT_FORMATS:
        raise ConfigError(f"unknown report format {fmt!r}: use {', '.join(REPORT_FORMATS)}")
    if fmt == "text":
        return text(report), {}
    if fmt == "json":
        return json.dumps(report_dict(report), indent=1) + "\n", {}
    if any(t.chart is None for t in report.trials):
        raise ConfigError("a Markdown or HTML report needs its charts: build it with charts=True")
    pngs = [trial_png(t.chart, title=t.trial.name) for t in report.trials if t.chart is not None]
    if fmt == "md":
        names = image_names(report, image_stem)
        return markdown(report, names), dict(zip(names, pngs, strict=True))
    return html_document(report, pngs), {}
