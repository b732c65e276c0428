"""The Markdown report: a document linking one PNG chart per trial (files written beside it,
named by :func:`image_names`), ready to paste into a pull request."""

from __future__ import annotations

import re

from tunescope.analyze._report_model import Report
from tunescope.analyze._report_text import (
    LEGEND,
    changed_settings,
    metric_rows,
    span,
    trial_sentence,
)
from tunescope.analyze._text import elapsed

__all__ = ["image_names", "markdown"]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "trial"


def image_names(report: Report, stem: str) -> list[str]:
    """The PNG file name of each trial's chart in a Markdown report called ``stem``."""
    return [f"{stem}-{k + 1}-{_slug(t.trial.name)}.png" for k, t in enumerate(report.trials)]


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def markdown(report: Report, images: list[str]) -> str:
    """The report as Markdown, ``images`` the file names of the trials' charts."""
    r = report.run
    origin = r.start
    out = [
        f"# tunescope report: run `{r.name}`",
        "",
        f"{len(report.trials)} trial(s), state {r.state}. {LEGEND}",
        "",
    ]
    changed = changed_settings(report)
    if changed:
        out += [f"- {_cell(line)}" for line in changed] + [""]
    out += [
        "| trial | state | duration | objective | findings |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in report.trials:
        worst = ", ".join(f"{f.severity}: {f.title}" for f in t.findings[:3]) or "none"
        out.append(
            f"| `{_cell(t.trial.name)}` | {t.trial.state} | "
            f"{elapsed(t.duration)} | {t.objective.text()} | {_cell(worst)} |"
        )
    for t, img in zip(report.trials, images, strict=True):
        out += ["", f"## Trial `{t.trial.name}`", "", _cell(trial_sentence(t, origin)), ""]
        rows = metric_rows(t)
        if rows:
            out += ["| metric | peak | mean |", "| --- | ---: | ---: |"]
            out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
            out.append("")
        out += [
            f"![{_cell(t.trial.name)}: the four headline metrics]({img})",
            "",
            "### Findings",
            "",
        ]
        if not t.findings:
            out.append("None.")
        for f in t.findings:
            out.append(f"- **{f.severity.upper()}** **{f.title}** ({span(f, origin)}): {f.message}")
            out += [f"  - {a}" for a in f.advice]
    return "\n".join(out) + "\n"
