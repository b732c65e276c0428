"""The text report, and the phrases every document renderer shares (text, Markdown, HTML):
a finding's span, a trial's params, metric rows, event counts, objective and changed
settings. Numbers are written as the CLI writes them (``_text.elapsed``, ``_text.value``)."""

from __future__ import annotations

from tunescope.analyze._finding import Finding
from tunescope.analyze._report_model import Report, TrialReport
from tunescope.analyze._text import elapsed, printable, value
from tunescope.metrics import metric
from tunescope.store import TrialInfo

__all__ = [
    "LEGEND",
    "changed_settings",
    "counts",
    "metric_rows",
    "params",
    "span",
    "text",
    "trial_sentence",
]

LEGEND = (
    "Times are elapsed since the run began. Charts: optimizer steps in green, evaluations "
    "shaded orange, sampler gaps hatched grey."
)
"""What a document with charts says under its title."""


def span(f: Finding, origin: float) -> str:
    if f.t0 is None or f.t1 is None:
        return "whole trial"
    return f"{elapsed(f.t0 - origin)}–{elapsed(f.t1 - origin)}"


def params(t: TrialInfo) -> str:
    return ", ".join(f"{k}={v}" for k, v in t.params.items()) or "-"


def metric_rows(tr: TrialReport) -> list[tuple[str, str, str]]:
    """(label, peak, mean) of each metric the trial has, in display units."""
    return [(metric(k).label, value(k, m.peak), value(k, m.mean)) for k, m in tr.metrics.items()]


def counts(t: TrialReport, origin: float) -> str:
    out = (
        f"{t.optimizer_steps} optimizer steps, {t.evaluations} evaluations, "
        f"{t.checkpoints} checkpoints"
    )
    if t.gaps:
        total = sum(d for _, d in t.gaps)
        at = ", ".join(elapsed(a - origin) for a, _ in t.gaps)
        out += (
            f"; {len(t.gaps)} sampler gap(s): no hardware samples for {total:.1f} s in all "
            f"(the sampler died and was restarted, at {at})"
        )
    return out


def trial_sentence(t: TrialReport, origin: float) -> str:
    """``State completed, duration 2:00, objective 0.5 (minimize), params lr=0.1; 3 optimizer
    steps, …`` (unescaped: each document escapes it its own way)."""
    objective = f", objective {t.objective.text()}" if t.objective.values else ""
    return (
        f"State {t.trial.state}, duration {elapsed(t.duration)}{objective}, params "
        f"{params(t.trial)}; {counts(t, origin)}."
    )


def changed_settings(report: Report) -> list[str]:
    """One line per finding setting not at its default: its value and where it came from."""
    return [
        f"setting: {name} = {v:g} (from {printable(source)})"
        for name, v, source in report.settings.changed()
    ]


def text(report: Report) -> str:
    """The report as plain text for a terminal (every name people typed :func:`printable`)."""
    r = report.run
    origin = r.start
    lines = [
        f"tunescope report: run {r.name!r} ({len(report.trials)} trial(s), {r.state})",
        f"store: {printable(report.store_url)}",
        "times: elapsed since the run began",
        *changed_settings(report),
        "",
    ]
    for t in report.trials:
        lines.append(
            f"Trial {printable(t.trial.name)} [{t.trial.state}]  duration "
            f"{elapsed(t.duration)}  params: {printable(params(t.trial))}"
        )
        if t.objective.values:
            lines.append(f"  objective: {t.objective.text()}")
        rows = metric_rows(t)
        if rows:
            w = max(len(a) for a, _, _ in rows)
            lines.append(f"  {'metric'.ljust(w)}  {'peak':>10}  {'mean':>10}")
            lines += [f"  {a.ljust(w)}  {b:>10}  {c:>10}" for a, b, c in rows]
        else:
            lines.append("  no samples recorded")
        lines.append(f"  {counts(t, origin)}")
        if not t.findings:
            lines.append("  Findings: none")
        else:
            lines.append(f"  Findings ({len(t.findings)}):")
            for f in t.findings:
                title = printable(f.title)
                lines.append(f"  [{f.severity.upper()}] {title}  ({span(f, origin)})")
                lines.append(f"      {printable(f.message)}")
                lines += [f"      - {printable(a)}" for a in f.advice]
        lines.append("")
    return "\n".join(lines)
