"""The chunk codec on its own: exact round trips to the stored precision in every value mode,
version 1 blobs (no longer written) still decoding, the vectorised decoder agreeing with the
plain one, CorruptData (one line) for every kind of damaged blob, and chunks split where two
samples are more than ~24 days apart."""

from __future__ import annotations

import itertools
import lzma
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store_helpers import on_clickhouse
from tunescope.errors import CorruptData
from tunescope.store import CHUNK_SAMPLES, Store
from tunescope.store._codec import (
    _LZMA_FILTERS,
    BLOCK_DTYPE,
    BLOCK_SAMPLES,
    MAX_DELTA_MS,
    check_chunks,
    decode,
    decode_blocks,
    decode_blocks_many,
    decode_many,
    encode,
    encode_blocks,
    to_stored,
)

T0_MS = 1_700_000_000_000

_values = st.floats(allow_nan=False, allow_infinity=False, width=32)
_deltas = st.one_of(st.integers(0, 2_000), st.integers(0, MAX_DELTA_MS))


@st.composite
def _chunks(draw: st.DrawFn, max_n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Sorted millisecond times (as epoch seconds) and float32 values, as the store keeps."""
    n = draw(st.integers(1, max_n))
    deltas = draw(st.lists(_deltas, min_size=n - 1, max_size=n - 1))
    t0 = draw(st.integers(0, 4_000_000_000_000))
    ms = np.cumsum(np.array([t0, *deltas], dtype=np.int64))
    vs = np.array(draw(st.lists(_values, min_size=n, max_size=n)), dtype=np.float64)
    return ms / 1000.0, vs


@settings(max_examples=100, deadline=None)
@given(chunk=_chunks())
def test_round_trip_is_exact_to_the_stored_precision(
    chunk: tuple[np.ndarray, np.ndarray],
) -> None:
    ts, vs = chunk
    t, v = decode(encode(ts, vs))
    assert np.array_equal(t, ts) and np.array_equal(v, vs)


def _v1_blob(ts: np.ndarray, vs: np.ndarray) -> bytes:
    """A version 1 blob, built from its documented layout (the codec no longer writes them)."""
    ms = np.round(ts * 1000.0).astype(np.int64)
    bits = vs.astype(np.float32).view(np.uint32)
    xor = np.bitwise_xor(bits, np.concatenate([[0], bits[:-1]]).astype(np.uint32))

    def shuffle(a: np.ndarray) -> bytes:
        return a.view(np.uint8).reshape(-1, a.itemsize).T.tobytes()

    body = shuffle(np.diff(ms).astype(np.int32)) + shuffle(xor)
    return struct.pack("<BIq", 1, len(ts), int(ms[0])) + zlib.compress(body)


def _v1_blocks(ts: np.ndarray, vs: np.ndarray) -> bytes:
    """Version 1 block summaries: the BLOCK_DTYPE records as they are."""
    starts = np.arange(0, len(ts), BLOCK_SAMPLES)
    rec = np.empty(len(starts), dtype=BLOCK_DTYPE)
    rec["t_first"] = ts[starts]
    rec["t_last"] = ts[np.minimum(starts + BLOCK_SAMPLES, len(ts)) - 1]
    rec["n"] = np.diff(np.append(starts, len(ts)))
    rec["min"] = np.minimum.reduceat(vs.astype(np.float32), starts)
    rec["max"] = np.maximum.reduceat(vs.astype(np.float32), starts)
    rec["sum"] = np.add.reduceat(vs, starts)
    return rec.tobytes()


@settings(max_examples=100, deadline=None)
@given(chunk=_chunks())
def test_version_1_blobs_still_decode(chunk: tuple[np.ndarray, np.ndarray]) -> None:
    ts, vs = chunk
    old = _v1_blob(ts, vs)
    assert old[0] == 1 and encode(ts, vs)[0] == 2
    t, v = decode(old)
    assert np.array_equal(t, ts) and np.array_equal(v, vs)
    rec = decode_blocks(_v1_blocks(ts, vs), len(ts), float(ts[0]), float(ts[-1]))
    new = decode_blocks(encode_blocks(ts, vs), len(ts), float(ts[0]), float(ts[-1]))
    assert rec.tobytes() == new.tobytes()


_decimals = st.integers(-(10**6), 10**6)


@settings(max_examples=100, deadline=None)
@given(
    ints=st.lists(_decimals, min_size=1, max_size=300),
    places=st.integers(0, 3),
    specials=st.lists(st.sampled_from([-0.0, np.inf, -np.inf, np.nan, 1e30]), max_size=3),
)
def test_every_value_mode_gives_back_the_float32_bits(
    ints: list[int], places: int, specials: list[float]
) -> None:
    # exact decimals (percents, bytes, W from mW) become integers; the rest stay float bits
    vs = np.array(ints, dtype=np.float64) / 10.0**places
    vs[: len(specials)] = specials[: len(vs)]
    ts = (T0_MS + 1000 * np.arange(len(vs))) / 1000.0
    want = vs.astype(np.float32).view(np.uint32)
    blob = encode(ts, vs)
    t, v = decode(blob)
    assert np.array_equal(t, ts)
    assert np.array_equal(v.astype(np.float32).view(np.uint32), want)
    # the mode byte: 0-3 for exact decimals, 4 or 5 (float bits) once a special value is in
    assert (blob[17] >= 4) == bool(specials) and blob[17] <= 5


@settings(max_examples=100, deadline=None)
@given(
    t0=st.floats(0.0, 4e9),
    gaps=st.lists(st.floats(0.0, 2e6), max_size=299),
    raw_v=st.lists(st.floats(-3e38, 3e38), min_size=300, max_size=300),
)
def test_any_samples_come_back_as_ms_times_and_float32_values(
    t0: float, gaps: list[float], raw_v: list[float]
) -> None:
    raw_t = t0 + np.cumsum([0.0, *gaps])
    n = len(raw_t)
    ts, vs = to_stored(raw_t, raw_v[:n])
    t, v = decode(encode(ts, vs))
    assert np.array_equal(t, ts) and np.array_equal(v, vs)
    assert np.array_equal(v, np.float32(raw_v[:n]).astype(np.float64))
    assert np.all(np.abs(t - raw_t) <= 0.0005 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(_chunks(max_n=80), min_size=1, max_size=6),
    equal=st.integers(1, 70),
    copies=st.integers(0, 5),
)
def test_decode_many_equals_concatenated_decode(
    chunks: list[tuple[np.ndarray, np.ndarray]], equal: int, copies: int
) -> None:
    # chunks of mixed sizes, then chunks all of one size (the vectorised path for version 1),
    # each in both versions
    same = [(ts[:equal], vs[:equal]) for ts, vs in chunks if len(ts) >= equal] * copies
    for group, enc in itertools.product((chunks, same), (encode, _v1_blob)):
        blobs = [enc(ts, vs) for ts, vs in group]
        t, v, counts = decode_many(blobs)
        parts = [decode(b) for b in blobs]
        assert counts.tolist() == [len(ts) for ts, _ in group]
        assert np.array_equal(t, np.concatenate([p[0] for p in parts] or [np.empty(0)]))
        assert np.array_equal(v, np.concatenate([p[1] for p in parts] or [np.empty(0)]))


def _blob(n: int = 300, seed: int = 0, version: int = 2) -> bytes:
    rng = np.random.default_rng(seed)
    ts = (T0_MS + np.cumsum(rng.integers(900, 1100, n))) / 1000.0
    ts, vs = to_stored(ts, rng.normal(50, 20, n))
    return encode(ts, vs) if version == 2 else _v1_blob(ts, vs)


def _corrupt(blob: bytes, match: str) -> None:
    """Both decoders refuse ``blob`` with one line matching ``match``, alone or among good
    blobs of the same size (the vectorised path)."""
    with pytest.raises(CorruptData, match=match) as one:
        decode(blob)
    assert "\n" not in str(one.value)
    with pytest.raises(CorruptData, match=match):
        decode_many([_blob(), blob, _blob(seed=1)])


def test_unknown_version_or_layout_is_corrupt_data() -> None:
    blob = _blob()
    _corrupt(b"\x03" + blob[1:], "unknown chunk version 3")
    _corrupt(b"\xff" + blob[1:], "unknown chunk version 255")
    _corrupt(blob[:17] + b"\x06" + blob[18:], r"unknown layout \(mode 6, widths")
    _corrupt(blob[:18] + b"\x03" + blob[19:], r"widths 3/")


@pytest.mark.parametrize("version", [1, 2])
def test_every_truncation_is_corrupt_data(version: int) -> None:
    blob = _blob(version=version)
    for size in range(len(blob)):
        _corrupt(blob[:size], "truncated|zlib|lzma|holds")


@pytest.mark.parametrize("version", [1, 2])
def test_no_garbled_bit_passes_the_decoder_and_the_chunk_summary_unnoticed(version: int) -> None:
    blob = _blob(version=version)
    t, v = decode(blob)
    row = np.array([[t[0], t[-1], len(t), v.min(), v.max(), v.sum()]])
    check_chunks(t, v, np.array([len(t)]), row)
    by_decoder = by_summary = harmless = 0
    for i in range(1, len(blob)):  # the count, the first time, the layout, the stream
        for bit in (0x01, 0x80):
            garbled = bytearray(blob)
            garbled[i] ^= bit
            try:
                gt, gv = decode(bytes(garbled))
            except CorruptData as exc:
                assert "\n" not in str(exc)
                by_decoder += 1
                continue
            if np.array_equal(gt, t) and np.array_equal(gv, v):
                harmless += 1  # e.g. a padding bit after the last deflate block
                continue
            with pytest.raises(CorruptData, match=r"disagree|number of samples"):
                check_chunks(gt, gv, np.array([len(gt)]), row)
            by_summary += 1
    assert by_decoder + by_summary + harmless == 2 * (len(blob) - 1)
    if version == 1:
        # the decoder alone catches all but the first time (8 bytes) and zlib checksum misses
        assert by_decoder >= 2 * (len(blob) - 1 - 8) - 5 and by_summary >= 16
    else:
        # LZMA2 raw streams carry no checksum: the summary catches what the range coder
        # does not (each flip moves every later time or value, so the last or the sum)
        assert by_decoder >= len(blob) and by_summary >= 16


def _bodies(blob: bytes) -> tuple[int, bytes, int]:
    """(header size, decompressed body, bytes per sample) of a blob of either version."""
    if blob[0] == 1:
        return 13, zlib.decompress(blob[13:]), 8
    body = lzma.decompress(blob[20:], format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    return 20, body, blob[18] + blob[19]


def _recompress(version: int, body: bytes) -> bytes:
    if version == 1:
        return zlib.compress(body)
    return lzma.compress(body, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)


@pytest.mark.parametrize("version", [1, 2])
def test_count_mismatch_stray_bytes_and_empty_chunks_are_corrupt_data(version: int) -> None:
    blob = _blob(n=300, version=version)
    head, body, per = _bodies(blob)
    got_version, n, t0 = struct.unpack_from("<BIq", blob)
    assert (got_version, n) == (version, 300)
    assert len(body) == per * n - (4 if version == 1 else blob[18])  # no time before the first
    # a whole, valid stream holding one sample fewer than the count says
    short = blob[:head] + _recompress(version, body[:-per])
    size = len(body)
    _corrupt(short, f"holds {size - per} bytes of samples, not the {size} its count 300 needs")
    _corrupt(blob + b"\x00", "1 stray bytes after its samples")
    empty = struct.pack("<BIq", version, 0, t0) + blob[13:head] + _recompress(version, b"")
    _corrupt(empty, "holds no samples")
    # a count in the billions decompresses no further than the body it really has
    huge = struct.pack("<BIq", version, 2**32 - 1, t0) + blob[13:]
    _corrupt(huge, "its count 4294967295 needs")


@pytest.mark.parametrize("version", [1, 2])
def test_block_summaries_of_the_wrong_size_or_counts_are_corrupt_data(version: int) -> None:
    rng = np.random.default_rng(3)
    n = 3 * BLOCK_SAMPLES + 5
    ts, vs = to_stored(1_700_000_000 + np.arange(n) * 1.001, rng.normal(0, 1, n))
    good = encode_blocks(ts, vs) if version == 2 else _v1_blocks(ts, vs)
    rec = decode_blocks(good, n, float(ts[0]), float(ts[-1]))
    assert rec["n"].tolist() == [32, 32, 32, 5]
    assert rec["max"][3] == np.float32(vs[-5:].max())
    assert rec["t_first"][1] == ts[32] and rec["t_last"][3] == ts[-1]
    if version == 1:
        cases = [
            (good[:-1], f"{len(good) - 1} bytes, not the {len(good)}"),
            (good + good[-BLOCK_DTYPE.itemsize :], f"not the {len(good)} a chunk of 101 samples"),
            (b"", "block summaries of 0 bytes"),
            (bytes(len(good)), "do not match their chunk"),
        ]
    else:
        mark, size = good[:8], 4 * 33  # four blocks of 33 bytes
        cases = [
            (good[:-1], "zlib stream"),
            (good + b"\x00", "1 stray bytes"),
            (mark + zlib.compress(bytes(size - 33)), f"not the {size} 4 block summaries need"),
            (mark + zlib.compress(bytes(size)), "do not match their chunk"),
        ]
    for blob, match in cases:
        with pytest.raises(CorruptData, match=match) as err:
            decode_blocks(blob, n, float(ts[0]), float(ts[-1]))
        assert "\n" not in str(err.value)
    for wrong in [(n - 1, ts[0], ts[-1]), (n, ts[0] + 1, ts[-1]), (n, ts[0], ts[-1] - 1)]:
        with pytest.raises(CorruptData):
            decode_blocks(good, int(wrong[0]), float(wrong[1]), float(wrong[2]))


def test_block_summaries_of_many_chunks_judge_each_as_decode_blocks_does() -> None:
    """A window decodes hundreds of chunks' blocks at once: each chunk is sound exactly when
    decode_blocks accepts it alone, and a sound one's records are the same."""
    rng = np.random.default_rng(4)
    chunks = []
    for k in range(6):
        n = int(rng.integers(1, 256))
        ts, vs = to_stored(1_700_000_000 + 1000 * k + np.arange(n) * 1.001, rng.normal(0, 1, n))
        enc = _v1_blocks if k == 4 else encode_blocks  # v1: records to swap in place
        chunks.append([enc(ts, vs), n, float(ts[0]), float(ts[-1])])
    good = chunks[1][0]
    chunks[1][0] = good[:-1]  # the wrong size
    chunks[2][0] = bytes(len(chunks[2][0]))  # zeros: counts that do not add up
    chunks[3][2] += 1.0  # a span that is not the chunk's
    swapped = np.frombuffer(chunks[4][0], dtype=BLOCK_DTYPE).copy()
    if len(swapped) > 1:  # blocks out of order
        swapped[[0, 1]] = swapped[[1, 0]]
        chunks[4][0] = swapped.tobytes()
    rows = np.array([[t0, t1, n] for _, n, t0, t1 in chunks], dtype=np.float64)
    rec, owner, ok = decode_blocks_many([c[0] for c in chunks], rows)
    for i, ((blob, n, t0, t1), sound) in enumerate(zip(chunks, ok, strict=True)):
        try:
            alone = decode_blocks(blob, n, t0, t1)
        except CorruptData:
            assert not sound and not (owner == i).any()
        else:
            assert sound and alone.tobytes() == rec[owner == i].tobytes()
    assert ok.tolist()[:4] == [True, False, False, False] and ok[5]
    assert decode_blocks_many([], np.empty((0, 3)))[2].tolist() == []


def test_encoding_bad_input_stays_a_programming_error() -> None:
    with pytest.raises(ValueError, match="one or more samples"):
        encode(np.empty(0), np.empty(0))
    with pytest.raises(ValueError, match="sorted"):
        encode(np.array([2.0, 1.0]), np.array([0.0, 0.0]))
    with pytest.raises(ValueError, match="24 days"):
        encode(np.array([0.0, (MAX_DELTA_MS + 1) / 1000.0]), np.array([0.0, 0.0]))
    assert len(decode(encode(np.array([0.0, MAX_DELTA_MS / 1000.0]), np.zeros(2)))[0]) == 2


def test_gaps_over_24_days_split_chunks_and_every_sample_reads_back(
    store: Store, request: pytest.FixtureRequest
) -> None:
    tid = store.create_trial(store.ensure_run("r", start=1e9).id, start=1e9).id
    sid = store.series(tid, "cpu.util").id
    gap = (MAX_DELTA_MS + 1) / 1000.0  # one millisecond over what a chunk can hold
    ts = [1e9 + i for i in range(10)]
    ts += [ts[-1] + gap + i for i in range(10)]
    ts += [ts[-1] + MAX_DELTA_MS / 1000.0]  # exactly the most one chunk can span
    ts += [ts[-1] + gap + i for i in range(100)]
    ts += [ts[-1] + gap + i for i in range(2 * CHUNK_SAMPLES - 100)]
    vs = [float(i % 97) for i in range(len(ts))]
    # the first 21 go to pending rows, packed by compact(); the rest straight into chunks
    store.append_samples((sid, t, v) for t, v in zip(ts[:21], vs[:21], strict=True))
    store.compact()
    store.append_samples((sid, t, v) for t, v in zip(ts[21:], vs[21:], strict=True))
    if not on_clickhouse(request):  # chunks are the SQL store's; every sample reads back
        chunks = store._chunk_summaries(sid, -np.inf, np.inf)
        assert [c[3] for c in chunks] == [10, 11, 100, CHUNK_SAMPLES - 100, CHUNK_SAMPLES]
    got_t, got_v = store.read_samples(sid)
    want_t, want_v = to_stored(ts, vs)
    assert np.array_equal(got_t, want_t) and np.array_equal(got_v, want_v)
    w = store.window(sid, ts[0], ts[-1], 10_000)
    assert w.samples is not None and [s[0] for s in w.samples] == want_t.tolist()


def test_decode_blocks_many_equals_decode_blocks_one_by_one() -> None:
    rng = np.random.default_rng(5)
    chunks = []
    for n in (CHUNK_SAMPLES, 70, CHUNK_SAMPLES, 70, 1, CHUNK_SAMPLES):
        t0 = 1_700_000_000 + len(chunks) * 10_000
        chunks.append(to_stored(t0 + np.arange(n) * 1.003, rng.normal(0, 1, n)))
    blobs = [(encode_blocks if i % 3 else _v1_blocks)(ts, vs) for i, (ts, vs) in enumerate(chunks)]
    blobs[2] = blobs[2][:-1]  # damaged: refused, the others still read
    blobs[3] = bytes(len(blobs[3]))
    rows = np.array([[ts[0], ts[-1], len(ts)] for ts, _ in chunks])
    rec, owner, ok = decode_blocks_many(blobs, rows)
    assert ok.tolist() == [True, True, False, False, True, True]
    want = [
        decode_blocks(blobs[i], len(chunks[i][0]), *chunks[i][0][[0, -1]]) for i in (0, 1, 4, 5)
    ]
    assert rec.tobytes() == np.concatenate(want).tobytes()
    assert owner.tolist() == [i for i in (0, 1, 4, 5) for _ in range(-(-len(chunks[i][0]) // 32))]
