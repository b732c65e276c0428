"""Reports: a run's findings and per-trial peaks and means, as text, JSON, Markdown or HTML.

:func:`build_report` reads the store once into a :class:`Report` (plain data, charts' series
included when asked); :func:`render_report` turns it into a document. Markdown links one PNG
per trial (returned as files for the caller to write next to the document); HTML embeds them
as base64, so the file stands alone. Charts show the four headline metrics against the time
elapsed since the run began, with optimizer steps (green) and evaluations (orange, shaded)
where the catalog draws markers, as the page does.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from tunescope.analyze._finding import Finding, jsonable
from tunescope.analyze._findings import findings_for_trial
from tunescope.analyze._objective import Objective, trial_objective
from tunescope.analyze._rightsize import GPU_CATALOG, GpuType
from tunescope.analyze._settings import EffectiveSettings, FindingSettings
from tunescope.analyze._summary import MetricSummary, summarize_trial
from tunescope.analyze._text import printable
from tunescope.errors import ConfigError, NotFound
from tunescope.metrics import headline, metric
from tunescope.store import RunInfo, Store, TrialInfo

__all__ = [
    "REPORT_FORMATS",
    "SUMMARY_KEYS",
    "ChartLine",
    "ChartPanel",
    "Report",
    "TrialChart",
    "TrialReport",
    "build_report",
    "render_report",
]

REPORT_FORMATS = ("text", "json", "md", "html")
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
CHART_POINTS = 600


@dataclass(frozen=True)
class ChartLine:
    """One series in a chart: ``t`` seconds since the run began, values in display units
    (bucket means, with ``lo``/``hi`` their minima and maxima)."""

    label: str
    t: list[float]
    v: list[float]
    lo: list[float]
    hi: list[float]


@dataclass(frozen=True)
class ChartPanel:
    key: str
    label: str
    unit: str
    max_value: float | None
    markers: bool
    lines: list[ChartLine]


@dataclass(frozen=True)
class TrialChart:
    """What one trial's chart shows; times in seconds since the run began. ``steps`` holds
    step times, or (t0, t1, count) bins when there are too many; ``evals`` (start, end);
    ``gaps`` (start, end) of the spans without hardware samples (a sampler restarted)."""

    panels: list[ChartPanel]
    steps: list[float]
    step_bins: list[tuple[float, float, int]]
    evals: list[tuple[float, float]]
    gaps: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class TrialReport:
    trial: TrialInfo
    metrics: dict[str, MetricSummary]
    optimizer_steps: int
    evaluations: int
    checkpoints: int
    findings: list[Finding]
    chart: TrialChart | None = None
    gaps: list[tuple[float, float]] = field(default_factory=list)
    """(t, duration) of each span with no hardware samples: the sampler died and was
    restarted (``sampler_gap`` events)."""
    objective: Objective = field(default_factory=Objective)
    """The value(s) a search scored the trial with, and its direction(s)."""

    @property
    def duration(self) -> float | None:
        end = self.trial.end if self.trial.end is not None else self.trial.heartbeat
        return None if end is None else end - self.trial.start


@dataclass(frozen=True)
class Report:
    run: RunInfo
    store_url: str
    trials: list[TrialReport]
    generated: float = field(default_factory=time.time)
    settings: EffectiveSettings = field(default_factory=EffectiveSettings)
    """The finding settings the report used, each with where its value came from."""


def build_report(
    store: Store,
    run: int | str,
    *,
    trial: str | None = None,
    settings: FindingSettings | EffectiveSettings | None = None,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
    charts: bool = False,
) -> Report:
    """Read a run's report: every trial (or the one called ``trial``) with its peaks, means,
    event counts and findings, and with ``charts`` the series to draw. NotFound for an
    unknown run or trial. ``settings``: the findings' thresholds (default: the defaults;
    ``tunescope report`` passes :func:`load_settings`'s)."""
    effective = EffectiveSettings.of(settings)
    info = store.get_run(run)
    trials = store.list_trials(info.id)
    if trial is not None:
        trials = [t for t in trials if t.name == trial]
        if not trials:
            raise NotFound(f"run {info.name!r} has no trial {trial!r}")
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
                _chart(store, t, info.start) if charts else None,
                _gaps(store, t),
                trial_objective(store, t),
            )
        )
    return Report(info, store.url, out, settings=effective)


