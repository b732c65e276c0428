"""The text report, and the phrases every document renderer shares (text, Markdown, HTML):
a finding's span, a trial's params, metric rows, event counts, objective and changed
settings. Numbers are written as the CLI writes them (``_text.elapsed``, ``_text.value``)."""

from __future__ import annotations

from tunescope.analyze._report_model import Report, TrialReport
from tunescope.analyze._rules import Finding
from tunescope.analyze._text import elapsed, printable, value
from tunescope.metrics import metric
from tunescope.store import TrialInfo

__all__ = [
    "LEGEND",
    "changed_settings",
    "counts",
    "metric_rows",
    "params",
    "serving_lines",
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


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def _rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def serving_lines(report: Report) -> list[str]:
    """A load run's levels as a table (latencies in ms, throughput per second) and the
    sizing answer; nothing for other runs."""
    sr = report.serving
    if sr is None:
        return []
    slo = ", ".join(f"{k[:-2]} {v * 1000:.0f} ms" for k, v in sr.slo.to_dict().items() if v)
    lines = [f"Serving: {len(sr.levels)} load level(s); SLO: {slo or 'none'}"]
    head = ("level", "trial", "ok/err", "TTFT p50/p99", "TPOT p50/p99", "E2EL p99", "req/s",
            "tok/s", "goodput")  # fmt: skip
    rows = [head]
    for lv in sr.levels:
        st = lv.stats
        rows.append(
            (
                f"{lv.mode[0]}{lv.level:g}",
                printable(lv.trial.name) + ("" if lv.ran else f" [{lv.trial.state}]"),
                f"{st.ok}/{st.errors}",
                f"{_ms(st.ttft.p50)}/{_ms(st.ttft.p99)} ms",
                f"{_ms(st.tpot.p50)}/{_ms(st.tpot.p99)} ms",
                f"{_ms(st.e2el.p99)} ms",
                _rate(st.request_throughput),
                _rate(st.output_throughput),
                _rate(st.goodput),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    if report.sizing is not None:
        w = report.sizing.workload
        lines.append(
            f"Sizing for {w.mode} {w.load:g}, context {w.context}, output {w.output} tokens:"
        )
        lines += [f"  {printable(f.text())}" for f in report.sizing.figures]
    return [*lines, ""]


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
        *serving_lines(report),
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
