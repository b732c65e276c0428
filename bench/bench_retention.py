"""Retention figures for `make bench` (issue 20, a store bounded for years).

The issue's fleet: a year of 64 GPUs x 30 metrics at 1 Hz (1,920 series, 60.5 billion samples).
Generating that here would take days, so this writes ONE series for a full year (31,536,000
samples of a GPU-utilization-like signal, synthetic: integer percents, idle stretches, spikes,
4 ms sampling jitter) through the store API in day-long batches, and scales its sizes by 1,920
for the fleet (series are stored independently: a series' chunks and rollup rows do not depend
on the others; only the index depth grows, by about one B-tree level).

Figures: the SQLite file after VACUUM before and after ``compact --keep-raw 30d`` (its rollups
and 30 days of raw), per series-year and extrapolated to the fleet; a one-year window of 1,000
points (the page's chart) read from the rollups, beside the same window read from chunks only
(as before rollups), before and after compaction, each the median of 7.

Targets: a one-year window <= 100 ms; the store after compaction <= 1/2 of before.
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tunescope.analyze import compact_raw
from tunescope.store import SQLStore, open_store

DAY = 86_400
DAYS = 365
FLEET = 64 * 30
T0 = float(int(time.time()) - DAYS * DAY - 3600)


def _day(rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray]:
    """A day of a GPU's utilization at 1 Hz: busy around 95 % with noise, idle stretches
    (evaluation, data stalls), a few spikes to 100 and dips to 0."""
    ts = T0 + d * DAY + np.arange(DAY) + rng.normal(0, 0.004, DAY)
    vs = np.clip(np.round(rng.normal(95, 3, DAY)), 0, 100)
    idle = (np.arange(DAY) // 900) % 8 == 7
    vs[idle] = np.round(rng.uniform(0, 3, int(idle.sum())))
    vs[rng.random(DAY) < 1e-4] = 100
    return ts, vs


def _file_mib(path: Path) -> float:
    """The SQLite file's size after VACUUM (its store closed)."""
    con = sqlite3.connect(path)
    con.execute("VACUUM")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path.stat().st_size / 2**20


def _median_ms(fn: object, runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> int:
    out: list[tuple[str, float, str, bool]] = []
    rng = np.random.default_rng(20)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "year.db"
        store = open_store(path)
        assert isinstance(store, SQLStore)
        tid = store.create_trial(store.ensure_run("year", start=T0).id, start=T0).id
        sid = store.series(tid, "gpu.util", "0").id
        t = time.perf_counter()
        for day in range(DAYS):
            ts, vs = _day(rng, day)
            store.append_samples(zip([sid] * DAY, ts.tolist(), vs.tolist(), strict=True))
        store.compact()
        gen_s = time.perf_counter() - t
        n = DAYS * DAY
        print(f"  wrote a year of 1 series ({n:,} samples) in {gen_s:.0f} s ({n / gen_s:,.0f}/s)")
        with store._tx() as cur:
            rows = store._q(cur, "SELECT level, COUNT(*) FROM rollups GROUP BY level").fetchall()
        print("  rollup rows: " + ", ".join(f"{lv} s: {c:,}" for lv, c in sorted(rows)))
        store.close()
        before = _file_mib(path)
        store = open_store(path)
        assert isinstance(store, SQLStore)
        lo, hi = T0 - 1.0, T0 + DAYS * DAY + 1.0  # every sample, jittered ones too
        info = store._series_info(sid)
        year = _median_ms(lambda: store.window(sid, lo, hi, 1000))
        chunks_only = _median_ms(lambda: store._raw_window(info, lo, hi, 1000), runs=3)
        w = store.window(sid, lo, hi, 1000)
        assert w.buckets is not None and sum(b.n for b in w.buckets) == n

        t = time.perf_counter()
        report = compact_raw(store, 30 * DAY).raw  # its trial runs: no usage to keep
        compact_s = time.perf_counter() - t
        print(
            f"  compact --keep-raw 30d: dropped {report.chunks:,} chunks ({report.samples:,} "
            f"samples, {report.bytes / 2**20:.1f} MiB encoded) in {compact_s:.1f} s"
        )
        store.close()
        after = _file_mib(path)
        store = open_store(path)
        year_after = _median_ms(lambda: store.window(sid, lo, hi, 1000))
        w2 = store.window(sid, lo, hi, 1000)
        assert w2.buckets is not None and sum(b.n for b in w2.buckets) == n
        assert max(b.max for b in w2.buckets) == max(b.max for b in w.buckets)
        store.close()

    print(f"  one series-year: {before:.1f} MiB before compaction, {after:.1f} MiB after")
    print(
        f"  the fleet (x{FLEET}, extrapolated): {before * FLEET / 1024:.0f} GiB before, "
        f"{after * FLEET / 1024:.0f} GiB after"
    )
    print(
        f"  year window, 1000 points: {year:.1f} ms from rollups, {chunks_only:.1f} ms from "
        f"chunks only ({chunks_only / year:.0f}x), {year_after:.1f} ms after compaction"
    )
    out.append(("retention.year_window_ms", year, "<= 100", year <= 100))
    out.append(("retention.year_window_after_compact_ms", year_after, "<= 100", year_after <= 100))
    out.append(
        ("retention.size_after_over_before", after / before, "<= 0.5", after / before <= 0.5)
    )
    out.append(("retention.fleet_gib_after_compact", after * FLEET / 1024, "(reported)", True))
    ok = True
    for key, value, target, good in out:
        ok &= good
        print(f"{key} {value:,.2f} (target {target}){'' if good else '  MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
