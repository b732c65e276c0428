"""The Markdown report: a document linking one PNG chart per trial (files written beside it,
named by :func:`image_names`), ready to paste into a pull request.

Every name and value people typed (run and trial names, params, scalar and setting names,
and the findings' words that quote them) is escaped, so that it reads as written and makes
no markup: a name goes in a code span fenced by more backticks than it holds (:func:`code`),
other text has its Markdown-active characters backslash-escaped and ``&``, ``<``, ``>`` as
HTML entities (:func:`md_text`), a pipe is escaped in and out of tables, and control
characters are written as escapes (``printable``)."""

from __future__ import annotations

import re

from tunescope.analyze._report_model import Report
from tunescope.analyze._report_text import (
    LEGEND,
    changed_settings,
    metric_rows,
    serving_lines,
    span,
    trial_sentence,
)
from tunescope.analyze._text import elapsed, printable

__all__ = ["code", "image_names", "markdown", "md_text"]

_ACTIVE = re.compile(r"([\\`*_\[\]|~])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "trial"


def image_names(report: Report, stem: str) -> list[str]:
    """The PNG file name of each trial's chart in a Markdown report called ``stem``."""
    return [f"{stem}-{k + 1}-{_slug(t.trial.name)}.png" for k, t in enumerate(report.trials)]


def md_text(s: str) -> str:
    """``s`` as Markdown text that shows it as written: control characters as escapes,
    Markdown-active characters (``\\ ` * _ [ ] | ~``) backslash-escaped, and ``&``, ``<``
    and ``>`` as entities (no HTML, no links, no emphasis, no table cell ends)."""
    escaped = _ACTIVE.sub(r"\\\1", printable(s))
    return "".join(_HTML.get(c, c) for c in escaped)


def code(s: str, table: bool = False) -> str:
    """``s`` as a code span: fenced by one backtick more than its longest run of them
    (padded with a space where it starts or ends with one), control characters as escapes;
    in a table cell (``table``) its pipes escaped, which GFM reads before the span."""
    s = printable(s)
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    if s.startswith("`") or s.endswith("`") or not s.strip():
        s = f" {s} "
    if table:
        s = s.replace("|", "\\|")
    return f"{fence}{s}{fence}"


_cell = md_text


def markdown(report: Report, images: list[str]) -> str:
    """The report as Markdown, ``images`` the file names of the trials' charts."""
    r = report.run
    origin = r.start
    out = [
        f"# tunescope report: run {code(r.name)}",
        "",
        f"{len(report.trials)} trial(s), state {r.state}. {LEGEND}",
        "",
    ]
    changed = changed_settings(report)
    if changed:
        out += [f"- {_cell(line)}" for line in changed] + [""]
    serving = serving_lines(report)
    if serving:  # a fenced block, longer than any run of backticks in it
        longest = max((len(m) for m in re.findall(r"`+", "\n".join(serving))), default=0)
        fence = "`" * max(3, longest + 1)
        out += [f"{fence}text", *serving[:-1], fence, ""]
    out += [
        "| trial | state | duration | objective | findings |",
        "| --- | --- | --- | --- | --- |",
    ]
    for t in report.trials:
        worst = ", ".join(f"{f.severity}: {f.title}" for f in t.findings[:3]) or "none"
        out.append(
            f"| {code(t.trial.name, table=True)} | {t.trial.state} | "
            f"{elapsed(t.duration)} | {t.objective.text()} | {_cell(worst)} |"
        )
    for t, img in zip(report.trials, images, strict=True):
        out += ["", f"## Trial {code(t.trial.name)}", "", _cell(trial_sentence(t, origin)), ""]
        rows = metric_rows(t)
        if rows:
            out += ["| metric | peak | mean |", "| --- | ---: | ---: |"]
            out += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in rows]
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
            out.append(
                f"- **{f.severity.upper()}** **{_cell(f.title)}** ({span(f, origin)}): "
                f"{_cell(f.message)}"
            )
            out += [f"  - {_cell(a)}" for a in f.advice]
    return "\n".join(out) + "\n"
