"""Chunk codec: a run of (time, value) samples of one series packed into one blob.

Layout (little endian)::

    u8  version (1)
    u32 n               number of samples
    i64 t0_ms           first timestamp, integer milliseconds since the epoch
    ... zlib( shuffled i32 time deltas in ms (n-1) | shuffled u32 XOR-deltas of float32 values )

Timestamps keep millisecond precision; values are float32 (about 7 significant digits), which
is what the store promises for every sample. Time deltas of a steady sampler are nearly
constant and XOR-deltas of slowly moving values are mostly zero bytes; byte shuffling groups
the zero bytes so zlib removes them. A 1 Hz series costs about 3-5 bytes a sample.

Encoding bad input (unsorted times, no samples) is a programming error: ValueError. Decoding
bytes that are not what encoding made (a damaged database) raises
:class:`~tunescope.errors.CorruptData` with a one-line message, never ValueError, zlib.error or
struct.error; the store then skips that chunk (see ``Store.window``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tunescope.errors import CorruptData

__all__ = [
    "BLOCK_DTYPE",
    "BLOCK_SAMPLES",
    "MAX_DELTA_MS",
    "check_chunks",
    "decode",
    "decode_blocks",
    "decode_blocks_many",
    "decode_many",
    "encode",
    "encode_blocks",
    "to_stored",
]

_HEADER = struct.Struct("<BIq")
_VERSION = 1
MAX_DELTA_MS = 2**31 - 1
_HALF_MS = 0.0005
"""Half the stored time resolution: how far apart two stored times may be and still match."""

F64 = npt.NDArray[np.float64]

BLOCK_SAMPLES = 32
"""Samples per block summary. Each chunk also stores, uncompressed, the time span, count,
min, max and sum of every run of BLOCK_SAMPLES samples in it, so a window whose buckets are
wider than a block never needs to decode the samples."""

BLOCK_DTYPE = np.dtype(
    [
        ("t_first", "<f8"),
        ("t_last", "<f8"),
        ("n", "<u2"),
        ("min", "<f4"),
        ("max", "<f4"),
        ("sum", "<f8"),
    ]
)


def to_stored(ts: npt.ArrayLike, vs: npt.ArrayLike) -> tuple[F64, F64]:
    """Round samples to what the store keeps: millisecond times, float32 values."""
    t = np.round(np.asarray(ts, dtype=np.float64) * 1000.0) / 1000.0
    v = np.asarray(vs, dtype=np.float32).astype(np.float64)
    return t, v


def _shuffle(a: npt.NDArray[np.generic]) -> bytes:
    b = a.view(np.uint8).reshape(-1, a.itemsize)
    return b.T.tobytes()


def _unshuffle(raw: bytes, n: int, dtype: type[np.generic]) -> npt.NDArray[np.generic]:
    size = np.dtype(dtype).itemsize
    b = np.frombuffer(raw, dtype=np.uint8, count=n * size).reshape(size, n)
    return np.ascontiguousarray(b.T).view(dtype).reshape(n)


def encode(ts: F64, vs: F64) -> bytes:
    """Pack sorted timestamps (epoch seconds) and values into one blob.

    Raises ValueError if the times are not sorted or two neighbours are more than
    about 24 days apart (the caller starts a new chunk there).
    """
    n = len(ts)
    if n == 0 or n != len(vs):
        raise ValueError("a chunk needs one or more samples and as many values as times")
    ms = np.round(np.asarray(ts, dtype=np.float64) * 1000.0).astype(np.int64)
    deltas = np.diff(ms)
    if deltas.size and (deltas.min() < 0 or deltas.max() > MAX_DELTA_MS):
        raise ValueError("chunk times must be sorted and at most ~24 days apart")
    bits = np.asarray(vs, dtype=np.float32).view(np.uint32)
    xor = np.empty_like(bits)
    xor[0] = bits[0]
    np.bitwise_xor(bits[1:], bits[:-1], out=xor[1:])
    body = _shuffle(deltas.astype(np.int32)) + _shuffle(xor)
    return _HEADER.pack(_VERSION, n, int(ms[0])) + zlib.compress(body, 6)


def _head(blob: bytes) -> tuple[int, int]:
    """(n, t0_ms) of a blob; CorruptData for a short blob, an unknown version or no samples."""
    if len(blob) < _HEADER.size:
        raise CorruptData(f"chunk blob truncated: {len(blob)} bytes, shorter than its header")
    version, n, t0 = _HEADER.unpack_from(blob)
    if version != _VERSION:
        raise CorruptData(f"unknown chunk version {version}")
    if n == 0:
        raise CorruptData("chunk blob says it holds no samples")
    return int(n), int(t0)


def _body(blob: bytes, n: int) -> bytes:
    """The decompressed body of a blob of ``n`` samples: exactly 8n - 4 bytes, one complete
    zlib stream, nothing after it. Decompresses at most one byte more than that, so a damaged
    count cannot make it allocate more."""
    size = 8 * n - 4
    d = zlib.decompressobj()
    try:
        body = d.decompress(memoryview(blob)[_HEADER.size :], size + 1)
    except zlib.error as exc:
        raise CorruptData(f"chunk blob has a bad zlib stream ({exc})") from None
    if len(body) != size:
        raise CorruptData(
            f"chunk blob holds {len(body)} bytes of samples, not the {size} its count {n} needs"
        )
    if not d.eof:
        raise CorruptData("chunk blob truncated: its zlib stream does not end")
    if d.unused_data:
        raise CorruptData(f"chunk blob has {len(d.unused_data)} stray bytes after its samples")
    return body


def _check_sorted(deltas: npt.NDArray[np.generic]) -> None:
    if deltas.size and int(deltas.min()) < 0:
        raise CorruptData("chunk blob has times that go backwards")


def decode(blob: bytes) -> tuple[F64, F64]:
    """Unpack a blob made by :func:`encode` into (times in epoch seconds, float values).

    Raises CorruptData (one line) for a blob that is not one: truncated, an unknown version, a
    bad zlib stream, a body whose size does not match its sample count, times out of order.
    zlib's checksum lets about one damaged blob in 2**16 through; :func:`check_chunks` holds
    the decoded samples against the chunk's stored summary to catch those."""
    n, t0 = _head(blob)
    body = _body(blob, n)
    dsize = 4 * (n - 1)
    deltas = _unshuffle(body[:dsize], n - 1, np.int32)
    _check_sorted(deltas)
    ms = np.empty(n, dtype=np.int64)
    ms[0] = t0
    np.cumsum(deltas, dtype=np.int64, out=ms[1:])
    ms[1:] += t0
    xor = _unshuffle(body[dsize:], n, np.uint32)
    bits = np.bitwise_xor.accumulate(xor)
    return ms / 1000.0, bits.view(np.float32).astype(np.float64)


