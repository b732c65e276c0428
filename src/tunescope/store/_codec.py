"""Chunk codec: a run of (time, value) samples of one series packed into one blob.

Version 2, written since 0.x (little endian)::

    u8  version (2)
    u32 n               number of samples
    i64 t0_ms           first timestamp, integer milliseconds since the epoch
    i32 period_ms       the chunk's median time step
    u8  mode            how values became integers: 0-3 scaled by 10**mode (values that are
                        exact decimals: integer percents, bytes, milliwatts as W), 4 float32
                        bits in sign-magnitude order, 5 float32 bits XOR-ed with the previous
    u8  time width      bytes per time residual (1, 2, 4 or 8)
    u8  value width     bytes per value residual
    ... LZMA2 (raw, 64 KiB dictionary) of
        shuffled zigzag(time delta - period_ms) (n-1) | shuffled zigzag residuals of values (n)

A value residual is the difference from the previous integer (modes 0-4) or the XOR with the
previous bits (mode 5, picked over 4 when it packs smaller). A steady 1 Hz sampler's time
residuals are its jitter in milliseconds, one byte each before compression; integer-valued
series (GPU utilisation, memory, temperatures) cost well under a byte a sample.

Version 1 (still decoded, no longer written)::

    u8 version (1) | u32 n | i64 t0_ms |
    zlib( shuffled i32 time deltas in ms (n-1) | shuffled u32 XOR-deltas of float32 values )

Timestamps keep millisecond precision; values are float32 (about 7 significant digits), which
is what the store promises for every sample; both versions give them back exactly.

Block summaries (the ``blocks`` column) come in two forms: version 1, BLOCK_DTYPE records as
they are; version 2, an 8-byte marker (a float64 NaN, which a version 1 blob, starting with
its finite first time, never begins with) then zlib of the byte-shuffled records
(gap and span in ms, count, min, max, sum), about a quarter of the size.

Encoding refuses, with ValueError, what it cannot give back exactly: times beyond
:data:`MAX_ABS_TIME_S` of the epoch (or not finite), finite values beyond float32's range
(infinities and NaN are float32 values, kept bit for bit); and bad input (unsorted times, no
samples), a programming error. Batches are checked against the same ranges before they reach
a store (``produce/_batch.py``), so a stored sample is always one the codec can pack. Decoding
bytes that are not what encoding made (a damaged database) raises
:class:`~tunescope.errors.CorruptData` with a one-line message, never ValueError, zlib.error,
lzma.LZMAError or struct.error; the store then skips that chunk (see ``Store.window``).
"""

from __future__ import annotations

import lzma
import math
import struct
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt

from tunescope.errors import CorruptData
from tunescope.store._checks import MAX_ABS_TIME_S, MAX_SAMPLE_VALUE

__all__ = [
    "BLOCK_DTYPE",
    "BLOCK_SAMPLES",
    "MAX_ABS_TIME_S",
    "MAX_DELTA_MS",
    "check_chunks",
    "decode",
    "decode_blocks",
    "decode_blocks_many",
    "decode_many",
    "encode",
    "encode_blocks",
    "stored_end",
    "to_stored",
]

_HEADER = struct.Struct("<BIq")
"""The head every version shares: version, sample count, first time in ms."""
_HEADER2 = struct.Struct("<BIqiBBB")
_VERSION = 2
MAX_DELTA_MS = 2**31 - 1
_HALF_MS = 0.0005
"""Half the stored time resolution: how far apart two stored times may be and still match."""
_WIDTHS: dict[int, type[np.unsignedinteger[Any]]] = {
    1: np.uint8,
    2: np.uint16,
    4: np.uint32,
    8: np.uint64,
}
_SCALED_MODES = 4
"""Modes 0-3: values that are exact multiples of 10**-mode, kept as those integers."""
_MODE_DELTA, _MODE_XOR = 4, 5
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 1 << 16}]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

BLOCK_SAMPLES = 32
"""Samples per block summary. Each chunk also stores the time span, count, min, max and sum of
every run of BLOCK_SAMPLES samples in it, so a window whose buckets are wider than a block
never needs to decode the samples."""

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

