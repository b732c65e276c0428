"""Rollups: every series' packed samples summed up per minute and per hour.

A rollup row covers one aligned span ``[t, t + level)`` of one series and keeps the count, min,
max and sum of the samples in it, the times of its first and last sample and the last value.
Rows are added to as chunks are packed (:func:`rollup_rows` of the samples packed, merged into
the stored row by an upsert), so a row always summarises exactly the packed samples of its span,
including those whose raw chunks were dropped since. Windows over long spans read rows instead
of chunks (:func:`plan`), which keeps a year's window to a few thousand rows and keeps every
spike's height: min and max are exact.
"""

from __future__ import annotations

import math

import numpy as np

from tunescope.store._codec import F64

__all__ = ["LEVELS", "check_minute_rows", "merge_rows", "plan", "rollup_rows"]

LEVELS = (3600, 60)
"""Rollup spans in seconds, coarsest first."""

RollupRow = tuple[int, int, float, float, float, float, float, float]
"""(t, n, min, max, sum, t_first, t_last, last value) of one span of one level."""


def rollup_rows(ts: F64, vs: F64, level: int) -> list[RollupRow]:
    """The rows of ``level`` summing up samples ``ts``, ``vs`` (sorted by time)."""
    if not len(ts):
        return []
    keys = np.floor(ts / level).astype(np.int64) * level
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    lasts = np.r_[starts[1:], len(ts)] - 1
    return list(
        zip(
            keys[starts].tolist(),
            (lasts - starts + 1).tolist(),
            np.minimum.reduceat(vs, starts).tolist(),
            np.maximum.reduceat(vs, starts).tolist(),
            np.add.reduceat(vs, starts).tolist(),
            ts[starts].tolist(),
            ts[lasts].tolist(),
            vs[lasts].tolist(),
            strict=True,
        )
    )


def merge_rows(rows: F64, level: int) -> list[RollupRow]:
    """The rows of ``level`` summing up finer rows ``rows`` (an array of :data:`RollupRow`
    fields, one row a line, sorted by ``t``): count and sum added, min and max of theirs,
    the first and last times of theirs, the last value of the row whose last sample is
    latest. An hour's row is its minutes' rows merged."""
    if not len(rows):
        return []
    keys = np.floor(rows[:, 0] / level).astype(np.int64) * level
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    out: list[RollupRow] = []
    for a, b, key in zip(starts.tolist(), ends.tolist(), keys[starts].tolist(), strict=True):
        part = rows[a:b]
        last = a + int(np.argmax(part[:, 6]))  # rows of disjoint spans: no tie
        out.append(
            (
                int(key),
                int(part[:, 1].sum()),
                float(part[:, 2].min()),
                float(part[:, 3].max()),
                float(part[:, 4].sum()),
                float(part[:, 5].min()),
                float(part[:, 6].max()),
                float(rows[last, 7]),
            )
        )
    return out


def check_minute_rows(rows: F64, lo: float, hi: float, raw_from: float) -> None:
    """ValueError unless ``rows`` are minute rows a store can take as the rollups of the
    span [lo, hi) before ``raw_from``: (k, 8) finite numbers, one row a minute, sorted, each
    inside the span and holding at least one sample; lo, hi and raw_from whole minutes with
    lo <= hi <= raw_from."""
    minute = LEVELS[-1]
    if any(not math.isfinite(x) or x % minute for x in (lo, hi, raw_from)):
        raise ValueError("lo, hi and raw_from must be whole minutes")
    if not lo <= hi <= raw_from:
        raise ValueError("minute rows need lo <= hi <= raw_from")
    if rows.ndim != 2 or rows.shape[1] != 8:
        raise ValueError("minute rows are (t, n, min, max, sum, t_first, t_last, last value)")
    if not len(rows):
        return
    t = rows[:, 0]
    if not np.isfinite(rows).all():
        raise ValueError("minute rows must be finite numbers")
    if (t % minute).any() or (np.diff(t) <= 0).any() or t[0] < lo or t[-1] >= hi:
        raise ValueError("minute rows must be whole minutes, sorted, one each, in [lo, hi)")
    if (rows[:, 1] < 1).any() or (rows[:, 1] % 1).any():
        raise ValueError("each minute row must count a whole number of samples, at least one")


Piece = tuple[int, float, float]
"""(level, lo, hi): whole rows of ``level`` with lo <= t < hi, or (0, lo, hi) raw samples."""


def plan(start: float, end: float, levels: tuple[int, ...]) -> list[Piece]:
    """Pieces tiling [start, end): the whole rows of the coarsest level that fit inside, the
    edges left over by them tiled the same way by the next level, and what no level fits as
    raw pieces (at most two, each shorter than the finest level). In time order."""
    if not levels:
        return [(0, start, end)] if end > start else []
    level = levels[0]
    a = math.ceil(start / level) * level
    b = math.floor(end / level) * level
    if a >= b:
        return plan(start, end, levels[1:])
    return [*plan(start, a, levels[1:]), (level, a, b), *plan(b, end, levels[1:])]
