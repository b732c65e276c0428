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
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import numpy.typing as npt

__all__ = [
    "BLOCK_DTYPE",
    "BLOCK_SAMPLES",
    "MAX_DELTA_MS",
    "decode",
    "decode_many",
    "encode",
    "encode_blocks",
    "to_stored",
]

_HEADER = struct.Struct("<BIq")
_VERSION = 1
MAX_DELTA_MS = 2**31 - 1

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


def decode(blob: bytes) -> tuple[F64, F64]:
    """Unpack a blob made by :func:`encode` into (times in epoch seconds, float values)."""
    version, n, t0 = _HEADER.unpack_from(blob)
    if version != _VERSION:
        raise ValueError(f"unknown chunk version {version}")
    body = zlib.decompress(memoryview(blob)[_HEADER.size :])
    dsize = 4 * (n - 1)
    deltas = _unshuffle(body[:dsize], n - 1, np.int32)
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
    heads = [_HEADER.unpack_from(b) for b in blobs]
    counts = np.array([h[1] for h in heads], dtype=np.int64)
    if any(h[0] != _VERSION for h in heads):
        raise ValueError("unknown chunk version")
    n = int(counts[0])
    if n > 1 and bool(np.all(counts == n)):
        k = len(blobs)
        body = np.frombuffer(
            b"".join(zlib.decompress(memoryview(b)[_HEADER.size :]) for b in blobs), dtype=np.uint8
        ).reshape(k, 8 * n - 4)
        deltas = np.ascontiguousarray(
            body[:, : 4 * (n - 1)].reshape(k, 4, n - 1).transpose(0, 2, 1)
        ).view(np.int32)
        deltas = deltas.reshape(k, n - 1)
        ms = np.empty((k, n), dtype=np.int64)
        ms[:, 0] = [h[2] for h in heads]
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
