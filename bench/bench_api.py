"""How long the series API takes on a long trial.

Builds once (cached in bench/out/, git-ignored) a store with one 24-hour trial sampled at
1 Hz on two GPUs (gpu.util and gpu.mem per GPU, cpu.util and cpu.mem for the trial), then
times ``GET /api/trials/{id}/series?points=1000`` in-process (the real app through httpx's
ASGI transport, no socket) for windows of a day, an hour and a minute at the start, middle
and end of the trial. Prints one line per window and the worst median:

    api.series_ms_worst X (target <= 50)

Usage: .venv/bin/python bench/bench_api.py [--repeat N] [--rebuild]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from tunescope.metrics import GIB
from tunescope.server import create_app, release_store
from tunescope.store import open_store

OUT = Path(__file__).resolve().parent / "out"
DB = OUT / "bench_api_v1.db"
T0 = 1_700_000_000.0
DAY = 86_400
TARGET_MS = 50.0


def build(path: Path) -> None:
    """One run, one completed 24-hour trial, six 1 Hz series written in big batches."""
    tmp = path.with_suffix(".tmp")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    rng = np.random.default_rng(0)
    t = T0 + np.arange(DAY, dtype=np.float64)
    began = time.perf_counter()
    with open_store(tmp) as store:
        run = store.ensure_run("bench-day", start=T0)
        trial = store.create_trial(run.id, params={"lr": 2e-4}, start=T0)
        columns = []
        for metric, device, values in (
            ("gpu.util", "0", np.clip(rng.normal(85, 10, DAY), 0, 100)),
            ("gpu.util", "1", np.clip(rng.normal(70, 20, DAY), 0, 100)),
            ("gpu.mem", "0", 40 * GIB + 4 * GIB * np.sin(t / 600.0)),
            ("gpu.mem", "1", 38 * GIB + rng.normal(0, GIB / 4, DAY)),
            ("cpu.util", None, np.clip(rng.normal(30, 8, DAY), 0, 100)),
            ("cpu.mem", None, 12 * GIB + np.cumsum(rng.normal(0, 2e5, DAY))),
        ):
            sid = store.series(trial.id, metric, device).id
            columns.append((sid, values))
        batch = 3600
        for a in range(0, DAY, batch):
            rows = [
                (sid, ts, v)
                for sid, values in columns
                for ts, v in zip(
                    t[a : a + batch].tolist(), values[a : a + batch].tolist(), strict=True
                )
            ]
            store.append_samples(rows)
        store.update_trial(trial.id, state="completed", end=T0 + DAY, heartbeat=T0 + DAY)
    tmp.replace(path)
    print(
        f"built {path.name}: 6 series x {DAY} samples in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )


def windows() -> list[tuple[str, float | None, float | None]]:
    """(label, start, end) of the timed windows; None means the API default (the extent)."""
    out: list[tuple[str, float | None, float | None]] = [("day (default extent)", None, None)]
    for span, name in ((3600.0, "1 h"), (60.0, "1 min")):
        for where, a in (("start", T0), ("middle", T0 + DAY / 2), ("end", T0 + DAY - span)):
            out.append((f"{name} at {where}", a, a + span))
    return out


async def time_windows(db: Path, repeat: int) -> list[tuple[str, str, float, int]]:
    app = create_app(str(db))
    results = []
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            for metric in ("gpu.util", "gpu.mem"):
                for label, start, end in windows():
                    params: dict[str, str | int | float] = {"metric": metric, "points": 1000}
                    if start is not None and end is not None:
                        params.update(start=start, end=end)
                    r = await client.get("/api/trials/1/series", params=params)  # warm-up
                    r.raise_for_status()
                    samples = []
                    for _ in range(repeat):
                        began = time.perf_counter()
                        r = await client.get("/api/trials/1/series", params=params)
                        r.raise_for_status()
                        samples.append((time.perf_counter() - began) * 1000.0)
                    body = r.json()
                    n = sum(len(s["t"]) for s in body["series"])
                    mode = "/".join(sorted({s["mode"] for s in body["series"]}))
                    results.append((f"{metric} {label}", mode, statistics.median(samples), n))
    finally:
        release_store(app.state.store)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per window")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached store")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.rebuild or not DB.exists():
        build(DB)
    results = asyncio.run(time_windows(DB, max(1, args.repeat)))
    for label, mode, ms, n in results:
        print(f"api.series_ms[{label}] {ms:.1f} ({mode}, {n} points over 2 GPUs)")
    worst = max(ms for _, _, ms, _ in results)
    print(f"api.series_ms_worst {worst:.1f} (target <= {TARGET_MS:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
