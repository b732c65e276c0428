"""The spool: batches that could not reach the store, kept on local disk until they can.

Where: ``$TUNESCOPE_SPOOL`` if set, else ``$XDG_STATE_HOME/tunescope/spool``, else
``~/.local/state/tunescope/spool``; one folder per store (named by a hash of its URL without
the password; ``store.txt`` in it names the store), one file per writer.

A spool file is append-only: a header line, then one frame per batch: the payload's length
and CRC-32 (two little-endian u32), then the batch's JSON, zlib-compressed. The writer that
owns a file holds an exclusive ``flock`` on it for as long as it may still append; the lock
goes when the writer closes the file or its process dies (kill -9 included), and only then may
another process replay it (:func:`replay`). A frame cut short by a crash, or one whose CRC does
not match, ends the readable part of a file; what follows it is kept aside in ``rejected/``.

Replays are exactly once: :meth:`~tunescope.store.Store.write` remembers batch ids, so a batch
replayed twice (a crash mid-replay, a copy that reached the store and the spool both) is
written once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import struct
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tunescope.errors import (
    AccessDenied,
    CorruptData,
    NotFound,
    SchemaError,
    StoreError,
    StoreUnavailable,
)
from tunescope.store._batch import Batch
from tunescope.store._url import redact

__all__ = [
    "ENV_SPOOL",
    "ReplayStats",
    "SpoolFile",
    "keeps",
    "pending",
    "replay",
    "spool_dir",
    "spool_root",
]

ENV_SPOOL = "TUNESCOPE_SPOOL"
_MAGIC = b"tunescope-spool 1 "
_FRAME = struct.Struct("<II")
_MAX_FRAME = 256 * 1024 * 1024


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


def keeps(exc: BaseException) -> bool:
    """The one policy every writer follows: True when a batch that failed with ``exc`` is
    kept to try again (the store is unreachable, locked or not usable now, refuses this
    client's token, or the trial it names is not there yet: the batch that creates it may
    still be on its way), False when the store rejects the batch itself (it is set aside in
    ``rejected/``, never retried)."""
    if isinstance(exc, (StoreUnavailable, NotFound, AccessDenied)):
        return True
    return isinstance(exc, SchemaError) and not isinstance(exc, CorruptData)


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
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        meta = {"store": redact(url), "pid": os.getpid(), "host": socket.gethostname()}
        f.write(_MAGIC + json.dumps(meta).encode() + b"\n")
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
        :meth:`sync` for a machine that may lose power)."""
        out = bytearray()
        for b in batches:
            payload = zlib.compress(b.to_json(), 1)
            out += _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        self._f.seek(0, os.SEEK_END)
        self._f.write(bytes(out))
        self.size = self._f.tell()

    def sync(self) -> None:
        """fsync: what was appended survives a power loss. May take long on a busy disk, so
        callers do it holding no lock; safe while another thread closes the file."""
        with contextlib.suppress(OSError, ValueError):
            os.fsync(self._f.fileno())

    def unread(self) -> bool:
        """Whether frames remain after the replay position."""
        return self.read_at < self.size

    def frames(self) -> Iterator[tuple[Batch | None, int]]:
        """(batch, offset after it) from the replay position on; a batch that cannot be
        parsed comes as None. Stops at a cut or damaged frame."""
        pos = self.read_at
        while pos + _FRAME.size <= self.size:
            self._f.seek(pos)
            length, crc = _FRAME.unpack(self._f.read(_FRAME.size))
            if length > _MAX_FRAME or pos + _FRAME.size + length > self.size:
                return
            payload = self._f.read(length)
            if zlib.crc32(payload) != crc:
                return
            end = pos + _FRAME.size + length
            try:
                batch: Batch | None = Batch.from_json(zlib.decompress(payload))
            except (ValueError, zlib.error):
                batch = None
            yield batch, end
            pos = end

    def damaged_tail(self) -> bytes:
        """Bytes after the last readable frame (after :meth:`frames` was run to its end)."""
        last = self.read_at
        for _b, end in self.frames():
            last = end
        self._f.seek(last)
        return self._f.read(self.size - last)

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


def set_aside(folder: Path, what: str, data: bytes) -> None:
    """Keep rejected batches (or a damaged tail) in ``rejected/`` for a person to look at."""
    target = folder / "rejected"
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = f"{int(time.time())}-{os.getpid()}-{uuid.uuid4().hex[:6]}-{what}"
    with contextlib.suppress(OSError):
        (target / name).write_bytes(data)


@dataclass
class ReplayStats:
    """What a replay did: batches written (or found already written), kept for later (the
    store is unreachable, or their trial is not there yet), set aside as rejected, and spool
    files finished (removed) or left (still owned, or with batches kept)."""

    written: int = 0
    kept: int = 0
    rejected: int = 0
    files_done: int = 0
    files_left: int = 0
    errors: list[str] = field(default_factory=list)


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
            if deadline is not None and time.monotonic() >= deadline:
                still.append(path)
                continue
            done, moved = _replay_file(path, write, folder, stats, deadline)
            progress = progress or moved
            if not done:
                still.append(path)
        waiting = still
        if any(e.startswith("unavailable") for e in stats.errors):
            break
    stats.files_left = len(waiting)
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
        for batch, _end in spool.frames():
            if deadline is not None and time.monotonic() >= deadline:
                kept += 1
                break
            if batch is None:
                stats.rejected += 1
                set_aside(folder, "unreadable", b"")
                continue
            try:
                write(batch)
                stats.written += 1
                moved = True
            except StoreError as exc:
                if keeps(exc):
                    kept += 1
                    tag = "unavailable" if isinstance(exc, StoreUnavailable) else "waiting"
                    if len(stats.errors) < 20:
                        stats.errors.append(f"{tag}: {exc}")
                    if isinstance(exc, StoreUnavailable):
                        break
                    continue
                stats.rejected += 1
                set_aside(folder, "rejected", batch.to_json())
            except Exception as exc:  # a bug of ours: never lose the batch silently
                stats.rejected += 1
                stats.errors.append(f"rejected: {type(exc).__name__}: {exc}")
                set_aside(folder, "rejected", batch.to_json())
        if kept:
            stats.kept += kept
            return False, moved
        tail = spool.damaged_tail()
        if tail:
            set_aside(folder, "damaged", tail)
        spool.remove()
        stats.files_done += 1
        return True, True
    finally:
        spool.close()