def _gaps(store: Store, t: TrialInfo) -> list[tuple[float, float]]:
    return [(e.t, e.duration or 0.0) for e in store.all_events(t.id, kinds=["sampler_gap"])]


def _chart(store: Store, t: TrialInfo, origin: float) -> TrialChart:
    ext = [e for s in store.list_series(t.id) if (e := store.series_extent(s.id)) is not None]
    lo = min([t.start, *(e[0] for e in ext)])
    hi = max([t.end or t.heartbeat or t.start, *(e[1] for e in ext)])
    hi = max(hi, lo + 1.0)
    panels = []
    for m in headline():
        lines = []
        for s in store.list_series(t.id, m.key):
            w = store.window(s.id, lo, hi + 1e-3, CHART_POINTS)
            if w.raw or w.buckets:
                lines.append(
                    ChartLine(
                        _device_label(s.device),
                        [x - origin for x in w.t],
                        [x * m.scale for x in w.mean],
                        [x * m.scale for x in w.min],
                        [x * m.scale for x in w.max],
                    )
                )
        panels.append(ChartPanel(m.key, m.label, m.unit, m.max_value, m.markers, lines))
    steps_w = store.events(t.id, lo, hi, kinds=["optimizer_step"], limit=400)
    evals = store.all_events(t.id, lo, hi, kinds=["evaluation"])
    return TrialChart(
        panels,
        [e.t - origin for e in steps_w.events or []],
        [(b.t0 - origin, b.t1 - origin, b.count) for b in steps_w.bins or [] if b.count],
        [(e.t - origin, e.t + (e.duration or 0.0) - origin) for e in evals],
        [(a - origin, a + d - origin) for a, d in _gaps(store, t)],
    )


def _device_label(device: str | None) -> str:
    return "trial" if device is None else f"GPU {device}"


