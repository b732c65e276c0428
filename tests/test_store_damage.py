"""A chunk whose bytes are damaged in the database degrades only its own series, flagged, and
never raises: reads leave its samples out, windows use its stored summary where they can.
The bytes are really damaged, through the database's own driver, on every SQL backend."""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pytest

from store_helpers import damage_chunk
from tunescope.store import CHUNK_SAMPLES, Store, Window
from tunescope.store._codec import decode, encode

T0 = 1_700_000_000.0
N = 5 * CHUNK_SAMPLES + 40  # five chunks and 40 pending samples
SPIKE_AT = 2 * CHUNK_SAMPLES + 100  # inside the chunk the tests damage
SPIKE = 1000.0


# SQL stores only: these damage a SQL store's chunks (their bytes or summaries) on disk; a store
# on ClickHouse has none (ClickHouse checks its own parts' checksums)
@pytest.fixture
def store_url(sql_store_url: str) -> str:
    return sql_store_url


@pytest.fixture
def store(sql_store: Store) -> Store:
    return sql_store


def _fill(store: Store) -> tuple[int, int]:
    """(damaged-to-be, healthy) gpu.util series of one trial, N samples at 1 Hz each."""
    tid = store.create_trial(store.ensure_run("r", start=T0).id, start=T0).id
    ids = []
    rng = np.random.default_rng(7)
    for dev in ("0", "1"):
        sid = store.series(tid, "gpu.util", dev).id
        vs = rng.uniform(0, 100, N)
        vs[SPIKE_AT] = SPIKE
        store.append_samples((sid, T0 + k, float(v)) for k, v in enumerate(vs))
        ids.append(sid)
    return ids[0], ids[1]


def _shift_first_time(b: bytes) -> bytes:
    version, n, t0 = struct.unpack_from("<BIq", b)
    return struct.pack("<BIq", version, n, t0 + 1000) + b[13:]


def _other_samples(b: bytes) -> bytes:
    t, v = decode(b)
    return encode(t, v + 1.0)


DATA_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "zeroed": lambda b: b[:20] + bytes(len(b) - 20),
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "unknown version": lambda b: b"\x07" + b[1:],
    "first time moved": _shift_first_time,
    "another chunk's samples": _other_samples,
}


def _total(w: Window) -> int:
    return len(w.samples) if w.samples is not None else sum(b.n for b in w.buckets or [])


def _exact(w: Window, t: np.ndarray, v: np.ndarray) -> None:
    """Every bucket holds the exact count, min, max and mean of the raw samples it covers,
    and the buckets cover them all."""
    assert w.buckets is not None and _total(w) == len(t)
    for b in w.buckets:
        cover = (t >= b.t_first) & (t <= b.t_last)
        assert (b.n, b.min, b.max) == (cover.sum(), v[cover].min(), v[cover].max())
        assert b.mean == pytest.approx(v[cover].mean(), rel=1e-12)


@pytest.mark.parametrize("how", DATA_DAMAGE.values(), ids=DATA_DAMAGE.keys())
def test_read_samples_leaves_out_only_the_damaged_chunk(
    store: Store, store_url: str, how: Callable[[bytes], bytes]
) -> None:
    bad, good = _fill(store)
    t_all, v_all = store.read_samples(bad)
    lo, hi = damage_chunk(store_url, bad, 2, how=how)
    # a read that does not reach the chunk neither sees nor reports it
    before = store.read_samples(bad, T0, lo - 1)
    assert np.array_equal(before[1], v_all[t_all <= lo - 1])
    assert store.corrupt_series() == []
    t, v = store.read_samples(bad)
    kept = (t_all < lo) | (t_all > hi)
    assert hi - lo == CHUNK_SAMPLES - 1 and int((~kept).sum()) == CHUNK_SAMPLES
    assert np.array_equal(t, t_all[kept]) and np.array_equal(v, v_all[kept])
    assert len(store.read_samples(good)[0]) == N
    assert [(s.id, s.device, k) for s, k in store.corrupt_series()] == [(bad, "0", 1)]
    store.read_samples(bad)  # the same chunk again is still one chunk
    assert [k for _, k in store.corrupt_series()] == [1]


