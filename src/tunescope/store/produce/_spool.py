"""The spool: batches that could not reach the store, kept on local disk until they can.

Where: ``$TUNESCOPE_SPOOL`` if set, else ``$XDG_STATE_HOME/tunescope/spool``, else
``~/.local/state/tunescope/spool``; one folder per store (named by a hash of its URL without
the password; ``store.txt`` in it names the store), one file per writer.

A spool file is append-only: a header line, then one frame per batch: the payload's length
and CRC-32 (two little-endian u32), then the batch's JSON, zlib-compressed. The writer that
owns a file holds an exclusive ``flock`` on it for as long as it may still append; the lock
goes when the writer closes the file or its process dies (kill -9 included), and only then may
another process replay it (:func:`replay`).

Every append is checked: a short write (a full disk gives a short count without raising) or a
failed one is cut back off and raises ``OSError``, so the batches are not "spooled" and their
writer keeps them. The writer fsyncs each append right after it, outside its lock (the cadence
is therefore bounded by the writer's loop: at most :data:`FSYNC_EVERY_S`).

A damaged frame (cut short by a crash, bytes flipped on disk: its length is not sane, its CRC
does not match or it does not decode) costs that frame only: reading resynchronises on the next
offset where a frame's length is sane, its CRC matches and its payload decodes. The damaged
bytes are kept aside in ``rejected/`` and counted (``tunescope sync`` reports them).

When a server refuses the writer's token (401/403), writers stop sending and leave
:data:`REFUSED_NOTE` in the store's spool folder, naming the refusal; ``tunescope runs`` and
``sync`` say so, and a replay that lands batches again removes it.

Replays are exactly once: :meth:`~tunescope.store.Store.write` remembers batch ids, so a batch
replayed twice (a crash mid-replay, a copy that reached the store and the spool both) is
written once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import mmap
import os
import socket
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from tunescope._env import ENV_SPOOL
from tunescope.errors import AccessDenied, Conflict, CorruptData, Rejected, StoreUnavailable
from tunescope.store._url import redact
from tunescope.store.produce._batch import Batch

__all__ = [
    "FSYNC_EVERY_S",
    "REFUSED_NOTE",
    "Frame",
    "ReplayStats",
    "SpoolFile",
    "Verdict",
    "classify",
    "note_refused",
    "pending",
    "refused",
    "replay",
    "spool_dir",
    "spool_root",
]

REFUSED_NOTE = "token-refused.txt"
"""Left in a store's spool folder while its server refuses the writers' token: one line, the
refusal."""

FSYNC_EVERY_S = 1.0
"""Longest an appended spool frame waits for its fsync (the writer's loop wakes at least this
often while it holds anything)."""

_MAGIC = b"tunescope-spool 1 "
_FRAME = struct.Struct("<II")
_MAX_FRAME = 256 * 1024 * 1024
_ZLIB_HEAD = b"x\x01"  # zlib.compress(..., 1): where a frame's payload may start


def spool_root() -> Path:
    """The folder holding every store's spool (see the module doc)."""
    env = os.environ.get(ENV_SPOOL)
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "tunescope" / "spool"


def spool_dir(url: str, root: Path | None = None) -> Path:
    """The spool folder of the store at ``url`` (not created)."""
    shown = redact(url)
    return (root or spool_root()) / hashlib.sha256(shown.encode()).hexdigest()[:16]


Verdict = Literal["retry", "refused", "rejected"]


