"""The writer: one bounded, retrying way to get batches into a store, used by every producer
(the SDK's flusher, the sampler, ``tunescope run``).

A producer :meth:`Writer.put`\\ s batches and goes on: ``put`` never blocks and never raises. A
thread of the writer's own sends them, in order, through :meth:`Store.write` (so each lands
exactly once, whatever is retried). The policy for a batch that fails is :func:`keeps`:

* **unavailable** (a lost connection, a lock, a stopped server; or a trial not created yet):
  the batch is kept and sent again after a back-off (0.1 s doubling to 1 s). While the store
  stays away, batches wait in memory until they hold :data:`MEMORY_ITEMS` items or the oldest
  has waited :data:`SPILL_AFTER_S` seconds; then everything waiting goes to this writer's
  spool file (``store/_spool.py``), and is sent from there, oldest first, once the store is
  back.
* **rejected** (the store refuses the batch itself): it is set aside in the spool folder's
  ``rejected/`` and never retried; one warning says so.

:meth:`Writer.close` gives the store until a deadline to take what is left, then moves the rest
to the spool and releases the file, so that another process (the sampler, which outlives the
training, or ``tunescope sync``) replays it. A write stuck past the deadline (a server that
stopped answering) does not hold the caller: its batch is spooled too, and if it does land
after all, its replay is recognised as a duplicate.

Thread safety: ``put``, ``flush`` and ``close`` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from tunescope._once import Once
from tunescope.errors import StoreError
from tunescope.store._batch import Batch, TrialSpec
from tunescope.store._contract import Store
from tunescope.store._model import TrialInfo
from tunescope.store._open import open_store
from tunescope.store._spool import SpoolFile, keeps, set_aside, spool_dir
from tunescope.store._url import display

__all__ = ["MEMORY_ITEMS", "SPILL_AFTER_S", "Writer"]

MEMORY_ITEMS = 200_000
"""Items (samples, events, scalars) a writer holds in memory while the store is away, before
it moves them to its spool file."""

SPILL_AFTER_S = 5.0
"""Seconds the oldest unwritten batch may wait in memory while the store is away."""

HARD_ITEMS = 5_000_000
"""Items held in memory when even the spool cannot be written (a full or read-only disk);
beyond it the oldest are dropped, counted and logged."""

BACKOFF_MAX_S = 1.0


class Writer:
    """Writes one producer's batches to the store at ``url`` (see the module doc).

    ``spec``: the trial the batches belong to, attached to every batch until one has landed
    (whichever lands first creates the trial). ``store_factory`` opens the store (default
    :func:`tunescope.store.open_store`); ``spool_root`` overrides the spool folder's root.
    """

    def __init__(
        self,
        url: str,
        *,
        spec: TrialSpec | None = None,
        name: str = "writer",
        store_factory: Callable[[str], Store] | None = None,
        spool_root: Path | None = None,
        memory_items: int = MEMORY_ITEMS,
        spill_after: float = SPILL_AFTER_S,
        log: Once | None = None,
    ) -> None:
        self.url = url
        self.shown = display(url)
        self.name = name
        self.spec = spec
        self.memory_items = memory_items
        self.spill_after = spill_after
        self._factory = store_factory
        self._root = spool_root
        self._log = log or Once(logging.getLogger("tunescope.store"))
        self._cond = threading.Condition()
        self._queue: deque[tuple[float, Batch]] = deque()
        self._queued_items = 0
        self._spool: SpoolFile | None = None
        self._unsynced: SpoolFile | None = None
        """A spool file appended to and not yet fsynced (done outside the lock)."""
        self._store: Store | None = None
        self._busy = False
        self._busy_since: float | None = None
        self._rejected_ids: set[str] = set()
        """Batches set aside while a copy of them was spooled: the copy is skipped."""
        self._closing = False
        self._deadline = float("inf")
        self._abandoned = False
        self._unavailable_since: float | None = None
        self.trial_id: int | None = None
        """The store's id of the trial, once a batch has landed."""
        self.trial: TrialInfo | None = None
        """The trial as the store first saw it (its name, params…), once a batch landed."""
        self.written = 0
        self.spooled = 0
        self.rejected = 0
        self.dropped = 0
        self.left_in_spool = False
        """Whether batches were left in a released spool file for another process to replay."""
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"tunescope-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ producer side
    def put(self, batch: Batch) -> None:
        """Queue a batch. Never blocks, never raises."""
        try:
            with self._cond:
                if self._closing:
                    self._log(
                        f"put-closed:{self.name}",
                        "tunescope: a batch came after %s was closed; it is spooled",
                        self.name,
                    )
                    self._spill_now([batch])
                    if not self._thread.is_alive():
                        self._release_spool()
                    return
                now = time.monotonic()
                self._queue.append((now, batch))
                self._queued_items += batch.size()
                stuck = self._busy_since is not None and now - self._busy_since > self.spill_after
                if (self._busy or self._unavailable_since is not None) and (
                    self._queued_items > self.memory_items
                    or (stuck and now - self._queue[0][0] > self.spill_after)
                ):
                    # the store keeps the writer's thread waiting (a lock, a frozen server):
                    # memory stays bounded all the same
                    self._spill_queue()
                self._cond.notify_all()
            self._sync_spool()
        except Exception as exc:  # never into the producer
            self._log(
                f"put:{self.name}", "tunescope: %s could not queue a batch (%s)", self.name, exc
            )

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until every batch put so far has landed; True if so."""
        end = time.monotonic() + timeout
        with self._cond:
            while not self._idle():
                left = end - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
            return True

    def close(self, timeout: float) -> bool:
        """Write what is left within ``timeout`` s, spool the rest, release the spool file and
        stop. True if everything landed in the store. A second call returns at once."""
        with self._cond:
            if not self._closing:
                self._closing = True
                self._deadline = time.monotonic() + max(0.0, timeout)
            self._cond.notify_all()
        self._thread.join(max(0.0, timeout) + 0.2)
        if self._thread.is_alive():  # stuck in a store call: take over what it holds
            with self._cond:
                if not self._abandoned:
                    self._abandoned = True
                    self._spill_now([b for _t, b in self._queue])
                    self._queue.clear()
                    self._queued_items = 0
                    self._release_spool()
            return False
        with self._cond:
            return self._idle() and not self.left_in_spool

    # ------------------------------------------------------------------ the thread
    def _idle(self) -> bool:
        return (
            not self._queue
            and not self._busy
            and not (self._spool is not None and self._spool.unread())
        )

    def _next(self) -> tuple[Batch | None, int | None]:
        """(batch to send, spool offset after it, or None for the queue's head); (None, None)
        when there is nothing to send. Spooled batches are older, so they go first. Lock
        held."""
        spool = self._spool
        while spool is not None and spool.unread():
            frame = next(spool.frames(), None)
            if frame is None:  # a frame cut short (a disk that filled up): keep it aside
                set_aside(spool_dir(self.url, self._root), "damaged", spool.damaged_tail())
                spool.reset()
                break
            batch, end = frame
            if batch is not None and batch.id in self._rejected_ids:
                spool.read_at = end  # set aside already, while this copy was spooled
                continue
            if batch is not None:
                return batch, end
            self.rejected += 1
            set_aside(spool_dir(self.url, self._root), "unreadable", b"")
            spool.read_at = end
        if self._queue:
            return self._queue[0][1], None
        return None, None

    def _run(self) -> None:
        backoff = 0.0
        try:
            while True:
                self._sync_spool()
                with self._cond:
                    if self._abandoned:
                        return
                    if (
                        self._closing
                        and self._unavailable_since is not None
                        and time.monotonic() >= self._deadline
                    ):  # closing, the store away, the time up: no attempt that could block
                        self._spill_queue()
                        return
                    batch, offset = self._next()
                    if batch is None:
                        self._cond.notify_all()  # flush() waits for this
                        if self._closing:
                            return
                        self._cond.wait()
                        continue
                    self._busy = True
                    self._busy_since = time.monotonic()
                    batch = self._with_spec(batch)
                try:
                    outcome = self._send(batch)
                except Exception as exc:  # a bug of ours: set this batch aside, go on
                    self._log(
                        f"bug:{self.name}",
                        "tunescope: %s failed on a batch (%s: %s); it is set aside",
                        self.name,
                        type(exc).__name__,
                        exc,
                    )
                    self._set_aside(batch)
                    outcome = "rejected"
                with self._cond:
                    self._busy = False
                    self._busy_since = None
                    if outcome == "rejected":
                        self._rejected_ids.add(batch.id)
                    if self._abandoned:
                        return
                    if outcome != "keep":
                        self._advance(offset, batch)
                        if outcome == "ok":
                            self.written += 1
                        backoff = 0.0
                        if outcome == "ok" and self._unavailable_since is not None:
                            self._unavailable_since = None
                            self._log.forget(f"down:{self.name}")
                        continue
                    backoff = min(BACKOFF_MAX_S, max(0.1, backoff * 2))
                    now = time.monotonic()
                    if self._unavailable_since is None:
                        self._unavailable_since = now
                    if self._closing and now >= self._deadline:
                        self._spill_queue()
                        return
                    if self._queue and (
                        self._queued_items > self.memory_items
                        or now - self._queue[0][0] > self.spill_after
                    ):
                        self._spill_queue()
                    wait = backoff
                    if self._closing:
                        wait = min(wait, max(0.0, self._deadline - now))
                    self._cond.wait(wait)
        except Exception as exc:  # a bug of ours: keep what is queued
            self._log(
                f"bug:{self.name}",
                "tunescope: %s failed (%s: %s)",
                self.name,
                type(exc).__name__,
                exc,
            )
            with self._cond:
                self._spill_queue()
        finally:
            with self._cond:
                self._busy = False
                if not self._abandoned:
                    if self._closing:
                        self._spill_queue()
                    self._release_spool()
                self._cond.notify_all()
            self._sync_spool()
            store, self._store = self._store, None
            if store is not None:
                with contextlib.suppress(Exception):
                    store.close()

    def _send(self, batch: Batch) -> str:
        """'ok', 'keep' or 'rejected'."""
        try:
            if self._store is None:
                self._store = (self._factory or open_store)(self.url)
            tid = self._store.write(batch)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, StoreError) and keeps(exc):
                self._log(
                    f"down:{self.name}",
                    "tunescope: store %s is unavailable (%s); %s keeps its data (in memory, "
                    "then in the spool %s) and retries",
                    self.shown,
                    exc,
                    self.name,
                    spool_dir(self.url, self._root),
                )
                return "keep"
            self._set_aside(batch)
            self._log(
                f"reject:{self.name}:{type(exc).__name__}",
                "tunescope: store %s rejected a batch of %s (%s: %s); it is kept in %s",
                self.shown,
                self.name,
                type(exc).__name__,
                exc,
                spool_dir(self.url, self._root) / "rejected",
            )
            return "rejected"
        self.trial_id = tid
        if self.trial is None:
            try:
                self.trial = self._store.trial_by_key(batch.trial)
            except StoreError:
                pass  # known next time
        return "ok"

    def _set_aside(self, batch: Batch) -> None:
        """Keep a rejected batch in the spool folder's ``rejected/`` (never retried)."""
        with self._cond:
            self.rejected += 1
        try:
            data = batch.to_json()
        except ValueError:  # not JSON-able (a NaN in event data): keep what can be shown
            data = repr(batch).encode()
        set_aside(spool_dir(self.url, self._root), "rejected", data)

    def _with_spec(self, batch: Batch) -> Batch:
        """The batch with the trial's spec attached while the trial may not exist yet."""
        spec = self.spec
        if spec is None or self.trial_id is not None or batch.spec is not None:
            return batch
        return batch.with_spec(spec) if batch.trial == spec.key else batch

    def _advance(self, offset: int | None, batch: Batch) -> None:
        """Forget a batch that landed (or was set aside). A batch from the queue may have been
        spooled while it was being sent (see :meth:`put`): then the queue no longer holds it,
        and its spooled copy is a duplicate the store recognises. Lock held."""
        if offset is not None:
            assert self._spool is not None
            self._spool.read_at = offset
            if not self._spool.unread():
                self._spool.reset()
        elif self._queue and self._queue[0][1] is batch:
            self._queue.popleft()
            self._queued_items -= batch.size()

    def _spill_queue(self) -> None:
        """Move every queued batch to the spool file. Lock held."""
        if self._queue and self._spill_now([b for _t, b in self._queue]):
            self._queue.clear()
            self._queued_items = 0

    def _spill_now(self, batches: list[Batch]) -> bool:
        """Append ``batches`` to this writer's spool file (created on first use). Lock held.
        False (and a warning) when the spool cannot be written: the batches stay in memory,
        up to :data:`HARD_ITEMS`."""
        if not batches:
            return True
        batches = [self._with_spec(b) for b in batches]
        try:
            if self._spool is None:
                self._spool = SpoolFile.create(self.url, self._root)
            self._spool.append(batches)
        except Exception as exc:
            self._log(
                f"spool:{self.name}",
                "tunescope: cannot write the spool for %s (%s); keeping data in memory",
                self.shown,
                exc,
            )
            while self._queued_items > HARD_ITEMS and self._queue:
                _t, old = self._queue.popleft()
                self._queued_items -= old.size()
                self.dropped += old.size()
            return False
        self.spooled += len(batches)
        self._unsynced = self._spool
        self._log(
            f"spilled:{self.name}",
            "tunescope: %s moved %d batch(es) to the spool %s; they are written when %s is back",
            self.name,
            len(batches),
            self._spool.path,
            self.shown,
            level=logging.INFO,
        )
        return True

    def _sync_spool(self) -> None:
        """fsync what was spilled, holding no lock (a busy disk may take seconds)."""
        with self._cond:
            spool, self._unsynced = self._unsynced, None
        if spool is not None:
            spool.sync()

    def _release_spool(self) -> None:
        """Close the spool file (removing it when nothing is left). Lock held."""
        spool, self._spool = self._spool, None
        if spool is None:
            return
        if spool.unread():
            self.left_in_spool = True
            spool.close()
        else:
            spool.remove()

    @property
    def spool_path(self) -> Path | None:
        """This writer's spool file, while it has one."""
        spool = self._spool
        return None if spool is None else spool.path

    def __repr__(self) -> str:
        return (
            f"Writer({self.name!r}, {self.shown!r}, written={self.written}, "
            f"spooled={self.spooled}, rejected={self.rejected}, pid={os.getpid()})"
        )
