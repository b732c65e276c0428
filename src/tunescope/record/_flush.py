"""The flusher: a daemon thread per trial that writes the buffer to the store in batches.

Every flush period (0.5–1 s) it drains the trial's :class:`~tunescope.record._state.Recorder`,
numbers the hooked optimizer steps (per optimizer, from 1; steps an integration records with
``Trial.optimizer_step`` come numbered), derives the trial-level samples of the
period (``train.step_time``, ``train.data_wait``, ``train.throughput``, and, where
``torch.cuda`` is initialised, ``torch.mem.allocated`` / ``torch.mem.reserved`` /
``torch.alloc_retries`` per device), writes everything on its own store connection, and
updates the trial's heartbeat.

Failure policy (it never raises into training):

* Draining never depends on the store, so the training thread's buffers never grow.
* A write that fails with a :class:`~tunescope.errors.StoreError` while no write of the same
  flush succeeded means the store is unreachable: the data is kept and retried next flush.
  Kept data is bounded (:data:`MAX_PENDING` events, scalars and samples each); beyond it the
  oldest are dropped and counted.
* A write that fails while another write of the same flush succeeded, or with an error that is
  not a StoreError, means the store rejects that batch: it is dropped and counted.
* Each kind of problem is logged once per trial at WARNING on ``tunescope.record``; the
  final flush logs how many items were dropped in all.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from tunescope.errors import StoreError
from tunescope.record._safety import LOG, Once
from tunescope.record._state import Recorder
from tunescope.store import Event, Scalar, Store, open_store

__all__ = ["MAX_PENDING", "Flusher", "flush_period"]

MAX_PENDING = 100_000
"""Items of each kind (events, scalars, samples) kept for retry while the store is down."""

T = TypeVar("T")


def flush_period(interval: float) -> float:
    """Seconds between flushes for a trial sampled every ``interval`` seconds."""
    return min(1.0, max(0.5, interval))


class _Alive(Protocol):
    def poll(self) -> int | None: ...


def _drain(d: deque[T]) -> list[T]:
    """Pop what is in ``d`` now; safe while another thread appends."""
    out: list[T] = []
    pop = d.popleft
    for _ in range(len(d)):
        try:
            out.append(pop())
        except IndexError:
            break
    return out


def _cuda_device_label(index: int) -> str:
    """The physical GPU index behind torch's ``cuda:index`` (through CUDA_VISIBLE_DEVICES
    when it lists integers), as a series device label."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    try:
        return str(int(visible[index]))
    except (IndexError, ValueError):
        return str(index)