_BLOCKS2_MARK = struct.pack("<Q", 0xFFF8_0000_0000_0002)
"""Starts a version 2 blocks blob: a float64 NaN, which a version 1 blob (whose first 8 bytes
are its chunk's finite first time) never starts with."""
_BLOCKS2_DTYPE = np.dtype(
    [("gap", "<u8"), ("span", "<u8"), ("n", "u1"), ("min", "<f4"), ("max", "<f4"), ("sum", "<f8")]
)
"""A version 2 block: ms from the previous block's last sample (the chunk's first time for
the first block) to its first, ms from its first to its last, then as BLOCK_DTYPE."""


def stored_end(t: float) -> float:
    """A trial's end as the store keeps it: to the millisecond, rounded up, so that nothing
    taken at or before the end lies after it once stored: not a sample (its time rounded to
    the nearest millisecond), not an event (its time kept as given)."""
    return max(math.ceil(t * 1000.0) / 1000.0, float(t))


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


def _zigzag(d: I64) -> U64:
    return ((d << 1) ^ (d >> 63)).view(np.uint64)


def _unzigzag(u: U64) -> I64:
    return (u >> np.uint64(1)).view(np.int64) ^ -(u & np.uint64(1)).view(np.int64)


def _narrow(u: U64) -> tuple[int, bytes]:
    """The fewest of 1, 2, 4 or 8 bytes that hold every value of ``u``, and ``u`` shuffled
    at that width."""
    top = int(u.max()) if u.size else 0
    width = next(w for w in (1, 2, 4, 8) if top < 1 << (8 * w))
    return width, _shuffle(u.astype(_WIDTHS[width]))


def _as_integers(v32: npt.NDArray[np.float32]) -> tuple[int, I64]:
    """(mode, integers) that give back ``v32`` bit for bit: the smallest decimal scale that
    makes every value an integer, else the float32 bits in sign-magnitude order."""
    v = v32.astype(np.float64)
    for mode in range(_SCALED_MODES):
        scale = 10.0**mode
        with np.errstate(invalid="ignore", over="ignore"):
            q = np.round(v * scale)
            if not np.all(np.abs(q) < 2.0**53):  # also refuses NaN and infinities
                break
        back = (q.astype(np.int64) / scale).astype(np.float32)
        if np.array_equal(back.view(np.uint32), v32.view(np.uint32)):
            return mode, q.astype(np.int64)
    return _MODE_DELTA, _bits_to_ordered(v32.view(np.uint32))


def _bits_to_ordered(bits: npt.NDArray[np.uint32]) -> I64:
    b = bits.astype(np.int64)
    neg = b >= 1 << 31
    return np.where(neg, -(b & 0x7FFF_FFFF) - 1, b)


def _ordered_to_bits(q: I64) -> npt.NDArray[np.uint32]:
    return np.where(q < 0, (-q - 1) | (1 << 31), q).astype(np.uint32)


def _from_integers(mode: int, q: I64) -> F64:
    if mode < _SCALED_MODES:
        return (q / 10.0**mode).astype(np.float32).astype(np.float64)
    return _ordered_to_bits(q).view(np.float32).astype(np.float64)


def _compress(body: bytes) -> bytes:
    return lzma.compress(body, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)


