"""The bulk of a store on ClickHouse (issue 23), on the embedded engine (chdb: the same engine,
SQL, DDL and codecs as a server), side by side with the PostgreSQL store in the same run when
TUNESCOPE_TEST_POSTGRES names a server. All data is SYNTHETIC (shaped like the sampler's).

Targets (issue 23): ingest of a simulated 400k samples/s (10,000 GPUs x 40 metrics at 1 Hz)
sustained by batched writers; <= 1.5 bytes a sample on disk for a GPU-like 1 Hz mix (integer
percents with idle stretches, memory plateaus, power with noise); a 24 h window of 1,000
buckets in <= 50 ms. Each timing is run at least 3 times: min / median / max.

Also printed, for comparison: bytes a sample of ``bench_store.py``'s realistic mix (jittery
CPU-use floats and mW power noise among them), which the SQL store keeps in about 2.7.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable

import numpy as np

from bench_store import _mix
from tunescope.store import open_store
from tunescope.store.clickhouse import BulkStore, open_bulk

T0 = 1_700_000_000.0
DAY = 86_400
GPU_METRICS = (
    "gpu.util",
    "gpu.mem_bw.util",
    "gpu.mem",
    "gpu.mem.used",
    "gpu.power",
    "gpu.temp",
    "gpu.clock.sm",
    "torch.mem.allocated",
)
LOAD_SERIES = 400_000  # 10,000 GPUs x 40 metrics
LOAD_WRITERS = 4
LOAD_TARGET = 400_000  # samples/s sustained (issue 23)
LOAD_SECONDS = 30  # simulated seconds a run ingests, per repeat
LOAD_BATCHES_S = (1, 5)  # simulated seconds of a writer's series in one insert
REPEATS = 3
PG_SERIES, PG_WRITERS, PG_SECONDS, PG_BATCH_S = 2_000, 4, 600, 10

Call = tuple[np.ndarray, np.ndarray, np.ndarray]
"""One write: series ids (0-based), times, values."""
Stream = list[list[Call]]
"""Each writer's calls, in order."""