def test_windows_use_the_damaged_chunks_summary_and_flag_it(store: Store, store_url: str) -> None:
    bad, good = _fill(store)
    t_all, v_all = store.read_samples(bad)
    lo, hi = damage_chunk(store_url, bad, 2)
    end = T0 + N
    # whole chunks from their summary columns: nothing is decoded, so nothing is lost
    coarse = store.window(bad, T0, end, 4)
    assert coarse.corrupt_chunks == 0 and _total(coarse) == N
    assert coarse.buckets is not None and max(b.max for b in coarse.buckets) == SPIKE
    assert store.corrupt_series() == []
    # every sample wanted: the damaged chunk comes in whole, as its stored summary
    fine = store.window(bad, T0, end, 2 * N)
    assert fine.corrupt_chunks == 1 and fine.buckets is not None
    _exact(fine, t_all, v_all)
    assert max(b.max for b in fine.buckets) == SPIKE
    assert [b.n for b in fine.buckets if (b.t_first, b.t_last) == (lo, hi)] == [CHUNK_SAMPLES]
    assert len(fine.buckets) == N - CHUNK_SAMPLES + 1  # every other sample on its own
    # a window cut through the damaged chunk has only the samples outside it
    edge = store.window(bad, hi - 20, hi + 30, 100)
    assert edge.corrupt_chunks == 1 and edge.samples is not None
    assert [s[0] for s in edge.samples] == [hi + k for k in range(1, 31)]
    # the other device's series is whole and unflagged
    healthy = store.window(good, T0, end, 2 * N)
    assert healthy.corrupt_chunks == 0 and healthy.samples is not None
    assert [s[1] for s in healthy.samples] == store.read_samples(good)[1].tolist()
    assert [(s.id, k) for s, k in store.corrupt_series()] == [(bad, 1)]


BLOCK_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[:-1],
    "zeroed": lambda b: bytes(len(b)),
    "reversed": lambda b: b[::-1],
}


@pytest.mark.parametrize("how", BLOCK_DAMAGE.values(), ids=BLOCK_DAMAGE.keys())
def test_damaged_block_summaries_fall_back_to_the_samples(
    store: Store, store_url: str, how: Callable[[bytes], bytes]
) -> None:
    bad, _ = _fill(store)
    t_all, v_all = store.read_samples(bad)
    end = T0 + N
    # 45 s spans: chunks are longer, blocks (32 s) shorter, so blocks are read (spans of a
    # minute or more read the minute rollups instead)
    points = N // 45
    before = store.window(bad, T0, end, points)
    damage_chunk(store_url, bad, 2, "blocks", how)
    after = store.window(bad, T0, end, points)
    assert after.corrupt_chunks == 0 and after != before  # the chunk was decoded instead
    _exact(after, t_all, v_all)
    assert store.corrupt_series() == []
    # with its samples damaged too, the chunk comes in as its stored summary
    lo, hi = damage_chunk(store_url, bad, 2)
    worst = store.window(bad, T0, end, points)
    assert worst.corrupt_chunks == 1 and worst.buckets is not None
    _exact(worst, t_all, v_all)
    assert any((b.t_first, b.t_last, b.n) == (lo, hi, CHUNK_SAMPLES) for b in worst.buckets)
    assert max(b.max for b in worst.buckets) == SPIKE


def test_latest_leaves_out_a_series_whose_newest_chunk_is_damaged(
    store: Store, store_url: str
) -> None:
    """No pending sample after the damaged chunk: the series has no newest value to give,
    the trial's other series still do, and the damage is reported."""
    tid = store.create_trial(store.ensure_run("r", start=T0).id, start=T0).id
    bad, good = (store.series(tid, "gpu.util", dev).id for dev in ("0", "1"))
    for sid in (bad, good):
        store.append_samples((sid, T0 + k, float(k % 100)) for k in range(2 * CHUNK_SAMPLES))
    store.compact()
    damage_chunk(store_url, bad, 1)
    assert [(s.id, t, v) for s, t, v in store.latest(tid)] == [
        (good, T0 + 2 * CHUNK_SAMPLES - 1, float((2 * CHUNK_SAMPLES - 1) % 100))
    ]
    assert [(s.id, k) for s, k in store.corrupt_series()] == [(bad, 1)]
    store.append_samples([(bad, T0 + 2 * CHUNK_SAMPLES, 7.0)])  # a pending one answers again
    assert [(s.id, v) for s, _, v in store.latest(tid)] == [
        (bad, 7.0),
        (good, float((2 * CHUNK_SAMPLES - 1) % 100)),
    ]