def classify(exc: BaseException) -> Verdict:
    """The one policy every writer (the :class:`~tunescope.store.Writer`, :func:`replay`)
    follows for a batch whose write raised ``exc``:

    * ``"rejected"``: only the store's proof that the batch itself is wrong:
      :class:`~tunescope.errors.Rejected` (a contract violation it raises on purpose, a value
      the database cannot hold, an HTTP store's 400/409/413/422 answer to it) or
      :class:`~tunescope.errors.Conflict` (a write conflicts only when the batch's id was
      written before with other content). The batch is set aside in ``rejected/`` and never
      retried.
    * ``"refused"``: :class:`~tunescope.errors.AccessDenied` (401/403, a certificate that does
      not verify). Retrying cannot help until a person fixes the token: writers stop sending,
      keep the batch in the spool and leave :data:`REFUSED_NOTE`.
    * ``"retry"``: everything else: the store unreachable, locked, read-only, full, out of
      memory or shutting down (:class:`~tunescope.errors.StoreUnavailable`), a trial not there
      yet (:class:`~tunescope.errors.NotFound`), a damaged or newer database, 5xx, 429, a
      timeout, a bug of ours. The batch waits (in memory, then in the spool) and is sent
      again.

    Drivers' errors are translated to these classes where they are raised (``sql/_postgres.py``,
    ``sql/_sqlite.py``, ``remote/_client.py``, ``clickhouse/_errors.py``); this function looks
    at our classes only."""
    if isinstance(exc, (Rejected, Conflict)):
        return "rejected"
    if isinstance(exc, AccessDenied):
        return "refused"
    return "retry"


def note_refused(folder: Path, message: str) -> None:
    """Leave :data:`REFUSED_NOTE` in a store's spool ``folder`` (best effort)."""
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        (folder / REFUSED_NOTE).write_text(message.strip().splitlines()[0] + "\n", "utf-8")


def refused(folder: Path) -> str | None:
    """The refusal a writer noted in a store's spool ``folder``, or None."""
    try:
        return (folder / REFUSED_NOTE).read_text("utf-8").strip() or "token refused"
    except OSError:
        return None


def clear_refused(folder: Path) -> None:
    """The store took a batch again: remove :data:`REFUSED_NOTE`."""
    with contextlib.suppress(OSError):
        (folder / REFUSED_NOTE).unlink()


@dataclass(frozen=True)
class Frame:
    """One frame of a spool file, from ``start`` to ``end``: its batch, or None when it cannot
    be read (``damaged``: bytes that are no frame, cut short or changed; else a frame whose
    CRC matches but whose payload does not decode)."""

    start: int
    end: int
    batch: Batch | None
    damaged: bool = False