def gpu_mix(n: int, seed: int) -> dict[str, np.ndarray]:
    """A day of one GPU's series at 1 Hz, SYNTHETIC: integer percents with idle stretches (an
    evaluation every ten minutes, data-loader stalls), memory plateaus, power in W from mW with
    noise, temperature and clocks in whole units."""
    rng = np.random.default_rng(seed)
    i = np.arange(n)
    idle = ((i // 600) % 10 == 9) | (rng.random(n // 30 + 1).repeat(30)[:n] < 0.03)
    util = np.where(idle, 0, np.clip(np.round(rng.normal(97, 2, n)), 0, 100))
    mem = np.repeat(rng.uniform(20e9, 60e9, n // 1800 + 1), 1800)[:n] // 2**21 * 2**21
    power = np.where(idle, rng.normal(70, 2, n), rng.normal(300, 15, n))
    return {
        "gpu.util": util,
        "gpu.mem_bw.util": np.where(idle, 0, np.clip(np.round(rng.normal(60, 5, n)), 0, 100)),
        "gpu.mem": mem,
        "gpu.mem.used": mem + 2**29,
        "gpu.power": np.round(power * 1000) / 1000,
        "gpu.temp": np.round(60 + 10 * np.sin(i / 3000) + np.where(idle, -5, 0)),
        "gpu.clock.sm": np.where(rng.random(n // 120 + 1).repeat(120)[:n] < 0.05, 1755, 1980),
        "torch.mem.allocated": mem - np.repeat(rng.integers(0, 64, n // 60 + 1), 60)[:n] * 2**21,
    }


def sampler_times(n: int, seed: int) -> np.ndarray:
    """A sampler's times: one a second, each a few ms late (its jitter)."""
    return T0 + np.arange(n) + np.abs(np.random.default_rng(seed).normal(0.002, 0.003, n))


def _fmt(xs: list[float]) -> str:
    return f"{min(xs):,.2f} / {statistics.median(xs):,.2f} / {max(xs):,.2f}"


def _load() -> str:
    """The machine's load average (1 and 5 min): what else ran beside the measure."""
    one, five, _ = os.getloadavg()
    return f"{one:.1f}, {five:.1f}"


def _fresh(folder: str) -> BulkStore:
    return open_bulk(f"chdb:{folder}?database=b_{uuid.uuid4().hex[:10]}")


def _drop(bulk: BulkStore) -> None:
    bulk.transport.command(f"DROP DATABASE IF EXISTS {bulk.transport.database} SYNC")
    bulk.close()


def bytes_per_sample(
    folder: str, series: dict[str, np.ndarray], ts: np.ndarray
) -> tuple[float, float]:
    """Bytes a sample on disk of ``series`` (each at times ``ts``) once merged: of the samples
    table, and with the minute rollups. Written as writers would: ten minutes of every series
    an insert."""
    bulk = _fresh(folder)
    try:
        names = list(series)
        for i in range(0, len(ts), 600):
            part = slice(i, i + 600)
            k = len(ts[part])
            sid = np.repeat(np.arange(1, len(names) + 1), k)
            vs = np.concatenate([series[m][part] for m in names])
            bulk.insert_samples(sid, np.tile(ts[part], len(names)), vs, token=f"mix/{i}")
        bulk.optimize()
        sizes = bulk.disk_bytes()
        n = sizes["samples"][1]
        assert n == len(ts) * len(names)
        return sizes["samples"][0] / n, (sizes["samples"][0] + sizes["minutes"][0]) / n
    finally:
        _drop(bulk)


def window_ms(bulk: BulkStore, sid: int, start: float, end: float, points: int) -> list[float]:
    out = []
    for _ in range(7):
        t = time.perf_counter()
        buckets, samples = bulk.window(sid, start, end, points)
        out.append((time.perf_counter() - t) * 1000)
        assert buckets or samples
    return out


def _load_run(folder: str, seconds: int, batch_s: int) -> float:
    """Samples/s of one run: LOAD_WRITERS threads, each with its own connection, each insert
    ``batch_s`` simulated seconds of its share of LOAD_SERIES series (with its dedup token),
    values made beforehand (SYNTHETIC, each series following its kind's shape). The minute
    rollups' view makes a row of each sample, which the rollup table merges (by series and
    minute) as it writes the insert: the more samples a series has in one, the fewer rows."""
    db = f"b_{uuid.uuid4().hex[:10]}"
    share = LOAD_SERIES // LOAD_WRITERS
    stores = [open_bulk(f"chdb:{folder}?database={db}") for _ in range(LOAD_WRITERS)]
    rng = np.random.default_rng(7)
    kinds = np.arange(share) % 8
    base = np.select(
        [kinds < 2, kinds < 4, kinds == 4, kinds == 5],
        [
            np.round(rng.uniform(0, 100, share)),  # percents
            np.round(rng.uniform(2e10, 6e10, share) / 2**21) * 2**21,  # memory
            np.round(rng.uniform(60, 300, share) * 1000) / 1000,  # power, noisy below
            np.round(rng.uniform(40, 80, share)),  # temperatures
        ],
        1980.0,  # clocks
    )
    noisy = kinds == 4
    work: Stream = []
    for w in range(LOAD_WRITERS):
        sid = np.arange(w * share + 1, (w + 1) * share + 1, dtype=np.uint64)
        ids = np.repeat(sid, batch_s)
        mine = []
        for s in range(0, seconds, batch_s):
            ts = np.tile(T0 + s + np.arange(batch_s), share)
            ts += rng.uniform(0.001, 0.008, share * batch_s)
            vs = np.repeat(base, batch_s)
            vs += np.where(np.repeat(noisy, batch_s), rng.normal(0, 15, len(vs)), 0).round(3)
            mine.append((ids, ts, vs))
        work.append(mine)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for s, (sid, ts, vs) in enumerate(work[w]):
                stores[w].insert_samples(sid, ts, vs, token=f"w{w}/{s}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(LOAD_WRITERS)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t
    if errors:
        raise errors[0]
    n = int(stores[0].transport.query(f"SELECT count() FROM {db}.samples")[0][0])
    assert n == LOAD_SERIES * seconds, n
    _drop(stores[0])
    for st in stores[1:]:
        st.close()
    return n / elapsed


def _same_stream() -> Stream:
    """The stream both stores take side by side: PG_SERIES series (the GPU-like mix), PG_WRITERS
    writers, each call PG_BATCH_S simulated seconds of the writer's series."""
    share = PG_SERIES // PG_WRITERS
    per_gpu = len(GPU_METRICS)
    out = []
    for w in range(PG_WRITERS):
        cols = {}
        for g in range(share // per_gpu):
            for k, vs in enumerate(gpu_mix(PG_SECONDS, seed=w * 1000 + g).values()):
                cols[w * share + g * per_gpu + k] = vs
        ts = sampler_times(PG_SECONDS, seed=w)
        calls = []
        for i in range(0, PG_SECONDS, PG_BATCH_S):
            sl = slice(i, i + PG_BATCH_S)
            sid = np.repeat(np.fromiter(cols, dtype=np.int64), len(ts[sl]))
            vs = np.concatenate([v[sl] for v in cols.values()])
            calls.append((sid, np.tile(ts[sl], len(cols)), vs))
        out.append(calls)
    return out


def _side_by_side(
    stream: Stream,
    write: Callable[[int, Call], None],
    done: Callable[[], None],
) -> float:
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for call in stream[w]:
                write(w, call)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(len(stream))]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done()
    elapsed = time.perf_counter() - t
    if errors:
        raise errors[0]
    return sum(len(c[0]) for calls in stream for c in calls) / elapsed


def clickhouse_same(folder: str, stream: Stream) -> float:
    db = f"b_{uuid.uuid4().hex[:10]}"
    stores = [open_bulk(f"chdb:{folder}?database={db}") for _ in stream]
    seq = [0] * len(stream)

    def write(w: int, call: Call) -> None:
        seq[w] += 1
        stores[w].insert_samples(call[0] + 1, call[1], call[2], token=f"w{w}/{seq[w]}")

    try:
        return _side_by_side(stream, write, lambda: None)
    finally:
        _drop(stores[0])
        for st in stores[1:]:
            st.close()


def postgres_same(pg_url: str, stream: Stream) -> tuple[float, float]:
    """Samples/s through the PostgreSQL store's append_samples (one store per writer, as
    processes have), its pending samples packed at the end (in the time), and its bytes a
    sample (every table of its schema, after packing)."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-csearch_path%3D{schema}"
    try:
        with open_store(url) as st:
            tid = st.create_trial(st.ensure_run("bench", start=T0).id, start=T0).id
            ids = [st.series(tid, f"m{k % 40}", str(k // 40)).id for k in range(PG_SERIES)]
        stores = [open_store(url) for _ in stream]
        sid_of = np.asarray(ids, dtype=np.int64)

        def write(w: int, call: Call) -> None:
            sid, ts, vs = call
            stores[w].append_samples(
                zip(sid_of[sid].tolist(), ts.tolist(), vs.tolist(), strict=True)
            )

        def done() -> None:
            for st in stores:
                st.close()  # packs what it wrote and is still pending

        rate = _side_by_side(stream, write, done)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall()
            for (table,) in tables:  # as bench_store's VACUUM: what the rows take
                conn.execute(f'VACUUM FULL "{schema}"."{table}"')
            size = conn.execute(
                "SELECT sum(pg_total_relation_size(format('%%I.%%I', schemaname, tablename))) "
                "FROM pg_tables WHERE schemaname = %s",
                (schema,),
            ).fetchone()[0]
        n = sum(len(c[0]) for calls in stream for c in calls)
        return rate, float(size) / n
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> int:
    out: list[tuple[str, str, str, bool]] = []
    folder = tempfile.mkdtemp(prefix="tunescope-bench-chdb-")
    print("  all data SYNTHETIC (shaped like the sampler's); engine: embedded chdb")

    # bytes a sample: the GPU-like mix (8 GPUs, a day each), and bench_store's mix
    ts = sampler_times(DAY, seed=3)
    gpus = {f"{m}#{g}": v for g in range(8) for m, v in gpu_mix(DAY, seed=g).items()}
    alone, with_rollups = bytes_per_sample(folder, gpus, ts)
    print(f"  GPU-like mix: {alone:.3f} bytes/sample in samples, {with_rollups:.3f} with rollups")
    out.append(
        ("ch.bytes_per_sample_gpu_mix", f"{with_rollups:.3f}", "<= 1.5", with_rollups <= 1.5)
    )
    r_alone, r_with = bytes_per_sample(folder, _mix(DAY), ts)
    print(
        f"  bench_store's realistic mix: {r_alone:.3f} in samples, {r_with:.3f} with rollups "
        "(the SQL store: about 2.7; its jittery CPU floats and mW power noise take ~3 each)"
    )
    out.append(("ch.bytes_per_sample_store_mix", f"{r_with:.3f}", "(comparison)", True))

    # a 24 h window of 1,000 buckets, on a day of one GPU's utilisation
    bulk = _fresh(folder)
    try:
        util = gpu_mix(DAY, seed=0)["gpu.util"]
        for i in range(0, DAY, 600):  # ten minutes an insert, as writers send them
            bulk.insert_samples(
                np.full(len(ts[i : i + 600]), 1), ts[i : i + 600], util[i : i + 600]
            )
        parts = bulk.transport.query(
            "SELECT count() FROM system.parts WHERE database = {db:String} AND active "
            "AND table = 'samples'",
            {"db": bulk.transport.database},
        )[0][0]
        live = window_ms(bulk, 1, T0, T0 + DAY, 1000)
        raw = window_ms(bulk, 1, T0, T0 + DAY, 2000)  # spans of 43 s: from the raw samples
        bulk.optimize()
        merged = window_ms(bulk, 1, T0, T0 + DAY, 1000)
    finally:
        _drop(bulk)
    print(f"  a day of one series in 144 inserts ({parts} parts before merging), min/med/max of 7:")
    print(f"    24 h window, 1,000 buckets (rollups), just written: {_fmt(live)} ms")
    print(f"    24 h window, 2,000 buckets (raw samples), just written: {_fmt(raw)} ms")
    print(f"    24 h window, 1,000 buckets (rollups), merged: {_fmt(merged)} ms")
    worst = statistics.median(merged)
    out.append(("ch.window_24h_1000_merged_ms_median", f"{worst:.2f}", "<= 50", worst <= 50))

    # sustained ingest: 400k series at 1 Hz, batched writers
    print(
        f"  ingest, {LOAD_SERIES:,} series x {LOAD_SECONDS} simulated s, {LOAD_WRITERS} writers, "
        f"each insert with its token (min/med/max of {REPEATS} runs):"
    )
    for batch_s in LOAD_BATCHES_S:
        rates = [_load_run(folder, LOAD_SECONDS, batch_s) for _ in range(REPEATS)]
        med = statistics.median(rates)
        print(
            f"    inserts of {batch_s} s x {LOAD_SERIES // LOAD_WRITERS:,} series: "
            f"{_fmt(rates)} samples/s (target {LOAD_TARGET:,}: median "
            f"{'met' if med >= LOAD_TARGET else 'MISSED'}; load average {_load()})"
        )
        out.append(
            (
                f"ch.ingest_{batch_s}s_inserts_samples_per_s",
                f"{med:,.0f}",
                f">= {LOAD_TARGET:,}",
                med >= LOAD_TARGET,
            )
        )

    # side by side: the same stream through ClickHouse and the PostgreSQL store
    stream = _same_stream()
    n = sum(len(c[0]) for calls in stream for c in calls)
    what = (
        f"{PG_SERIES:,} series x {PG_SECONDS} s = {n:,} samples, {PG_WRITERS} writers, "
        f"{PG_BATCH_S} s of a writer's series a call"
    )
    ch = [clickhouse_same(folder, stream) for _ in range(REPEATS)]
    print(f"  same stream ({what}):")
    print(f"    ClickHouse (embedded), insert_samples: {_fmt(ch)} samples/s")
    pg_url = os.environ.get("TUNESCOPE_TEST_POSTGRES")
    if pg_url:
        pg = [postgres_same(pg_url, stream) for _ in range(REPEATS)]
        print(f"    PostgreSQL store, append_samples:      {_fmt([r for r, _ in pg])} samples/s")
        print(f"    PostgreSQL store, bytes/sample (VACUUM FULL, every table): {pg[0][1]:.2f}")
        ratio = statistics.median(ch) / statistics.median([r for r, _ in pg])
        out.append(("ch.vs_postgres_ingest_ratio", f"{ratio:.1f}", "(comparison)", True))
    else:
        print("    PostgreSQL store: not run (TUNESCOPE_TEST_POSTGRES names no server)")
    shutil.rmtree(folder, ignore_errors=True)
    ok = True
    for key, value, target, good in out:
        ok &= good
        print(f"{key} {value} (target {target}){'' if good else '  MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
