"""Plain-text tables and human units for the CLI. ``duration`` and ``value`` are the report's
own (``tunescope.analyze._text``): one way to write an elapsed time or a stored value.
Whatever the CLI prints that came from people (run and trial names, params, devices, messages
quoting them) goes through :func:`printable` (``tunescope.analyze.printable``), so no control
character reaches the terminal."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunescope.analyze import UsageKept, jsonable, printable, value
from tunescope.analyze import elapsed as duration
from tunescope.errors import ConfigError
from tunescope.store import RetentionReport, Store

__all__ = [
    "ROW_FORMATS",
    "Column",
    "dropped_warnings",
    "duration",
    "printable",
    "render_rows",
    "retention_line",
    "row_format",
    "table",
    "usage_kept_line",
    "value",
    "when",
]

ROW_FORMATS = ("table", "json", "csv")
"""What ``--format`` of the listing commands (``runs``, ``trials``) takes."""


@dataclass(frozen=True)
class Column:
    """A column of a listing's table: its header and its cell's text, made from a row (one
    row may make several columns, or one column join several fields)."""

    header: str
    cell: Callable[[Mapping[str, Any]], str]


def row_format(value: str) -> str:
    """A ``--format`` of a listing, checked: ConfigError (one line, exit 2) otherwise."""
    if value not in ROW_FORMATS:
        raise ConfigError(f"unknown --format {value!r}: use {', '.join(ROW_FORMATS)}")
    return value


def render_rows(
    keys: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    out_format: str,
) -> str:
    """One listing in one of :data:`ROW_FORMATS`, from one row model: rows with the fields
    ``keys``, in base units (bytes, %, seconds, epoch seconds). ``table``: the columns, for
    people; ``json``: a list of objects with those keys (None as null, non-finite numbers as
    null); ``csv``: a header of the keys, then a line per row (None as an empty cell, lists
    and objects as JSON text). json and csv write values as they are stored, unescaped."""
    if out_format == "table":
        return table([c.header for c in columns], [[c.cell(r) for c in columns] for r in rows])
    data = [{k: jsonable(r[k]) for k in keys} for r in rows]
    if out_format == "json":
        return json.dumps(data, indent=1, ensure_ascii=False)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(keys)
    for r in data:
        w.writerow(_csv_cell(r[k]) for k in keys)
    return buf.getvalue().removesuffix("\n")


def _csv_cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, list | dict):
        return json.dumps(v, ensure_ascii=False)
    return v


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned with two spaces; numbers (cells starting with a digit) right-aligned.
    Cells are shown :func:`printable`, so a newline or tab in one is an escape and every row
    stays one line."""
    headers = [printable(h) for h in headers]
    rows = [[printable(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for w, c in zip(widths, cells, strict=True):
            numeric = c[:1].isdigit() or (c[:1] == "-" and c[1:2].isdigit())
            out.append(c.rjust(w) if numeric else c.ljust(w))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _series_name(s: Any) -> str:
    return str(s.metric if s.device is None else f"{s.metric} on GPU {s.device}")


def damage_warnings(st: Store) -> list[str]:
    """One warning line per series whose damaged chunks ``st`` skipped while the command read
    it (see ``Store.corrupt_series``), naming the series, its trial and run."""
    lines = []
    for s, k in st.corrupt_series():
        trial = st.get_trial(s.trial_id)
        run = st.get_run(trial.run_id)
        where = _series_name(s)
        chunks = "1 damaged chunk" if k == 1 else f"{k} damaged chunks"
        lines.append(
            f"tunescope: warning: series {where} of trial {trial.name!r} in run {run.name!r}: "
            f"{chunks} could not be decoded and {'was' if k == 1 else 'were'} skipped; "
            "the rest is used"
        )
    return lines


def dropped_warnings(dropped: Sequence[tuple[Any, Any, Any, float]]) -> list[str]:
    """One warning line per exported series whose older raw samples ``tunescope compact``
    dropped (``ExportRows.dropped``): only the raw samples kept are in the export."""
    return [
        f"tunescope: warning: series {_series_name(s)} of trial {t.name!r} in run {r.name!r}: "
        f"raw samples before {when(gone)} were dropped by compaction (their minute and hour "
        "rollups remain, see docs/retention.md); the rest is exported"
        for r, t, s, gone in dropped
    ]


def retention_line(r: RetentionReport) -> str:
    """What ``tunescope compact`` (or its dry run) dropped, on one line."""
    verb, first = ("would drop", "would roll up") if r.dry_run else ("dropped", "rolled up")
    line = (
        f"{verb} {r.chunks} {r.unit} ({r.samples} samples, {r.bytes / 2**20:.2f} MiB) of "
        f"{r.series} series, those ended before {when(r.cutoff)}"
    )
    return line + (f"; {first} {r.rolled_up} series first" if r.rolled_up else "")


def usage_kept_line(u: UsageKept) -> str:
    """The ended trials whose usage ``tunescope compact`` computed and kept, on one line."""
    line = f"kept the usage figures of {u.kept} ended trials ({u.seconds:.1f} s)"
    if u.computed > u.kept:
        line += (
            f"; {u.computed - u.kept} more computed but not kept (damaged chunks, or new data "
            "meanwhile): each usage query computes them"
        )
    return line