def torch_memory() -> list[tuple[str, str, float]]:
    """(metric, device, value) of the torch caching allocator on each device this process
    uses; empty unless torch is imported and CUDA is initialised. Never imports torch."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return []
    out: list[tuple[str, str, float]] = []
    for i in range(cuda.device_count()):
        stats = cuda.memory_stats(i)
        allocated = float(stats.get("allocated_bytes.all.current", 0))
        reserved = float(stats.get("reserved_bytes.all.current", 0))
        if not allocated and not reserved:
            continue  # a device this process does not use
        dev = _cuda_device_label(i)
        out.append(("torch.mem.allocated", dev, allocated))
        out.append(("torch.mem.reserved", dev, reserved))
        out.append(("torch.alloc_retries", dev, float(stats.get("num_alloc_retries", 0))))
    return out


class _StepNumbers:
    """Per-optimizer step counters of one trial (weakly keyed: a dropped optimizer is freed)."""

    def __init__(self) -> None:
        self._weak: weakref.WeakKeyDictionary[object, list[int]] = weakref.WeakKeyDictionary()
        self._strong: dict[int, list[int]] = {}
        self._n = 0
        self._last: object = None
        self._last_slot: list[int] = [0, 0]

    def next(self, opt: object) -> tuple[int, int]:
        """(optimizer index in order of first step, its step number from 1)."""
        if opt is self._last:  # the common case: one optimizer stepping again
            last = self._last_slot
            last[1] += 1
            return last[0], last[1]
        try:
            found = self._weak.get(opt)
            if found is None:
                found = self._weak[opt] = [self._n, 0]
                self._n += 1
        except TypeError:  # not weak-referenceable
            found = self._strong.get(id(opt))
            if found is None:
                found = self._strong[id(opt)] = [self._n, 0]
                self._n += 1
        slot: list[int] = found
        slot[1] += 1
        self._last, self._last_slot = opt, slot
        return slot[0], slot[1]


class Flusher:
    """Writes one trial's buffer to the store from a daemon thread (see the module doc)."""

    def __init__(
        self,
        rec: Recorder,
        url: str,
        *,
        period: float,
        store_factory: Callable[[str], Store] | None = None,
    ) -> None:
        self.rec = rec
        self.url = url
        self.period = period
        self.sampler: _Alive | None = None
        self.dropped = 0
        self.written = 0
        self._factory = store_factory
        self._store: Store | None = None
        self._once = Once()
        self._stop = threading.Event()
        self._numbers = _StepNumbers()
        self._events: list[Event] = []
        self._scalars: list[Scalar] = []
        self._samples: dict[tuple[str, str | None], list[tuple[float, float]]] = {}
        self._series: dict[tuple[str, str | None], int] = {}
        self._last = time.time()
        self._stepped = False
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"tunescope-flush-{rec.trial_id}"
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._last = time.time()
        self._thread.start()

    def close(self, timeout: float = 15.0) -> None:
        """Stop after a final flush; waits up to ``timeout`` seconds for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._once.warn(
                    "join",
                    "tunescope: the final flush of trial %s did not finish "
                    "within %.0f s; what it had not written is lost",
                    self.rec.trial_id,
                    timeout,
                )

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.period):
                self.flush()
        finally:
            self.flush(final=True)
            self._numbers = _StepNumbers()  # hold no optimizer (nor its model) past the end
            if self._store is not None:
                try:
                    self._store.close()
                except Exception:
                    pass

    # ------------------------------------------------------------------ one flush
    def flush(self, *, final: bool = False) -> None:
        """Drain, derive, write. Never raises."""
        try:
            now = time.time()
            self._collect(now)
            self._check_sampler()
            self._write(now)
        except Exception as exc:  # a bug of ours: keep training alive
            self._once.warn(
                "flush",
                "tunescope: flushing trial %s failed (%s: %s)",
                self.rec.trial_id,
                type(exc).__name__,
                exc,
            )
        if final:
            left = len(self._events) + len(self._scalars) + sum(map(len, self._samples.values()))
            if left or self.dropped:
                LOG.warning(
                    "tunescope: trial %s ended with %d items not written to %s (%d dropped before)",
                    self.rec.trial_id,
                    left,
                    self.url,
                    self.dropped,
                )

    def _collect(self, now: float) -> None:
        rec = self.rec
        tid = rec.trial_id
        steps = _drain(rec.steps)
        events = _drain(rec.events)
        scalars = _drain(rec.scalars)
        for t, opt in steps:
            k, n = self._numbers.next(opt)
            self._events.append(
                Event(
                    tid,
                    "optimizer_step",
                    t,
                    type(opt).__name__,
                    n,
                    data={"optimizer": k} if k else None,
                )
            )
        waits = 0.0
        step_sum = 0.0
        n_steps = 0
        n_optim = len(steps)  # hooked steps, and the ones an integration records below
        for kind, t, name, step, duration, value, data in events:
            self._events.append(Event(tid, kind, t, name, step, duration, value, data))
            if kind == "optimizer_step":
                n_optim += 1
            elif kind == "data_wait" and value is not None and duration is not None:
                waits += duration
                step_sum += value
                n_steps += 1
        self._scalars.extend(Scalar(tid, name, step, t, value) for name, step, t, value in scalars)
        # derived samples of the period since the last flush
        period = now - self._last
        self._last = now
        if n_optim:
            self._stepped = True
        if self._stepped and period >= self.period / 4:  # no rate over a sliver of time
            self._sample("train.throughput", None, now, n_optim / period)
        if n_steps:
            self._sample("train.step_time", None, now, step_sum / n_steps)
            if step_sum > 0:
                self._sample("train.data_wait", None, now, min(100.0, 100.0 * waits / step_sum))
        try:
            for metric, dev, value in torch_memory():
                self._sample(metric, dev, now, value)
        except Exception as exc:
            self._once.warn(
                "torch",
                "tunescope: reading torch.cuda memory stats failed (%s: "
                "%s); torch.mem series are skipped",
                type(exc).__name__,
                exc,
            )
        self._bound()

    def _sample(self, metric: str, device: str | None, t: float, value: float) -> None:
        if math.isfinite(value):
            self._samples.setdefault((metric, device), []).append((t, value))

    def _bound(self) -> None:
        over = 0
        lists: list[list[Any]] = [self._events, self._scalars, *self._samples.values()]
        for lst in lists:
            extra = len(lst) - MAX_PENDING
            if extra > 0:
                del lst[:extra]
                over += extra
        if over:
            self.dropped += over
            self._once.warn(
                "bound",
                "tunescope: store %s unreachable for long; dropping the "
                "oldest unwritten events/scalars/samples beyond %d of each kind",
                self.url,
                MAX_PENDING,
            )

    def _check_sampler(self) -> None:
        s = self.sampler
        if s is None:
            return
        code = s.poll()
        if code is not None:
            self.sampler = None
            if code != 0:
                self._once.warn(
                    "sampler",
                    "tunescope: the sampler of trial %s exited with code "
                    "%s; hardware series stop here",
                    self.rec.trial_id,
                    code,
                )

    # ------------------------------------------------------------------ writing
    def _open(self) -> Store | None:
        if self._store is None:
            try:
                self._store = (self._factory or open_store)(self.url)
            except Exception as exc:
                self._once.warn(
                    "open",
                    "tunescope: cannot open store %s for trial %s (%s: %s); "
                    "keeping data and retrying",
                    self.url,
                    self.rec.trial_id,
                    type(exc).__name__,
                    exc,
                )
        return self._store

    def _write(self, now: float) -> None:
        store = self._open()
        if store is None:
            return
        failed: list[tuple[str, Exception, Callable[[], None]]] = []
        ok = False

        def attempt(what: str, fn: Callable[[], Any], drop: Callable[[], None]) -> None:
            nonlocal ok
            try:
                fn()
                ok = True
            except Exception as exc:
                failed.append((what, exc, drop))

        if self._events:
            attempt(
                "events",
                lambda: self._put(store.add_events, self._events),
                lambda: self._drop_all(self._events),
            )
        if self._scalars:
            attempt(
                "scalars",
                lambda: self._put(store.add_scalars, self._scalars),
                lambda: self._drop_all(self._scalars),
            )
        for key, rows in list(self._samples.items()):
            if rows:
                attempt(
                    f"samples of {key[0]}",
                    self._samples_writer(store, key, rows),
                    self._dropper(rows),
                )
        attempt(
            "heartbeat",
            lambda: store.update_trial(self.rec.trial_id, heartbeat=now, only_if_running=True),
            lambda: None,
        )
        for what, exc, drop in failed:
            if ok or not isinstance(exc, StoreError):
                drop()
                self._once.warn(
                    f"reject:{what}",
                    "tunescope: store %s rejected the %s of "
                    "trial %s (%s: %s); that batch is dropped",
                    self.url,
                    what,
                    self.rec.trial_id,
                    type(exc).__name__,
                    exc,
                )
            else:
                self._once.warn(
                    "down",
                    "tunescope: store %s is unavailable (%s: %s); trial %s "
                    "keeps its data in memory (at most %d items of each kind) and "
                    "retries every %.1f s",
                    self.url,
                    type(exc).__name__,
                    exc,
                    self.rec.trial_id,
                    MAX_PENDING,
                    self.period,
                )

    def _put(self, add: Callable[[list[T]], int], pending: list[T]) -> None:
        """Write ``pending`` in parts, forgetting each part once written."""
        while pending:
            part = pending[:5000]
            add(part)
            del pending[: len(part)]
            self.written += len(part)

    def _dropper(self, pending: list[Any]) -> Callable[[], None]:
        return lambda: self._drop_all(pending)

    def _drop_all(self, pending: list[Any]) -> None:
        self.dropped += len(pending)
        del pending[:]

    def _samples_writer(
        self, store: Store, key: tuple[str, str | None], rows: list[tuple[float, float]]
    ) -> Callable[[], None]:
        def write() -> None:
            sid = self._series.get(key)
            if sid is None:
                sid = self._series[key] = store.series(self.rec.trial_id, key[0], key[1]).id
            store.append_samples([(sid, t, v) for t, v in rows])
            self.written += len(rows)
            del rows[:]

        return write