def encode_blocks(ts: F64, vs: F64) -> bytes:
    """Block summaries (BLOCK_DTYPE records) of one chunk's samples. min and max are float32,
    exact since stored values are float32."""
    n = len(ts)
    starts = np.arange(0, n, BLOCK_SAMPLES)
    rec = np.empty(len(starts), dtype=BLOCK_DTYPE)
    v32 = np.asarray(vs, dtype=np.float32)
    rec["t_first"] = ts[starts]
    rec["t_last"] = ts[np.minimum(starts + BLOCK_SAMPLES, n) - 1]
    rec["n"] = np.diff(np.append(starts, n))
    rec["min"] = np.minimum.reduceat(v32, starts)
    rec["max"] = np.maximum.reduceat(v32, starts)
    rec["sum"] = np.add.reduceat(np.asarray(vs, dtype=np.float64), starts)
    return rec.tobytes()


def decode_many(blobs: list[bytes]) -> tuple[F64, F64, npt.NDArray[np.int64]]:
    """Decode several chunks at once: (times, values, per-chunk sample counts), concatenated in
    the given order. Full-size chunks of equal length are decoded in one vectorised pass."""
    if not blobs:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    heads = [_head(b) for b in blobs]
    counts = np.array([h[0] for h in heads], dtype=np.int64)
    n = int(counts[0])
    if n > 1 and bool(np.all(counts == n)):
        k = len(blobs)
        body = np.frombuffer(b"".join(_body(b, n) for b in blobs), dtype=np.uint8).reshape(
            k, 8 * n - 4
        )
        deltas = np.ascontiguousarray(
            body[:, : 4 * (n - 1)].reshape(k, 4, n - 1).transpose(0, 2, 1)
        ).view(np.int32)
        deltas = deltas.reshape(k, n - 1)
        _check_sorted(deltas)
        ms = np.empty((k, n), dtype=np.int64)
        ms[:, 0] = [h[1] for h in heads]
        ms[:, 1:] = np.cumsum(deltas, axis=1, dtype=np.int64) + ms[:, :1]
        xor = np.ascontiguousarray(body[:, 4 * (n - 1) :].reshape(k, 4, n).transpose(0, 2, 1)).view(
            np.uint32
        )
        bits = np.bitwise_xor.accumulate(xor.reshape(k, n), axis=1)
        return (
            (ms / 1000.0).reshape(-1),
            bits.view(np.float32).astype(np.float64).reshape(-1),
            counts,
        )
    parts = [decode(b) for b in blobs]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), counts)