class SpoolFile:
    """One writer's spool file, locked while open (see the module doc). Not thread-safe: its
    writer uses it from one thread."""

    def __init__(self, path: Path, f: IO[bytes]) -> None:
        self.path = path
        self._f = f
        self.size = f.seek(0, os.SEEK_END)
        self.read_at = _header_end(f)

    @classmethod
    def create(cls, url: str, root: Path | None = None) -> SpoolFile:
        """A new, locked spool file for the store at ``url`` (its folder created 0700)."""
        folder = spool_dir(url, root)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        note = folder / "store.txt"
        if not note.exists():
            with contextlib.suppress(OSError):
                note.write_text(redact(url) + "\n", encoding="utf-8")
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.spool"
        path = folder / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        f = os.fdopen(fd, "r+b", buffering=0)
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            meta = {"store": redact(url), "pid": os.getpid(), "host": socket.gethostname()}
            head = _MAGIC + json.dumps(meta).encode() + b"\n"
            if f.write(head) != len(head):  # a full disk: short, without raising
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        except BaseException:
            with contextlib.suppress(OSError):
                path.unlink()
            f.close()
            raise
        return cls(path, f)

    @classmethod
    def claim(cls, path: Path) -> SpoolFile | None:
        """Lock a released spool file for replay; None while its writer still holds it (or
        it vanished)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        f = os.fdopen(fd, "r+b", buffering=0)
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return None
        if not path.exists():  # replayed and removed between our open and our lock
            f.close()
            return None
        return cls(path, f)

    def append(self, batches: list[Batch]) -> None:
        """Append batches (to the page cache: they outlive this process from here on; call
        :meth:`sync` for a machine that may lose power). A short or failed write is cut back
        off and raises ``OSError``: nothing of ``batches`` counts as spooled."""
        out = bytearray()
        for b in batches:
            payload = zlib.compress(b.to_json(), 1)
            out += _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        before = self.size
        try:
            self._f.seek(before)
            view = memoryview(bytes(out))
            while view:
                n = self._f.write(view)
                if not n:  # a full disk: the count is short (or None), nothing raised
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
                view = view[n:]
        except BaseException:
            with contextlib.suppress(OSError, ValueError):
                self._f.truncate(before)  # no half frame stays behind
            raise
        self.size = before + len(out)

    def sync(self) -> None:
        """fsync: what was appended survives a power loss. May take long on a busy disk, so
        callers do it holding no lock; safe while another thread closes the file."""
        with contextlib.suppress(OSError, ValueError):
            os.fsync(self._f.fileno())

    def unread(self) -> bool:
        """Whether frames remain after the replay position."""
        return self.read_at < self.size

    def frames(self) -> Iterator[Frame]:
        """The frames from the replay position on (see the module doc): a damaged stretch
        comes as one ``damaged`` frame, and reading goes on at the next valid frame."""
        pos = self.read_at
        while pos < self.size:
            frame = self._frame_at(pos)
            if frame is None:
                nxt = self._resync(pos + 1)
                frame = Frame(pos, nxt, None, damaged=True)
            yield frame
            pos = frame.end

    def _frame_at(self, pos: int, strict: bool = False) -> Frame | None:
        """The frame at ``pos``, or None when its length, CRC (or with ``strict``, its
        payload) is not right."""
        if pos + _FRAME.size > self.size:
            return None
        self._f.seek(pos)
        length, crc = _FRAME.unpack(self._f.read(_FRAME.size))
        end = pos + _FRAME.size + length
        if length > _MAX_FRAME or end > self.size:
            return None
        payload = self._f.read(length)
        if zlib.crc32(payload) != crc:
            return None
        try:
            batch: Batch | None = Batch.from_json(zlib.decompress(payload))
        except (ValueError, zlib.error):
            if strict:
                return None
            batch = None
        return Frame(pos, end, batch)

    def _resync(self, pos: int) -> int:
        """The offset of the next valid frame at or after ``pos`` (its length sane, its CRC
        matching, its payload decoding), or the end of the file."""
        if pos >= self.size:
            return self.size
        with mmap.mmap(self._f.fileno(), self.size, access=mmap.ACCESS_READ) as m:
            at = pos + _FRAME.size
            while True:
                at = m.find(_ZLIB_HEAD, at)
                if at < 0:
                    return self.size
                if self._frame_at(at - _FRAME.size, strict=True) is not None:
                    return at - _FRAME.size
                at += 1

    def reset(self) -> None:
        """Everything was replayed: cut the file back to its header."""
        head = _header_end(self._f)
        self._f.truncate(head)
        self.size = self.read_at = head

    def remove(self) -> None:
        """Delete the file (still holding the lock, so no one replays it meanwhile)."""
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.close()

    def close(self) -> None:
        """Release the lock: from now on another process may replay what is left."""
        with contextlib.suppress(OSError):
            self._f.close()


def _header_end(f: IO[bytes]) -> int:
    f.seek(0)
    head = f.read(4096)
    if not head.startswith(_MAGIC) or b"\n" not in head:
        raise CorruptData("not a tunescope spool file")
    return head.index(b"\n") + 1


def set_aside(folder: Path, what: str, data: bytes, name: str | None = None) -> None:
    """Keep rejected batches (or damaged bytes) in ``rejected/`` for a person to look at
    (best effort: a disk that cannot take them costs only the copy). ``name``: a fixed name,
    so the same damage seen twice is kept once."""
    target = folder / "rejected"
    name = name or f"{int(time.time())}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    with contextlib.suppress(OSError):
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        (target / f"{name}-{what}").write_bytes(data)


def read_frame(spool: SpoolFile, frame: Frame) -> bytes:
    """The raw bytes of a frame (to keep a damaged one aside)."""
    spool._f.seek(frame.start)
    return spool._f.read(frame.end - frame.start)


@dataclass
class ReplayStats:
    """What a replay did: batches written (or found already written), kept for later (the
    store is unreachable, refuses the token, or their trial is not there yet), set aside as
    rejected, frames that could not be read (damaged: their bytes set aside), and spool files
    finished (removed) or left (still owned, or with batches kept). ``refused``: the store
    refused the token (the message)."""

    written: int = 0
    kept: int = 0
    rejected: int = 0
    damaged: int = 0
    files_done: int = 0
    files_left: int = 0
    refused: str | None = None
    errors: list[str] = field(default_factory=list)
    _seen: set[tuple[str, int]] = field(default_factory=set, repr=False)


def pending(url: str, root: Path | None = None) -> tuple[int, int]:
    """(spool files, bytes) waiting for the store at ``url`` (owned ones included)."""
    folder = spool_dir(url, root)
    files = sorted(folder.glob("*.spool")) if folder.is_dir() else []
    size = 0
    for p in files:
        with contextlib.suppress(OSError):
            size += p.stat().st_size
    return len(files), size


def replay(
    url: str,
    write: Callable[[Batch], int],
    *,
    root: Path | None = None,
    deadline: float | None = None,
) -> ReplayStats:
    """Replay every released spool file of the store at ``url`` through ``write`` (a store's
    :meth:`~tunescope.store.Store.write`), oldest file first, until done or ``deadline``
    (``time.monotonic()``). Files are replayed in passes, since a batch whose trial another
    file creates must wait for that file; a file whose batches all landed (or were set aside)
    is removed."""
    stats = ReplayStats()
    folder = spool_dir(url, root)
    if not folder.is_dir():
        return stats
    paths = sorted(folder.glob("*.spool"), key=lambda p: p.stat().st_mtime)
    waiting = list(paths)
    progress = True
    while waiting and progress:
        progress = False
        stats.kept = 0
        still: list[Path] = []
        for path in waiting:
            if stats.refused is not None or (deadline is not None and time.monotonic() >= deadline):
                still.append(path)
                continue
            done, moved = _replay_file(path, write, folder, stats, deadline)
            progress = progress or moved
            if not done:
                still.append(path)
        waiting = still
        if stats.refused is not None or any(e.startswith("unavailable") for e in stats.errors):
            break
    stats.files_left = len(waiting)
    if stats.refused is not None:
        note_refused(folder, stats.refused)
    elif stats.written:
        clear_refused(folder)
    return stats


def _replay_file(
    path: Path,
    write: Callable[[Batch], int],
    folder: Path,
    stats: ReplayStats,
    deadline: float | None,
) -> tuple[bool, bool]:
    """(file finished, any batch landed)."""
    try:
        spool = SpoolFile.claim(path)
    except CorruptData:
        with contextlib.suppress(OSError):
            set_aside(folder, "not-a-spool", path.read_bytes())
            path.unlink()
        return True, True
    if spool is None:
        return False, False
    moved = False
    kept = 0
    try:
        for frame in spool.frames():
            if deadline is not None and time.monotonic() >= deadline:
                kept += 1
                break
            batch = frame.batch
            if batch is None:
                if (path.name, frame.start) not in stats._seen:
                    stats._seen.add((path.name, frame.start))
                    stats.damaged += 1
                    set_aside(
                        folder, "damaged", read_frame(spool, frame), f"{path.stem}-{frame.start}"
                    )
                continue
            try:
                write(batch)
                stats.written += 1
                moved = True
            except Exception as exc:
                verdict = classify(exc)
                if verdict == "rejected":
                    stats.rejected += 1
                    set_aside(folder, "rejected", batch.to_json())
                    continue
                kept += 1
                if verdict == "refused":
                    stats.refused = f"{exc}"
                    break
                tag = "unavailable" if isinstance(exc, StoreUnavailable) else "waiting"
                if len(stats.errors) < 20:
                    stats.errors.append(f"{tag}: {exc}")
                if isinstance(exc, StoreUnavailable):
                    break
        if kept:
            stats.kept += kept
            return False, moved
        spool.remove()
        stats.files_done += 1
        return True, True
    finally:
        spool.close()
