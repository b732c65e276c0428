"""Store figures for `make bench`: bytes per sample on disk, write rate, window query time.

Targets (issue "Record a trial end to end"): <= 8 bytes/sample for a 1 Hz series,
>= 200,000 samples/s written, any window of a 1,000,000-sample series at 1,000 buckets
in <= 50 ms; (issue 12) <= 3 bytes/sample on disk, after VACUUM, for a realistic mix of 1 Hz
series (a day each of jittery CPU-use floats, memory in bytes, integer GPU percents and
temperatures, power in W from mW).
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tunescope.store import open_store

N = 1_000_000
T0 = 1_700_000_000.0


def _series(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A realistic 1 Hz series: jittered sampling times, a GPU-memory-like staircase with noise
    and occasional spikes."""
    rng = np.random.default_rng(seed)
    ts = T0 + np.arange(n) + rng.normal(0, 0.004, n)
    level = np.repeat(rng.uniform(20e9, 60e9, n // 600 + 1), 600)[:n]
    vs = level + rng.normal(0, 50e6, n)
    vs[rng.random(n) < 0.001] *= 1.3
    return ts, vs


def _mix(n: int, seed: int = 2) -> dict[str, np.ndarray]:
    """A day of realistic 1 Hz series as the sampler records them (synthetic values, shaped
    like the real ones)."""
    rng = np.random.default_rng(seed)
    dt = 1.0 + rng.normal(0, 0.003, n)
    ticks = np.round(rng.uniform(0.85, 1.0, n) * dt * 400)  # 4 cores, 10 ms CPU ticks
    gpu = np.clip(np.round(rng.normal(97, 2, n)), 0, 100)
    gpu[(np.arange(n) // 600) % 10 == 9] = 0  # evaluation: the GPU idles
    return {
        "cpu.util": ticks * 0.01 / (dt * 4) * 100,  # a ratio of jittery intervals: any float
        "cpu.mem": np.repeat(rng.uniform(2e9, 4e9, n // 300 + 1), 300)[:n] // 4096 * 4096
        + np.cumsum(rng.integers(-3, 4, n)) * 4096,
        "gpu.util": gpu,
        "gpu.mem": np.repeat(rng.uniform(20e9, 60e9, n // 1800 + 1), 1800)[:n] // 2**21 * 2**21,
        "gpu.power": np.round(rng.normal(250, 20, n) * 1000) / 1000,
        "gpu.temp": np.round(60 + 10 * np.sin(np.arange(n) / 3000) + rng.normal(0, 0.3, n)),
    }


def _mix_bytes_per_sample(d: str) -> tuple[float, dict[str, float]]:
    """Bytes per sample of the whole SQLite file after VACUUM, for a day of each series in
    the mix, and each series' encoded chunk bytes (data + block summaries) per sample."""
    n = 86_400
    path = Path(d) / "mix.db"
    store = open_store(path)
    tid = store.create_trial(store.ensure_run("mix", start=T0).id, start=T0).id
    ts = T0 + np.arange(n) + np.abs(np.random.default_rng(3).normal(0.002, 0.003, n))
    per: dict[str, float] = {}
    for metric, vs in _mix(n).items():
        sid = store.series(tid, metric, "0").id
        for i in range(0, n, 10_000):
            part = slice(i, i + 10_000)
            store.append_samples(
                zip([sid] * len(ts[part]), ts[part].tolist(), vs[part].tolist(), strict=True)
            )
        store.compact()
        ids = [c[0] for c in store._chunk_summaries(sid, -np.inf, np.inf)]
        size = sum(len(b) for b in store._chunk_blobs(ids, "data").values())
        size += sum(len(b) for b in store._chunk_blobs(ids, "blocks").values())
        per[metric] = size / n
    store.close()
    con = sqlite3.connect(path)
    con.execute("VACUUM")
    con.close()
    return path.stat().st_size / (n * len(per)), per


def main() -> int:
    out: list[tuple[str, float, str, bool]] = []
    with tempfile.TemporaryDirectory() as d:
        mix, per = _mix_bytes_per_sample(d)
    for metric, b in per.items():
        print(f"  1 Hz {metric:<10} {b:5.2f} bytes/sample in its chunks")
    out.append(("store.bytes_per_sample_1hz_mix_vacuumed", mix, "<= 3", mix <= 3))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.db"
        store = open_store(path)
        tid = store.create_trial(store.ensure_run("bench", start=T0).id, start=T0).id
        ts, vs = _series(N)
        sid = store.series(tid, "gpu.mem", "0").id
        batch = 10_000
        rows = [
            list(
                zip(
                    [sid] * batch,
                    ts[i : i + batch].tolist(),
                    vs[i : i + batch].tolist(),
                    strict=True,
                )
            )
            for i in range(0, N, batch)
        ]
        t = time.perf_counter()
        for r in rows:
            store.append_samples(r)
        store.compact()
        write_s = time.perf_counter() - t
        rate = N / write_s
        out.append(("store.write_samples_per_s", rate, ">= 200000", rate >= 200_000))

        # a second, live-like writer: one sample per second per series, flushed each second
        live = store.series(tid, "cpu.util").id
        lt, lv = ts[:3600], np.random.default_rng(1).uniform(0, 100, 3600)
        t = time.perf_counter()
        for a, b in zip(lt.tolist(), lv.tolist(), strict=True):
            store.append_samples([(live, a, b)])
        live_rate = 3600 / (time.perf_counter() - t)
        out.append(
            ("store.live_appends_per_s", live_rate, "(1 per series per s needed)", live_rate >= 100)
        )
        store.compact()
        sizes = store.disk_bytes()  # type: ignore[attr-defined]
        store.close()
        per_sample = path.stat().st_size / (N + 3600)
        out.append(("store.bytes_per_sample_on_disk", per_sample, "<= 8", per_sample <= 8))
        out.append(
            (
                "store.chunk_bytes_per_sample",
                sizes["chunk_bytes"] / (N + 3600),
                "(encoded payload only)",
                True,
            )
        )

        store = open_store(path)
        span = ts[-1] - ts[0]
        windows = {
            "whole": (ts[0], ts[-1]),
            "first_half": (ts[0], ts[0] + span / 2),
            "day_middle": (ts[0] + span / 2, ts[0] + span / 2 + 86400),
            "hour_end": (ts[-1] - 3600, ts[-1]),
            "odd_offsets": (ts[0] + 12345.6, ts[-1] - 9876.5),
            "10min": (ts[0] + 500000, ts[0] + 500600),
        }
        worst = 0.0
        for name, (a, b) in windows.items():
            times = []
            for _ in range(7):
                t = time.perf_counter()
                w = store.window(sid, a, b, 1000)
                times.append((time.perf_counter() - t) * 1000)
            assert w.raw or w.buckets
            med = statistics.median(times)
            worst = max(worst, med)
            print(f"  window {name:<12} {med:7.2f} ms (median of 7)")
        out.append(("store.window_1000_ms_worst", worst, "<= 50", worst <= 50))
        store.close()
    ok = True
    for key, value, target, good in out:
        ok &= good
        print(f"{key} {value:,.2f} (target {target}){'' if good else '  MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
