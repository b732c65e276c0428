"""The writer: one bounded, retrying way to get batches into a store, used by every producer
(the SDK's flusher, the sampler, ``tunescope run``).

A producer :meth:`Writer.put`\\ s batches and goes on: ``put`` never blocks and never raises. A
thread of the writer's own sends them, in order, through :meth:`Store.write` (so each lands
exactly once, whatever is retried). What happens to a batch that fails is decided by
:func:`~tunescope.store.produce._spool.classify`, the one policy of every writer:

* **retry** (everything not proven wrong: a lost connection, a lock, a stopped, read-only or
  full database, 5xx/429, a timeout, a trial not created yet, a bug of ours): the batch is
  kept and sent again after a back-off (0.1 s doubling to 1 s). While the store stays away,
  batches wait in memory until they hold :data:`MEMORY_ITEMS` items or the oldest has waited
  :data:`SPILL_AFTER_S` seconds; then everything waiting goes to this writer's spool file
  (``store/produce/_spool.py``), and is sent from there, oldest first, once the store is back. A
  store that answers NotFound for the writer's own trial (a team server restarted on another
  database) gets the trial's spec again with the next attempt, so the trial is re-created.
* **refused** (the server refuses the token: 401/403): the writer stops sending, moves what it
  holds to the spool, leaves a note there (``tunescope runs`` shows it) and sends nothing more;
  ``tunescope sync`` writes the spool once the token is fixed.
* **rejected** (the store proves the batch itself wrong): it is set aside in the spool
  folder's ``rejected/`` and never retried; one warning says so.

Every spool append is checked (``SpoolFile.append``): when the spool cannot be written (a full
or read-only disk), the batches stay in memory (up to :data:`HARD_ITEMS`), one warning says so,
and the spool is tried again every :data:`SPOOL_RETRY_S`. Appended frames are fsynced right
after, outside the lock (:data:`~tunescope.store.produce._spool.FSYNC_EVERY_S` at most).

No step kills the writer's thread: an exception anywhere in its loop (a bug of ours, a disk
that fails under the spool or ``rejected/``) is logged once and the loop goes on; the batch
it was sending is kept and sent again.

:meth:`Writer.close` gives the store until a deadline to take what is left, then moves the rest
to the spool and releases the file, so that another process (the sampler, which outlives the
training, or ``tunescope sync``) replays it. A write stuck past the deadline (a server that
stopped answering) does not hold the caller: its batch is spooled too, and if it does land
after all, its replay is recognised as a duplicate.

Thread safety: ``put``, ``flush`` and ``close`` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from tunescope._once import Once
from tunescope.errors import NotFound, StoreError
from tunescope.store._contract import Store
from tunescope.store._model import TrialInfo
from tunescope.store._open import open_store
from tunescope.store._url import display
from tunescope.store.produce._batch import Batch, TrialSpec
from tunescope.store.produce._spool import (
    FSYNC_EVERY_S,
    SpoolFile,
    classify,
    clear_refused,
    note_refused,
    read_frame,
    set_aside,
    spool_dir,
)

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

SPOOL_RETRY_S = 1.0
"""Seconds between attempts at a spool that could not be written."""


class _Phase(enum.Enum):
    """What the writer's thread is doing. Each phase has one step (``Writer._on_*``) that
    does its part and returns the next phase; ``close()`` and ``put()`` speak to the steps
    through the lock (``_deadline``, ``_abandoned``, the queue), the thread to them through
    ``_sending_since``, ``_unavailable_since`` and ``refused``.

    ========== ============================================== ================================
    phase      step                                           next
    ========== ============================================== ================================
    SEND       send the next batch (spool first, then queue)  SEND (landed, set aside); AWAY
                                                              (kept); REFUSED; IDLE (nothing
                                                              to send); CLOSE (store away,
                                                              deadline passed); ABANDONED
    IDLE       wake flush(); wait for put() or close()        SEND; CLOSE (closing)
    AWAY       wait the back-off (bounded by the deadline)    SEND; CLOSE (deadline passed);
                                                              ABANDONED
    REFUSED    spool what is put, never send                  REFUSED; CLOSE (closing);
                                                              ABANDONED
    CLOSE      spool the rest (else hand it off), release     DONE
    ABANDONED  nothing: close() took over what it held        DONE
    ========== ============================================== ================================

    A step that raises goes to AWAY (``Writer._turn``): no step kills the thread."""

    SEND = "send"
    IDLE = "idle"
    AWAY = "away"
    REFUSED = "refused"
    CLOSE = "close"
    ABANDONED = "abandoned"
    DONE = "done"


class Writer:
    """Writes one producer's batches to the store at ``url`` (see the module doc).

    ``spec``: the trial the batches belong to, attached to every batch until one has landed
    (whichever lands first creates the trial), and again after the store answered NotFound
    for the trial. ``store_factory`` opens the store (default
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
        self._sending_since: float | None = None
        """When the thread went into the store call it is in, or None (read by put)."""
        self._backoff = 0.0
        """The last back-off (the thread's own)."""
        self._rejected_ids: set[str] = set()
        """Batches set aside while a copy of them was spooled: the copy is skipped."""
        self._deadline: float | None = None
        """close()'s deadline, once it was called."""
        self._abandoned = False
        """close() took over what the thread held (the thread was stuck in a store call)."""
        self._handoff: Callable[[list[Batch]], bool] | None = None
        self.handed = 0
        """Batches given to :meth:`close`'s handoff (not in this writer's store)."""
        self._unavailable_since: float | None = None
        self._spool_retry_at = 0.0
        self.refused: str | None = None
        """Why the store refused this writer's token (it sends nothing more), or None."""
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
                    if not self._spill_now([batch], force=True):
                        self._lost([batch], "it came after the writer was closed")
                    if not self._thread.is_alive():
                        self._release_spool()
                    return
                now = time.monotonic()
                self._queue.append((now, batch))
                self._queued_items += batch.size()
                stuck = (
                    self._sending_since is not None and now - self._sending_since > self.spill_after
                )
                if (self._busy or self._unavailable_since is not None) and (
                    self._queued_items > self.memory_items
                    or (stuck and now - self._queue[0][0] > self.spill_after)
                ):
                    # the store keeps the writer's thread waiting (a lock, a frozen server):
                    # memory stays bounded all the same
                    self._spill_queue()
                elif batch.end is not None and self._unavailable_since is not None:
                    # the trial's end is written ahead: with the store away it goes to the
                    # spool at once, with all before it, so a kill -9 of this process now
                    # loses none of it
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

    def close(self, timeout: float, handoff: Callable[[list[Batch]], bool] | None = None) -> bool:
        """Write what is left within ``timeout`` s, spool the rest, release the spool file and
        stop. True if everything landed in the store. A second call returns at once.
        ``handoff``: takes what neither the store nor the spool could (True when it took
        them: a training hands them to its sampler, which outlives it); else they are lost,
        and said so."""
        with self._cond:
            if self._deadline is None:
                self._handoff = handoff
                self._deadline = time.monotonic() + max(0.0, timeout)
            self._cond.notify_all()
        self._thread.join(max(0.0, timeout) + 0.2)
        if self._thread.is_alive():  # stuck in a store call: take over what it holds
            with self._cond:
                if not self._abandoned:
                    self._abandoned = True
                    self._spool_the_rest()
            self._sync_spool()
            return False
        with self._cond:
            return self._idle() and not self.left_in_spool and not self.handed

    # ------------------------------------------------------------------ the thread
    @property
    def _closing(self) -> bool:
        """Whether close() was called."""
        return self._deadline is not None

    @property
    def _busy(self) -> bool:
        """Whether the thread is in a store call."""
        return self._sending_since is not None

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
            frame = next(spool.frames())
            batch = frame.batch
            if batch is None:  # damaged bytes (a crash, a disk error): keep them aside
                self.rejected += 1
                folder = spool_dir(self.url, self._root)
                set_aside(folder, "damaged", read_frame(spool, frame))
                self._advance(frame.end, None)
                continue
            if batch.id in self._rejected_ids:
                self._advance(frame.end, None)  # set aside already, while this copy was spooled
                continue
            return batch, frame.end
        if self._queue:
            return self._queue[0][1], None
        return None, None

    def _run(self) -> None:
        """The thread: one step of its phase at a time (see :class:`_Phase`), until done."""
        steps: dict[_Phase, Callable[[], _Phase]] = {
            _Phase.SEND: self._on_send,
            _Phase.IDLE: self._on_idle,
            _Phase.AWAY: self._on_away,
            _Phase.REFUSED: self._on_refused,
            _Phase.CLOSE: self._on_close,
            _Phase.ABANDONED: self._on_abandoned,
        }
        phase = _Phase.SEND
        try:
            while phase is not _Phase.DONE:
                phase = self._turn(steps[phase])
        finally:
            if phase is not _Phase.DONE:  # left otherwise (a BaseException): close all the same
                self._on_close()
            self._end()

    def _turn(self, step: Callable[[], _Phase]) -> _Phase:
        """Run one step; an exception (a bug of ours, a failing disk) is logged once and the
        loop goes on, backing off: the batch being sent stays where it was, and is sent again."""
        try:
            return step()
        except Exception as exc:
            self._log(
                f"bug:{self.name}",
                "tunescope: %s failed (%s: %s); it keeps its data and goes on",
                self.name,
                type(exc).__name__,
                exc,
            )
            with self._cond:
                self._sending_since = None
            return _Phase.AWAY

    def _on_send(self) -> _Phase:
        """Send the next batch, the spool's oldest first, then the queue's head."""
        self._sync_spool()
        with self._cond:
            if self._abandoned:
                return _Phase.ABANDONED
            if self._unavailable_since is not None and self._past_deadline():
                return _Phase.CLOSE  # the store away, the time up: no attempt that could block
            if self.refused is not None:
                return _Phase.REFUSED
            queued, offset = self._next()
            if queued is None:
                return _Phase.IDLE
            self._sending_since = time.monotonic()
            batch = self._with_spec(queued)  # what is sent; the queue holds what was put
        outcome = self._send(batch)
        with self._cond:
            self._sending_since = None
            if outcome == "rejected":
                self._rejected_ids.add(batch.id)
            if self._abandoned:
                return _Phase.ABANDONED
            if outcome == "keep":
                now = time.monotonic()
                if self._unavailable_since is None:
                    self._unavailable_since = now
                if self._queue and (
                    self._queued_items > self.memory_items
                    or now - self._queue[0][0] > self.spill_after
                ):
                    self._spill_queue()
                return _Phase.AWAY
            self._backoff = 0.0
            if outcome == "refused":
                return _Phase.REFUSED
            self._advance(offset, queued)  # landed, or set aside
            if outcome == "ok":
                self.written += 1
                if self._unavailable_since is not None:
                    self._unavailable_since = None
                    self._log.forget(f"down:{self.name}")
            return _Phase.SEND

    def _on_idle(self) -> _Phase:
        """Nothing to send: say so to flush(), then wait for a put() or close() (and fsync what
        was spilled meanwhile, within :data:`FSYNC_EVERY_S`)."""
        with self._cond:
            if not self._idle():  # a put() came since the send step looked
                return _Phase.SEND
            self._cond.notify_all()  # flush() waits for this
            if self._closing:
                return _Phase.CLOSE
            self._pause(FSYNC_EVERY_S if self._unsynced is not None else None)
            return _Phase.SEND

    def _on_away(self) -> _Phase:
        """The last attempt failed (the store is away, or a step raised): wait the back-off,
        0.1 s doubling to :data:`BACKOFF_MAX_S`, woken early by put() and close()."""
        with self._cond:
            if self._abandoned:
                return _Phase.ABANDONED
            if self._past_deadline():
                return _Phase.CLOSE
            self._backoff = min(BACKOFF_MAX_S, max(0.1, self._backoff * 2))
            self._pause(self._backoff)
            return _Phase.SEND

    def _on_refused(self) -> _Phase:
        """The token was refused: send nothing more; everything put goes to the spool (tried
        again every :data:`SPOOL_RETRY_S` while it cannot be written)."""
        self._sync_spool()
        with self._cond:
            if self._abandoned:
                return _Phase.ABANDONED
            if self._queue:
                self._spill_queue()
            if self._closing:
                return _Phase.CLOSE
            self._pause(SPOOL_RETRY_S if self._queue else FSYNC_EVERY_S)
            return _Phase.REFUSED

    def _on_close(self) -> _Phase:
        """What is left goes to the spool (see :meth:`_spool_the_rest`) and the spool file is
        released, unless close() took both over. Never raises."""
        with contextlib.suppress(Exception), self._cond:
            if not self._abandoned:
                if self._closing:
                    self._spool_the_rest()
                else:  # the loop was left otherwise: the queue goes with the thread
                    self._release_spool()
        return _Phase.DONE

    def _on_abandoned(self) -> _Phase:
        """close() took over what the thread held (it was stuck in a store call past close()'s
        deadline): nothing is left to it."""
        return _Phase.DONE

    def _end(self) -> None:
        """The thread's last act: flush() woken, the spool fsynced, the store closed."""
        with contextlib.suppress(Exception), self._cond:
            self._sending_since = None
            self._cond.notify_all()
        with contextlib.suppress(Exception):
            self._sync_spool()
        self._drop_store()

    def _pause(self, seconds: float | None) -> None:
        """Wait for a put() or close(), at most ``seconds`` (None: no bound) and never past
        close()'s deadline. Lock held."""
        if self._deadline is not None:
            left = max(0.0, self._deadline - time.monotonic())
            seconds = left if seconds is None else min(seconds, left)
        self._cond.wait(seconds)

    def _past_deadline(self) -> bool:
        """Whether close() was called and its deadline has passed. Lock held."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _spool_the_rest(self) -> None:
        """Closing: every queued batch goes to the spool, tried at once; what it cannot take
        goes to close()'s handoff, else is lost (said). The spool file is released, for
        another process to replay what it holds. Lock held."""
        self._spool_retry_at = 0.0
        if not self._spill_queue():
            self._give_up([b for _t, b in self._queue], "the writer was closed")
        self._release_spool()

    def _send(self, batch: Batch) -> str:
        """'ok', 'keep', 'refused' or 'rejected' (see the module doc)."""
        try:
            if self._store is None:
                self._store = (self._factory or open_store)(self.url)
            tid = self._store.write(batch)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            verdict = classify(exc)
            folder = spool_dir(self.url, self._root)
            if verdict == "rejected":
                self._set_aside(batch)
                self._log(
                    f"reject:{self.name}:{type(exc).__name__}",
                    "tunescope: store %s rejected a batch of %s (%s: %s); it is kept in %s",
                    self.shown,
                    self.name,
                    type(exc).__name__,
                    exc,
                    folder / "rejected",
                )
                return "rejected"
            if verdict == "refused":
                with self._cond:
                    self.refused = str(exc)
                note_refused(folder, str(exc))
                self._log(
                    f"refused:{self.name}",
                    "tunescope: store %s refused the token (%s); %s stops sending and keeps "
                    "its data in the spool %s: fix the token, then run `tunescope sync`",
                    self.shown,
                    exc,
                    self.name,
                    folder,
                )
                return "refused"
            if (
                isinstance(exc, NotFound)
                and self.spec is not None
                and batch.trial == self.spec.key
                and self.trial_id is not None
            ):  # the store lost the trial (a server on another database): create it again
                self.trial_id = None
            elif not isinstance(exc, StoreError):
                self._drop_store()  # a bug of ours: the next attempt starts afresh
            self._log(
                f"down:{self.name}",
                "tunescope: store %s is unavailable (%s); %s keeps its data (in memory, "
                "then in the spool %s) and retries",
                self.shown,
                exc,
                self.name,
                folder,
            )
            return "keep"
        first = self.trial_id is None and self.refused is None
        self.trial_id = tid
        if first:
            clear_refused(spool_dir(self.url, self._root))
        if self.trial is None:
            with contextlib.suppress(Exception):  # known next time
                self.trial = self._store.trial_by_key(batch.trial)
        return "ok"

    def _drop_store(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()

    def _set_aside(self, batch: Batch) -> None:
        """Keep a rejected batch in the spool folder's ``rejected/`` (never retried). A disk
        that cannot take the copy costs the copy only (one warning)."""
        with self._cond:
            self.rejected += 1
        try:
            try:
                data = batch.to_json()
            except ValueError:  # not JSON-able (a NaN in event data): keep what can be shown
                data = repr(batch).encode()
            set_aside(spool_dir(self.url, self._root), "rejected", data)
        except Exception as exc:
            self._log(
                f"aside:{self.name}",
                "tunescope: %s could not keep a rejected batch in %s (%s)",
                self.name,
                spool_dir(self.url, self._root) / "rejected",
                exc,
            )

    def _with_spec(self, batch: Batch) -> Batch:
        """The batch with the trial's spec attached while the trial may not exist yet."""
        spec = self.spec
        if spec is None or self.trial_id is not None or batch.spec is not None:
            return batch
        return batch.with_spec(spec) if batch.trial == spec.key else batch

    def _advance(self, offset: int | None, batch: Batch | None) -> None:
        """Forget a batch that landed (or was set aside). A batch from the queue may have been
        spooled while it was being sent (see :meth:`put`): then the queue no longer holds it,
        and its spooled copy is a duplicate the store recognises. Lock held."""
        if offset is not None:
            assert self._spool is not None
            self._spool.read_at = offset
            if not self._spool.unread():
                self._spool.reset()
        elif batch is not None and self._queue and self._queue[0][1] is batch:
            self._queue.popleft()
            self._queued_items -= batch.size()

    def _spill_queue(self) -> bool:
        """Move every queued batch to the spool file; False when the spool cannot take them
        (they stay queued). Lock held."""
        if not self._queue:
            return True
        if self._spill_now([b for _t, b in self._queue]):
            self._queue.clear()
            self._queued_items = 0
            return True
        return False

    def _spill_now(self, batches: list[Batch], force: bool = False) -> bool:
        """Append ``batches`` to this writer's spool file (created on first use). Lock held.
        False when the spool cannot be written now (one warning; tried again after
        :data:`SPOOL_RETRY_S`, or at once with ``force``): the batches are the caller's to
        keep, and the queue is cut to :data:`HARD_ITEMS`."""
        if not batches:
            return True
        now = time.monotonic()
        if not force and now < self._spool_retry_at:
            self._cut_queue()
            return False
        batches = [self._with_spec(b) for b in batches]
        try:
            if self._spool is None:
                self._spool = SpoolFile.create(self.url, self._root)
            self._spool.append(batches)
        except Exception as exc:
            self._spool_retry_at = now + SPOOL_RETRY_S
            self._log(
                f"spool:{self.name}",
                "tunescope: the spool %s cannot be written (%s: the disk is full or "
                "read-only?); %s keeps its data in memory (up to %d items) and tries again",
                spool_dir(self.url, self._root),
                exc,
                self.name,
                HARD_ITEMS,
            )
            self._cut_queue()
            return False
        self._log.forget(f"spool:{self.name}")
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

    def _cut_queue(self) -> None:
        """Neither the store nor the spool takes anything: drop the oldest beyond
        :data:`HARD_ITEMS` (counted, one warning). Lock held."""
        lost: list[Batch] = []
        while self._queued_items > HARD_ITEMS and len(self._queue) > 1:
            _t, old = self._queue.popleft()
            self._queued_items -= old.size()
            lost.append(old)
        if lost:
            self._lost(lost, f"more than {HARD_ITEMS} items waited in memory")

    def _give_up(self, batches: list[Batch], why: str) -> None:
        """Batches neither the store nor the spool could take at close: to the handoff of
        :meth:`close` if it takes them, else lost (said)."""
        hand = self._handoff
        if batches and hand is not None:
            with contextlib.suppress(Exception):
                if hand(batches):
                    self.handed += len(batches)
                    self._queue.clear()
                    self._queued_items = 0
                    return
        self._lost(batches, why)

    def _lost(self, batches: list[Batch], why: str) -> None:
        """Batches neither the store nor the spool could take: count them, say so once."""
        items = sum(b.size() for b in batches)
        if not items and not batches:
            return
        self.dropped += items
        self._log(
            f"lost:{self.name}",
            "tunescope: %s could not keep %d batch(es) (%d items): the store and the spool %s "
            "are both unusable and %s",
            self.name,
            len(batches),
            items,
            spool_dir(self.url, self._root),
            why,
        )

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