def check_chunks(t: F64, v: F64, counts: npt.NDArray[np.int64], rows: F64) -> None:
    """CorruptData unless decoded chunks (their samples concatenated, ``counts`` samples each)
    agree with their stored summaries, ``rows`` of (t_first, t_last, n, min, max, sum): the
    same count, first and last time (to the stored millisecond), min and max, and sum (to
    rounding)."""
    if not np.array_equal(rows[:, 2], counts):
        raise CorruptData("a chunk decodes to a different number of samples than its row says")
    starts = np.cumsum(counts) - counts
    last = starts + counts - 1
    ok = (
        np.all(np.abs(t[starts] - rows[:, 0]) <= _HALF_MS)
        and np.all(np.abs(t[last] - rows[:, 1]) <= _HALF_MS)
        and np.array_equal(np.minimum.reduceat(v, starts), rows[:, 3])
        and np.array_equal(np.maximum.reduceat(v, starts), rows[:, 4])
        and np.all(
            np.abs(np.add.reduceat(v, starts) - rows[:, 5])
            <= 1e-9 * np.add.reduceat(np.abs(v), starts)
        )
    )
    if not ok:
        raise CorruptData("a chunk decodes to samples that disagree with its stored summary")


def decode_blocks(blob: bytes, n: int, t_first: float, t_last: float) -> npt.NDArray[np.void]:
    """The block summaries (BLOCK_DTYPE records) of a chunk of ``n`` samples from ``t_first`` to
    ``t_last``. CorruptData (one line) when the blob is not that: the wrong size, block counts
    that do not add up to ``n``, or blocks out of order or outside the chunk's span."""
    blocks = -(-n // BLOCK_SAMPLES)
    if len(blob) != blocks * BLOCK_DTYPE.itemsize:
        raise CorruptData(
            f"block summaries of {len(blob)} bytes, not the {blocks * BLOCK_DTYPE.itemsize} "
            f"a chunk of {n} samples has"
        )
    rec, _, ok = decode_blocks_many([blob], [n], [t_first], [t_last])
    if not ok[0]:
        raise CorruptData("block summaries do not match their chunk (counts, order or span)")
    return rec


def decode_blocks_many(
    blobs: Sequence[bytes],
    n: Sequence[int],
    t_first: Sequence[float],
    t_last: Sequence[float],
) -> tuple[npt.NDArray[np.void], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """:func:`decode_blocks` of many chunks in one pass (a window decodes hundreds): every
    chunk's block records one after another, the index of each chunk's first record, and
    whether each chunk's are sound, False where decode_blocks raises CorruptData (that
    chunk's records are then meaningless: zeros when its blob had the wrong size)."""
    want = np.asarray(n, dtype=np.int64)
    # a chunk of no samples is unsound: laid out as one zero record, so every chunk has one
    counts = np.maximum(-(-want // BLOCK_SAMPLES), 1)
    size = BLOCK_DTYPE.itemsize
    sized = np.array(
        [len(b) == c * size for b, c in zip(blobs, counts.tolist(), strict=True)], dtype=bool
    ) & (want >= 1)
    rec = np.frombuffer(
        b"".join(
            b if ok else bytes(c * size) for b, c, ok in zip(blobs, counts, sized, strict=True)
        ),
        dtype=BLOCK_DTYPE,
    )
    if not len(counts):
        return rec, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    lo, hi = rec["t_first"], rec["t_last"]
    # each record's own rules, and its order after the one before (a chunk's first has none)
    each = (rec["n"] >= 1) & (rec["n"] <= BLOCK_SAMPLES) & (lo <= hi) & (rec["min"] <= rec["max"])
    each[1:] &= lo[1:] >= hi[:-1]
    each[starts] = (rec["n"][starts] >= 1) & (rec["n"][starts] <= BLOCK_SAMPLES)
    each[starts] &= (lo[starts] <= hi[starts]) & (rec["min"][starts] <= rec["max"][starts])
    ends = starts + counts - 1
    ok = (
        sized
        & (np.minimum.reduceat(each.astype(np.int8), starts) == 1)
        & (np.add.reduceat(rec["n"].astype(np.int64), starts) == want)
        & (np.abs(lo[starts] - np.asarray(t_first, dtype=np.float64)) <= _HALF_MS)
        & (np.abs(hi[ends] - np.asarray(t_last, dtype=np.float64)) <= _HALF_MS)
    )
    return rec, starts, ok
