"""Usage figures for `make bench`: `tunescope usage --by day` over a simulated year.

Target (issue 20): `usage --by day` over a simulated year of 64 GPUs in <= 2 s, the first query
included.

The year is generated quickly, not in real time (SYNTHETIC readings): 8 hosts of 8 GPUs, each
host running one 8-GPU trial after another, 3 days each, all year; every trial records the
series `usage` reads (gpu.util, gpu.mem, gpu.mem.total per GPU; cpu.util, cpu.capacity) at
the sampling interval the trial records (``INTERVAL_S``, 10 minutes here: 1 Hz for a year is
the rollups' part of the issue, whose store keeps minute and hour summaries). Then the store is
compacted as ``tunescope compact --keep-raw 30d`` compacts it (``compact_raw`` with the
settings the CLI loads): the year's raw chunks are dropped (their rollups stay) and every
ended trial's usage figures are computed and kept (``kept_usage``), timed as
``compact_fill_s``. The figure is the wall time of ``usage_of(..., by=["day"])`` in-process
(the command's computation without the interpreter's start-up): the first query over the
compacted store, then 3 more (min / median / max). Last, the same query over the store with
its kept figures hidden computes every trial afresh (what the first query cost before
compaction kept them): its answer must be the kept one, figure for figure and trial for trial.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tunescope.analyze import compact_raw, load_settings, usage_of
from tunescope.store import Store, open_store

HOSTS = 8
GPUS = 8
DAYS = 365
TRIAL_DAYS = 3
INTERVAL_S = float(os.environ.get("TUNESCOPE_BENCH_USAGE_INTERVAL", "600"))
T0 = 1_735_689_600.0  # 2025-01-01 UTC
TARGET_S = 2.0
GIB = 1024.0**3
KEEP_RAW_S = 30 * 86400.0  # tunescope compact --keep-raw 30d


def build(path: str) -> tuple[int, int]:
    """The simulated year; returns (trials, samples)."""
    rng = np.random.default_rng(20)
    trials = samples = 0
    with open_store(path, project="default") as st:
        for host in range(HOSTS):
            run = st.ensure_run(f"synthetic-year-host-{host}", T0, os_user=f"user{host % 5}")
            for k in range(DAYS // TRIAL_DAYS):
                start = T0 + k * TRIAL_DAYS * 86400.0
                n = int(TRIAL_DAYS * 86400 / INTERVAL_S)
                t = start + INTERVAL_S * np.arange(1, n + 1)
                tr = st.create_trial(
                    run.id, f"trial-{k}", host=f"node-{host}", start=start, interval=INTERVAL_S
                )
                rows: list[tuple[int, float, float]] = []
                for g in range(GPUS):
                    util = np.clip(rng.normal(70, 30, n), 0, 100).round()
                    mem = rng.uniform(10, 70, n).round() * GIB
                    for metric, vs in (
                        ("gpu.util", util),
                        ("gpu.mem", mem),
                        ("gpu.mem.total", np.full(n, 80.0 * GIB)),
                    ):
                        sid = st.series(tr.id, metric, str(g)).id
                        rows.extend(zip([sid] * n, t.tolist(), vs.tolist(), strict=True))
                for metric, vs in (
                    ("cpu.util", rng.uniform(10, 90, n).round()),
                    ("cpu.capacity", np.full(n, 32.0)),
                ):
                    sid = st.series(tr.id, metric).id
                    rows.extend(zip([sid] * n, t.tolist(), vs.tolist(), strict=True))
                st.append_samples(rows)
                st.update_trial(tr.id, state="completed", end=start + n * INTERVAL_S)
                trials += 1
                samples += len(rows)
        st.compact()
    return trials, samples


class _Fresh:
    """The store without its kept usage (as a store that keeps none): every trial computed."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        if name in ("kept_usage", "keep_usage", "unkept_usage"):
            raise AttributeError(name)
        return getattr(self._store, name)


def main() -> int:
    settings = load_settings().settings  # what `tunescope compact` and `usage` read
    since, until, now = T0, T0 + DAYS * 86400.0, T0 + 400 * 86400.0
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "year.db")
        t = time.perf_counter()
        trials, samples = build(path)
        print(
            f"simulated year (synthetic): {HOSTS * GPUS} GPUs, {trials} trials, "
            f"{samples:,} samples at {INTERVAL_S:g} s, generated in {time.perf_counter() - t:.0f} s"
        )
        with open_store(path, create=False) as st:
            t = time.perf_counter()
            done = compact_raw(st, KEEP_RAW_S, settings=settings)
            compact_s = time.perf_counter() - t
        kept = done.usage
        assert kept is not None
        print(
            f"compact --keep-raw 30d: {compact_s:.1f} s: dropped {done.raw.chunks:,} raw chunks "
            f"({done.raw.samples:,} samples), kept the usage figures of {kept.kept} of "
            f"{kept.computed} ended trials"
        )
        print(f"compact_fill_s {kept.seconds:.2f} (computing and keeping every trial's usage)")
        times = []
        with open_store(path, create=False) as st:
            t = time.perf_counter()
            first = usage_of(st, since, until, ["day"], settings=settings, now=now)
            first_s = time.perf_counter() - t
            for _ in range(3):
                t = time.perf_counter()
                u = usage_of(st, since, until, ["day"], settings=settings, now=now)
                times.append(time.perf_counter() - t)
            t = time.perf_counter()
            fresh = usage_of(_Fresh(st), since, until, ["day"], settings=settings, now=now)  # type: ignore[arg-type]
            fresh_s = time.perf_counter() - t
    same = u.rows == first.rows and (fresh.rows, fresh.trials) == (first.rows, first.trials)
    if not same:
        print("the kept figures differ from the computed ones")
        return 1
    held = sum(r.gpu_held_s for r in u.rows) / 3600.0
    print(f"usage --by day: {len(u.rows)} days, {held:,.0f} GPU-hours held")
    good_first = first_s <= TARGET_S
    print(
        f"usage_by_day_year_first_s {first_s:.2f} (the first query after compaction; "
        f"target <= {TARGET_S:g} s){'' if good_first else '  MISSED'}"
    )
    med = statistics.median(times)
    good = med <= TARGET_S
    print(
        f"usage_by_day_year_s min {min(times):.2f} / median {med:.2f} / max {max(times):.2f} "
        f"(target <= {TARGET_S:g} s){'' if good else '  MISSED'}"
    )
    print(
        f"usage_by_day_year_fresh_s {fresh_s:.2f} (every trial computed, as the first query "
        "did before compaction kept them; the same answer)"
    )
    return 0 if good and good_first else 1


if __name__ == "__main__":
    sys.exit(main())