def encode(ts: F64, vs: F64) -> bytes:
    """Pack sorted timestamps (epoch seconds) and values into one blob (version 2).

    Raises ValueError if the times are not sorted or two neighbours are more than
    about 24 days apart (the caller starts a new chunk there), and for what it cannot give
    back exactly (see the module doc).
    """
    n = len(ts)
    if n == 0 or n != len(vs):
        raise ValueError("a chunk needs one or more samples and as many values as times")
    t64 = np.asarray(ts, dtype=np.float64)
    if not np.all(np.abs(t64) <= MAX_ABS_TIME_S):  # also NaN
        raise ValueError(f"chunk times must be within {MAX_ABS_TIME_S:g} s of the epoch")
    v64 = np.asarray(vs, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        if np.any(np.isfinite(v64) & (np.abs(v64) > MAX_SAMPLE_VALUE)):
            raise ValueError("chunk values must be within float32's range")
    ms = np.round(np.asarray(ts, dtype=np.float64) * 1000.0).astype(np.int64)
    deltas = np.diff(ms)
    if deltas.size and (deltas.min() < 0 or deltas.max() > MAX_DELTA_MS):
        raise ValueError("chunk times must be sorted and at most ~24 days apart")
    period = int(np.median(deltas)) if deltas.size else 0
    t_width, t_body = _narrow(_zigzag(deltas - period))
    v32 = np.asarray(vs, dtype=np.float32)
    mode, q = _as_integers(v32)
    v_width, v_body = _narrow(_zigzag(np.diff(q, prepend=np.int64(0))))
    packed = _compress(t_body + v_body)
    if mode == _MODE_DELTA:
        bits = v32.view(np.uint32)
        xor = np.empty_like(bits)
        xor[0] = bits[0]
        np.bitwise_xor(bits[1:], bits[:-1], out=xor[1:])
        x_width, x_body = _narrow(xor.astype(np.uint64))
        x_packed = _compress(t_body + x_body)
        if len(x_packed) < len(packed):
            mode, v_width, packed = _MODE_XOR, x_width, x_packed
    return _HEADER2.pack(_VERSION, n, int(ms[0]), period, mode, t_width, v_width) + packed


def _head(blob: bytes) -> tuple[int, int, int]:
    """(version, n, t0_ms) of a blob; CorruptData for a short blob, an unknown version or no
    samples."""
    if len(blob) < _HEADER.size:
        raise CorruptData(f"chunk blob truncated: {len(blob)} bytes, shorter than its header")
    version, n, t0 = _HEADER.unpack_from(blob)
    if version not in (1, 2):
        raise CorruptData(f"unknown chunk version {version}")
    if n == 0:
        raise CorruptData("chunk blob says it holds no samples")
    return int(version), int(n), int(t0)


def _inflate(
    d: zlib._Decompress | lzma.LZMADecompressor, data: memoryview, size: int, what: str
) -> bytes:
    """Exactly ``size`` bytes from one complete stream, nothing after it; decompresses at most
    one byte more than that, so a damaged count cannot make it allocate more. ``what`` ends
    the message of a size mismatch ("its count N needs")."""
    kind = "lzma" if isinstance(d, lzma.LZMADecompressor) else "zlib"
    try:
        body = d.decompress(data, size + 1)
    except (zlib.error, lzma.LZMAError) as exc:
        raise CorruptData(f"chunk blob has a bad {kind} stream ({exc})") from None
    if len(body) != size:
        raise CorruptData(f"chunk blob holds {len(body)} bytes of samples, not the {size} {what}")
    if not d.eof:
        raise CorruptData(f"chunk blob truncated: its {kind} stream does not end")
    if d.unused_data:
        raise CorruptData(f"chunk blob has {len(d.unused_data)} stray bytes after its samples")
    return body


def _body_v1(blob: bytes, n: int) -> bytes:
    """The decompressed body of a version 1 blob of ``n`` samples: 8n - 4 bytes."""
    data = memoryview(blob)[_HEADER.size :]
    return _inflate(zlib.decompressobj(), data, 8 * n - 4, f"its count {n} needs")


def _check_sorted(deltas: npt.NDArray[np.generic]) -> None:
    if deltas.size and int(deltas.min()) < 0:
        raise CorruptData("chunk blob has times that go backwards")


def _decode_v1(blob: bytes, n: int, t0: int) -> tuple[F64, F64]:
    body = _body_v1(blob, n)
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


def _decode_v2(blob: bytes, n: int, t0: int) -> tuple[F64, F64]:
    if len(blob) < _HEADER2.size:
        raise CorruptData(f"chunk blob truncated: {len(blob)} bytes, shorter than its header")
    _, _, _, period, mode, t_width, v_width = _HEADER2.unpack_from(blob)
    if mode > _MODE_XOR or t_width not in _WIDTHS or v_width not in _WIDTHS:
        raise CorruptData(
            f"chunk blob has an unknown layout (mode {mode}, widths {t_width}/{v_width})"
        )
    t_size = t_width * (n - 1)
    d = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    data = memoryview(blob)[_HEADER2.size :]
    body = _inflate(d, data, t_size + v_width * n, f"its count {n} needs")
    res_t = _unshuffle(body[:t_size], n - 1, _WIDTHS[t_width]).astype(np.uint64)
    deltas = _unzigzag(res_t) + period
    _check_sorted(deltas)
    ms = np.empty(n, dtype=np.int64)
    ms[0] = t0
    np.cumsum(deltas, dtype=np.int64, out=ms[1:])
    ms[1:] += t0
    res_v = _unshuffle(body[t_size:], n, _WIDTHS[v_width]).astype(np.uint64)
    if mode == _MODE_XOR:
        bits = np.bitwise_xor.accumulate(res_v.astype(np.uint32))
        return ms / 1000.0, bits.view(np.float32).astype(np.float64)
    q = np.cumsum(_unzigzag(res_v), dtype=np.int64)
    return ms / 1000.0, _from_integers(mode, q)


def decode(blob: bytes) -> tuple[F64, F64]:
    """Unpack a blob made by :func:`encode` (either version) into (times in epoch seconds,
    float values).

    Raises CorruptData (one line) for a blob that is not one: truncated, an unknown version
    or layout, a bad compressed stream, a body whose size does not match its sample count,
    times out of order. Checksums let a rare damaged blob through (zlib's about one in 2**16;
    LZMA2's raw stream has none, though most damage breaks its range coder);
    :func:`check_chunks` holds the decoded samples against the chunk's stored summary to
    catch those."""
    version, n, t0 = _head(blob)
    if version == 1:
        return _decode_v1(blob, n, t0)
    return _decode_v2(blob, n, t0)


def encode_blocks(ts: F64, vs: F64) -> bytes:
    """Block summaries of one chunk's samples, as a version 2 blocks blob (see the module's
    doc). min and max are float32, exact since stored values are float32."""
    n = len(ts)
    starts = np.arange(0, n, BLOCK_SAMPLES)
    ends = np.minimum(starts + BLOCK_SAMPLES, n) - 1
    ms = np.round(np.asarray(ts, dtype=np.float64) * 1000.0).astype(np.int64)
    rec = np.empty(len(starts), dtype=_BLOCKS2_DTYPE)
    prev_last = np.concatenate([ms[:1], ms[ends[:-1]]])
    rec["gap"] = ms[starts] - prev_last
    rec["span"] = ms[ends] - ms[starts]
    rec["n"] = ends - starts + 1
    v32 = np.asarray(vs, dtype=np.float32)
    rec["min"] = np.minimum.reduceat(v32, starts)
    rec["max"] = np.maximum.reduceat(v32, starts)
    rec["sum"] = np.add.reduceat(np.asarray(vs, dtype=np.float64), starts)
    raw = rec.view(np.uint8).reshape(len(rec), _BLOCKS2_DTYPE.itemsize).T.tobytes()
    return _BLOCKS2_MARK + zlib.compress(raw, 9)


def _block_bytes(blob: bytes, n: int) -> tuple[int, bytes]:
    """(version, raw records) of the blocks blob of a chunk of ``n`` samples: version 2's
    decompressed,
    byte-shuffled _BLOCKS2_DTYPE records, or version 1's BLOCK_DTYPE records as they are.
    CorruptData for the wrong size or a bad stream."""
    blocks = -(-n // BLOCK_SAMPLES)
    if blob[: len(_BLOCKS2_MARK)] == _BLOCKS2_MARK:
        size = blocks * _BLOCKS2_DTYPE.itemsize
        data = memoryview(blob)[len(_BLOCKS2_MARK) :]
        return 2, _inflate(zlib.decompressobj(), data, size, f"{blocks} block summaries need")
    if len(blob) != blocks * BLOCK_DTYPE.itemsize:
        raise CorruptData(
            f"block summaries of {len(blob)} bytes, not the {blocks * BLOCK_DTYPE.itemsize} "
            f"a chunk of {n} samples has"
        )
    return 1, blob


def _block_records(version: int, raws: list[bytes], blocks: int, t_first: F64) -> Any:
    """BLOCK_DTYPE records, shape (chunks, blocks), of chunks of one version and block count,
    from their raw records (see _block_bytes) and first times, in one vectorised pass."""
    m = len(raws)
    joined = np.frombuffer(b"".join(raws), dtype=np.uint8)
    if version == 1:
        return joined.view(BLOCK_DTYPE).reshape(m, blocks)
    size = _BLOCKS2_DTYPE.itemsize
    shuffled = np.ascontiguousarray(joined.reshape(m, size, blocks).transpose(0, 2, 1))
    rec2: Any = shuffled.view(_BLOCKS2_DTYPE).reshape(m, blocks)
    gap, span = rec2["gap"].view(np.int64), rec2["span"].view(np.int64)
    last_ms = np.round(t_first * 1000.0).astype(np.int64)[:, None] + np.cumsum(gap + span, axis=1)
    rec = np.empty((m, blocks), dtype=BLOCK_DTYPE)
    rec["t_first"] = (last_ms - span) / 1000.0
    rec["t_last"] = last_ms / 1000.0
    for f in ("n", "min", "max", "sum"):
        rec[f] = rec2[f]
    return rec


def _blocks_agree(rec: Any, n: npt.NDArray[np.int64], t_first: F64, t_last: F64) -> Any:
    """Per chunk (row of ``rec``): its blocks' counts add up to ``n``, each is 1 to
    BLOCK_SAMPLES, they are in order, and they span the chunk's first to last time."""
    lo, hi = rec["t_first"], rec["t_last"]
    return (
        (rec["n"].sum(axis=1, dtype=np.int64) == n)
        & np.all((rec["n"] >= 1) & (rec["n"] <= BLOCK_SAMPLES), axis=1)
        & np.all(lo <= hi, axis=1)
        & np.all(lo[:, 1:] >= hi[:, :-1], axis=1)
        & np.all(rec["min"] <= rec["max"], axis=1)
        & (np.abs(lo[:, 0] - t_first) <= _HALF_MS)
        & (np.abs(hi[:, -1] - t_last) <= _HALF_MS)
    )


def decode_many(blobs: list[bytes]) -> tuple[F64, F64, npt.NDArray[np.int64]]:
    """Decode several chunks at once: (times, values, per-chunk sample counts), concatenated in
    the given order. Full-size version 1 chunks of equal length are decoded in one vectorised
    pass."""
    if not blobs:
        return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)
    heads = [_head(b) for b in blobs]
    counts = np.array([h[1] for h in heads], dtype=np.int64)
    n = int(counts[0])
    if n > 1 and bool(np.all(counts == n)) and all(h[0] == 1 for h in heads):
        k = len(blobs)
        body = np.frombuffer(b"".join(_body_v1(b, n) for b in blobs), dtype=np.uint8).reshape(
            k, 8 * n - 4
        )
        deltas = np.ascontiguousarray(
            body[:, : 4 * (n - 1)].reshape(k, 4, n - 1).transpose(0, 2, 1)
        ).view(np.int32)
        deltas = deltas.reshape(k, n - 1)
        _check_sorted(deltas)
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
    ``t_last``, from a blocks blob of either version. CorruptData (one line) when the blob is
    not that: the wrong size, a bad zlib stream, block counts that do not add up to ``n``, or
    blocks out of order or outside the chunk's span."""
    blocks = -(-n // BLOCK_SAMPLES)
    version, raw = _block_bytes(blob, n)
    rec = _block_records(version, [raw], blocks, np.array([t_first]))
    if not _blocks_agree(rec, np.array([n]), np.array([t_first]), np.array([t_last]))[0]:
        raise CorruptData("block summaries do not match their chunk (counts, order or span)")
    return np.asarray(rec[0])


def decode_blocks_many(blobs: list[bytes], rows: F64) -> tuple[npt.NDArray[np.void], Any, Any]:
    """The block summaries of several chunks at once, ``rows`` holding each one's (t_first,
    t_last, n): (their BLOCK_DTYPE records concatenated in order, the row each record belongs
    to, which rows decoded). A row whose blob :func:`decode_blocks` would refuse has no
    records and False. Chunks of one version and block count go in one vectorised pass."""
    n = rows[:, 2].astype(np.int64)
    blocks = -(-n // BLOCK_SAMPLES)
    ok = np.zeros(len(blobs), dtype=bool)
    groups: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
    for i, blob in enumerate(blobs):
        try:
            version, raw = _block_bytes(blob, int(n[i]))
        except CorruptData:
            continue
        groups.setdefault((version, int(blocks[i])), []).append((i, raw))
    parts, owners = [], []
    for (version, k), members in groups.items():
        idx = np.array([i for i, _ in members])
        rec = _block_records(version, [r for _, r in members], k, rows[idx, 0])
        good = _blocks_agree(rec, n[idx], rows[idx, 0], rows[idx, 1])
        ok[idx[good]] = True
        parts.append(rec[good].reshape(-1))
        owners.append(np.repeat(idx[good], k))
    if not parts:
        return np.empty(0, dtype=BLOCK_DTYPE), np.empty(0, dtype=np.int64), ok
    order = np.argsort(np.concatenate(owners), kind="stable")
    return np.concatenate(parts)[order], np.concatenate(owners)[order], ok