# ---------------------------------------------------------------------- formatting
def _value(key: str, v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    m = metric(key)
    d = v * m.scale
    if m.unit == "%":
        return f"{d:.0f}%"
    if m.unit == "s":
        return f"{d * 1000:.0f} ms" if d < 1 else f"{d:.2f} s"
    return f"{d:.2f} {m.unit}"


def _elapsed(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    sign = "-" if s < 0 else ""
    n = round(abs(s))
    h, rem = divmod(n, 3600)
    mnt, sec = divmod(rem, 60)
    return f"{sign}{h}:{mnt:02d}:{sec:02d}" if h else f"{sign}{mnt}:{sec:02d}"


def _span(f: Finding, origin: float) -> str:
    if f.t0 is None or f.t1 is None:
        return "whole trial"
    return f"{_elapsed(f.t0 - origin)}–{_elapsed(f.t1 - origin)}"


def _params(t: TrialInfo) -> str:
    return ", ".join(f"{k}={v}" for k, v in t.params.items()) or "-"


def _metric_rows(tr: TrialReport) -> list[tuple[str, str, str]]:
    return [(metric(k).label, _value(k, m.peak), _value(k, m.mean)) for k, m in tr.metrics.items()]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "trial"


def image_names(report: Report, stem: str) -> list[str]:
    """The PNG file name of each trial's chart in a Markdown report called ``stem``."""
    return [f"{stem}-{k + 1}-{_slug(t.trial.name)}.png" for k, t in enumerate(report.trials)]


# ---------------------------------------------------------------------- renderers
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
        return _text(report), {}
    if fmt == "json":
        return json.dumps(report_dict(report), indent=1) + "\n", {}
    if any(t.chart is None for t in report.trials):
        raise ConfigError("a Markdown or HTML report needs its charts: build it with charts=True")
    from tunescope.analyze._charts import trial_png

    pngs = [trial_png(t.chart, title=t.trial.name) for t in report.trials if t.chart is not None]
    if fmt == "md":
        names = image_names(report, image_stem)
        return _markdown(report, names), dict(zip(names, pngs, strict=True))
    return _html(report, pngs), {}


def report_dict(report: Report) -> dict[str, Any]:
    """The report as JSON values."""
    r = report.run
    return {
        "run": {
            "id": r.id,
            "name": r.name,
            "start": r.start,
            "end": r.end,
            "state": r.state,
            "trials": r.trials,
        },
        "store": report.store_url,
        "generated": report.generated,
        "trials": [
            {
                "id": t.trial.id,
                "name": t.trial.name,
                "state": t.trial.state,
                "params": jsonable(t.trial.params),
                "start": t.trial.start,
                "end": t.trial.end,
                "duration_s": jsonable(t.duration),
                "objective": jsonable(t.objective.values),
                "direction": list(t.objective.directions),
                "metrics": {
                    k: {
                        "label": metric(k).label,
                        "unit": metric(k).unit,
                        "scale": metric(k).scale,
                        "peak": jsonable(m.peak),
                        "mean": jsonable(m.mean),
                        "samples": m.samples,
                        "devices": m.devices,
                    }
                    for k, m in t.metrics.items()
                },
                "events": {
                    "optimizer_steps": t.optimizer_steps,
                    "evaluations": t.evaluations,
                    "checkpoints": t.checkpoints,
                    "sampler_gaps": [{"t": a, "duration_s": d} for a, d in t.gaps],
                },
                "findings": [f.to_dict() for f in t.findings],
            }
            for t in report.trials
        ],
        "settings": report.settings.to_dict(),
    }


def _objective(t: TrialReport) -> str:
    """``, objective 0.5 (minimize)`` for a sentence, or nothing without a value."""
    return f", objective {t.objective.text()}" if t.objective.values else ""


def _counts(t: TrialReport, origin: float) -> str:
    out = (
        f"{t.optimizer_steps} optimizer steps, {t.evaluations} evaluations, "
        f"{t.checkpoints} checkpoints"
    )
    if t.gaps:
        total = sum(d for _, d in t.gaps)
        at = ", ".join(_elapsed(a - origin) for a, _ in t.gaps)
        out += (
            f"; {len(t.gaps)} sampler gap(s): no hardware samples for {total:.1f} s in all "
            f"(the sampler died and was restarted, at {at})"
        )
    return out


def _text(report: Report) -> str:
    r = report.run
    origin = r.start
    lines = [
        f"tunescope report: run {r.name!r} ({len(report.trials)} trial(s), {r.state})",
        f"store: {printable(report.store_url)}",
        "times: elapsed since the run began",
        *_changed_settings(report),
        "",
    ]
    for t in report.trials:
        lines.append(
            f"Trial {printable(t.trial.name)} [{t.trial.state}]  duration "
            f"{_elapsed(t.duration)}  params: {printable(_params(t.trial))}"
        )
        if t.objective.values:
            lines.append(f"  objective: {t.objective.text()}")
        rows = _metric_rows(t)
        if rows:
            w = max(len(a) for a, _, _ in rows)
            lines.append(f"  {'metric'.ljust(w)}  {'peak':>10}  {'mean':>10}")
            lines += [f"  {a.ljust(w)}  {b:>10}  {c:>10}" for a, b, c in rows]
        else:
            lines.append("  no samples recorded")
        lines.append(f"  {_counts(t, origin)}")
        if not t.findings:
            lines.append("  Findings: none")
        else:
            lines.append(f"  Findings ({len(t.findings)}):")
            for f in t.findings:
                title = printable(f.title)
                lines.append(f"  [{f.severity.upper()}] {title}  ({_span(f, origin)})")
                lines.append(f"      {printable(f.message)}")
                lines += [f"      - {printable(a)}" for a in f.advice]
        lines.append("")
    return "\n".join(lines)


def _changed_settings(report: Report) -> list[str]:
    """One line per finding setting not at its default: its value and where it came from."""
    return [
        f"setting: {name} = {value:g} (from {printable(source)})"
        for name, value, source in report.settings.changed()
    ]


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _markdown(report: Report, images: list[str]) -> str:
    r = report.run
    origin = r.start
    out = [
        f"# tunescope report: run `{r.name}`",
        "",
        f"{len(report.trials)} trial(s), state {r.state}. Times are elapsed since the run "
        "began. Charts: optimizer steps in green, evaluations shaded orange, sampler gaps "
        "hatched grey.",
        "",
    ]
    changed = _changed_settings(report)
    if changed:
        out += [f"- {_md_cell(line)}" for line in changed] + [""]
    out += [
        "| trial | state | duration | objective | findings |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in report.trials:
        worst = ", ".join(f"{f.severity}: {f.title}" for f in t.findings[:3]) or "none"
        out.append(
            f"| `{_md_cell(t.trial.name)}` | {t.trial.state} | "
            f"{_elapsed(t.duration)} | {t.objective.text()} | {_md_cell(worst)} |"
        )
    for t, img in zip(report.trials, images, strict=True):
        out += [
            "",
            f"## Trial `{t.trial.name}`",
            "",
            f"State {t.trial.state}, duration {_elapsed(t.duration)}{_objective(t)}, params "
            f"{_md_cell(_params(t.trial))}; {_counts(t, origin)}.",
            "",
        ]
        rows = _metric_rows(t)
        if rows:
            out += ["| metric | peak | mean |", "| --- | ---: | ---: |"]
            out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
            out.append("")
        out += [
            f"![{_md_cell(t.trial.name)}: the four headline metrics]({img})",
            "",
            "### Findings",
            "",
        ]
        if not t.findings:
            out.append("None.")
        for f in t.findings:
            out.append(
                f"- **{f.severity.upper()}** **{f.title}** ({_span(f, origin)}): {f.message}"
            )
            out += [f"  - {a}" for a in f.advice]
    return "\n".join(out) + "\n"


_CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;"
    "padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}"
    ".high{color:#b00020}.moderate{color:#b36b00}.low{color:#555}img{max-width:100%}"
    "li{margin:.3em 0}"
)


def _html(report: Report, pngs: list[bytes]) -> str:
    e = html.escape
    r = report.run
    origin = r.start
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tunescope report: {e(r.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>tunescope report: run <code>{e(r.name)}</code></h1>",
        f"<p>{len(report.trials)} trial(s), state {e(r.state)}. Times are elapsed since "
        "the run began. Charts: optimizer steps in green, evaluations shaded orange, sampler "
        "gaps hatched grey.</p>",
    ]
    changed = _changed_settings(report)
    if changed:
        out.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in changed) + "</ul>")
    for t, png in zip(report.trials, pngs, strict=True):
        out.append(f"<h2>Trial <code>{e(t.trial.name)}</code></h2>")
        out.append(
            f"<p>State {e(t.trial.state)}, duration {_elapsed(t.duration)}"
            f"{e(_objective(t))}, params {e(_params(t.trial))}; {e(_counts(t, origin))}.</p>"
        )
        rows = _metric_rows(t)
        if rows:
            out.append("<table><tr><th>metric</th><th>peak</th><th>mean</th></tr>")
            out += [
                f'<tr><td>{e(a)}</td><td class="n">{e(b)}</td><td class="n">{e(c)}</td></tr>'
                for a, b, c in rows
            ]
            out.append("</table>")
        data = base64.b64encode(png).decode("ascii")
        out.append(
            f'<img alt="{e(t.trial.name)}: the four headline metrics" '
            f'src="data:image/png;base64,{data}">'
        )
        out.append("<h3>Findings</h3>")
        if not t.findings:
            out.append("<p>None.</p>")
            continue
        out.append("<ul>")
        for f in t.findings:
            advice = "".join(f"<li>{e(a)}</li>" for a in f.advice)
            out.append(
                f'<li><b class="{f.severity}">{f.severity.upper()}</b> '
                f"<b>{e(f.title)}</b> ({e(_span(f, origin))}): {e(f.message)}"
                f"<ul>{advice}</ul></li>"
            )
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
