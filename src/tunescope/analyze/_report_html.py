"""The HTML report: one file standing alone, each trial's PNG chart embedded as base64."""

from __future__ import annotations

import base64
import html

from tunescope.analyze._report_model import Report
from tunescope.analyze._report_text import (
    LEGEND,
    changed_settings,
    metric_rows,
    serving_lines,
    span,
    trial_sentence,
)

__all__ = ["html_document"]

_CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;"
    "padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}td.n{text-align:right}"
    ".high{color:#b00020}.moderate{color:#b36b00}.low{color:#555}img{max-width:100%}"
    "li{margin:.3em 0}"
)


def html_document(report: Report, pngs: list[bytes]) -> str:
    """The report as an HTML page, ``pngs`` the trials' charts."""
    e = html.escape
    r = report.run
    origin = r.start
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tunescope report: {e(r.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>tunescope report: run <code>{e(r.name)}</code></h1>",
        f"<p>{len(report.trials)} trial(s), state {e(r.state)}. {LEGEND}</p>",
    ]
    changed = changed_settings(report)
    if changed:
        out.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in changed) + "</ul>")
    serving = serving_lines(report)
    if serving:
        out.append(f"<pre>{e(chr(10).join(serving[:-1]))}</pre>")
    for t, png in zip(report.trials, pngs, strict=True):
        out.append(f"<h2>Trial <code>{e(t.trial.name)}</code></h2>")
        out.append(f"<p>{e(trial_sentence(t, origin))}</p>")
        rows = metric_rows(t)
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
                f"<b>{e(f.title)}</b> ({e(span(f, origin))}): {e(f.message)}"
                f"<ul>{advice}</ul></li>"
            )
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
