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

__all__ = ["LEVELS", "plan", "rollup_rows"]

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
