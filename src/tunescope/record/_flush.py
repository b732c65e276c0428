"""The flusher: a daemon thread per trial that turns the buffer into batches for its writer.

Every flush period (0.5–1 s), or at once when a hook finds a buffer filling up (a burst of
``log()`` calls), it drains the trial's :class:`~tunescope.record._state.Recorder`, numbers
the hooked optimizer steps (per optimizer, from 1; steps an integration records with
``Trial.optimizer_step`` come numbered), derives the trial-level samples of the period
(``train.step_time``, ``train.data_wait``, ``train.throughput``, and, where ``torch.cuda`` is
initialised, ``torch.mem.allocated`` / ``torch.mem.reserved`` / ``torch.alloc_retries`` per
device), reads the tensors ``Trial.log`` kept (so that no wait for a device falls on the
training thread), and hands everything, with the trial's heartbeat, to the trial's
:class:`~tunescope.store.Writer` as one batch. It also keeps the trial's sampler alive (see
:class:`~tunescope.record._launch.Supervised`).

Nothing here touches the store: draining never waits, and the writer keeps what the store
cannot take yet (in memory, then in the spool), so every event, scalar and sample given to the
trial is kept whatever the store does. A bug here is logged once and never raised into
training.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import weakref
from collections import deque
from typing import TYPE_CHECKING, TypeVar

from tunescope import _clock
from tunescope.record._safety import LOG, Once
from tunescope.record._state import Recorder
from tunescope.store import Batch, EventRow, SampleRow, ScalarRow, TrialEnd, Writer

if TYPE_CHECKING:
    from tunescope.record._launch import Supervised

__all__ = ["MAX_BATCH", "Flusher", "flush_period"]

MAX_BATCH = 50_000
"""Items per batch: a burst is cut into batches of this size."""

T = TypeVar("T")


def flush_period(interval: float) -> float:
    """Seconds between flushes for a trial sampled every ``interval`` seconds."""
    return min(1.0, max(0.5, interval))


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


_NVML_UUIDS: list[str] | None = None
_NVML_LOCK = threading.Lock()


def _nvml_uuids() -> list[str]:
    """The machine's GPU UUIDs in NVML index order, read once per process."""
    global _NVML_UUIDS
    with _NVML_LOCK:
        if _NVML_UUIDS is None:
            from tunescope._gpuid import nvml_uuids

            _NVML_UUIDS = nvml_uuids()
        return _NVML_UUIDS


def _cuda_device_label(index: int, cuda: object = None) -> str:
    """The NVML index of torch's ``cuda:index``, as a series device label (the ``device`` of
    the sampler's gpu.* series): matched by UUID (``get_device_properties(index).uuid``, see
    :func:`tunescope._gpuid.cuda_to_nvml`); else through ``CUDA_VISIBLE_DEVICES`` when it
    lists integers (right when CUDA orders devices by PCI bus, as it does for identical
    GPUs); else the ordinal."""
    if cuda is not None:
        from tunescope._gpuid import cuda_to_nvml

        try:
            uuid = getattr(cuda.get_device_properties(index), "uuid", None)  # type: ignore[attr-defined]
        except Exception:
            uuid = None
        match = cuda_to_nvml(uuid, _nvml_uuids()) if uuid is not None else None
        if match is not None:
            return str(match[0])
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
        dev = _cuda_device_label(i, cuda)
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
    """Turns one trial's buffer into batches from a daemon thread (see the module doc)."""

    def __init__(
        self,
        rec: Recorder,
        writer: Writer,
        *,
        period: float,
        sampler: Supervised | None = None,
    ) -> None:
        self.rec = rec
        self.writer = writer
        self.period = period
        self.sampler = sampler
        self._once = Once(LOG)
        self._stop = threading.Event()
        self._end: TrialEnd | None = None
        self._numbers = _StepNumbers()
        self._last = _clock.now()
        self._stepped = False
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"tunescope-flush-{rec.key[:8]}"
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._last = _clock.now()
        self._thread.start()

    def close(self, end: TrialEnd | None = None, timeout: float = 1.0) -> None:
        """Stop after a final flush that carries ``end`` (how the trial ended, if this process
        ends it); waits up to ``timeout`` s for that flush to be handed to the writer."""
        self._end = end
        self._stop.set()
        self.rec.wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():  # a bug held the flusher: hand over what we can ourselves
            self._once.warn(
                "join",
                "tunescope: the final flush of trial %s did not finish within %.1f s",
                self.rec.key[:8],
                timeout,
            )

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.rec.wake.wait(self.period)
                self.rec.wake.clear()
                if self._stop.is_set():
                    break
                self.flush()
                self._check_sampler()
        finally:
            self.flush(end=self._end)
            self._numbers = _StepNumbers()  # hold no optimizer (nor its model) past the end

    def _check_sampler(self) -> None:
        s = self.sampler
        if s is not None:
            try:
                s.check()
            except Exception as exc:
                self._once.warn(
                    "supervise",
                    "tunescope: watching the sampler of trial %s failed (%s: %s)",
                    self.rec.key[:8],
                    type(exc).__name__,
                    exc,
                )

    # ------------------------------------------------------------------ one flush
    def flush(self, *, end: TrialEnd | None = None) -> None:
        """Drain, derive, hand to the writer. Never raises."""
        try:
            now = _clock.now()
            events, scalars, samples = self._collect(now)
            key = self.rec.key
            while True:  # a burst is cut into batches of MAX_BATCH items
                part_e, events = events[:MAX_BATCH], events[MAX_BATCH:]
                part_s, scalars = scalars[:MAX_BATCH], scalars[MAX_BATCH:]
                last = not events and not scalars
                self.writer.put(
                    Batch(
                        key,
                        samples=tuple(samples) if last else (),
                        events=tuple(part_e),
                        scalars=tuple(part_s),
                        heartbeat=now if last else None,
                        end=end if last else None,
                    )
                )
                if last:
                    break
        except Exception as exc:  # a bug of ours: keep training alive
            self._once.warn(
                "flush",
                "tunescope: flushing trial %s failed (%s: %s)",
                self.rec.key[:8],
                type(exc).__name__,
                exc,
            )

    def _scalars(self, raw: list[tuple[str, int | None, float, object]]) -> list[ScalarRow]:
        """The drained scalars as floats. A tensor that ``Trial.log`` kept is read here, in
        this thread, so the wait for its device never falls on training; one that cannot be
        read, or is not finite, is dropped with one warning per name."""
        out: list[ScalarRow] = []
        off = _clock.at(0.0)  # Trial.log kept the monotonic clock: the trial's, now
        for name, step, mono, v in raw:
            t = off + mono
            if type(v) is float:
                out.append((name, step, t, v))
                continue
            try:
                f = float(v)  # type: ignore[arg-type]  # a one-element tensor
            except Exception as exc:
                f, why = math.nan, f"{type(exc).__name__}: {exc}"
            else:
                why = "not a finite number"
            if not math.isfinite(f):
                self._once.warn(
                    f"log:{name}",
                    "tunescope: log(%s=tensor) dropped: %s (further ones of %s are dropped "
                    "silently)",
                    name,
                    why,
                    name,
                )
                continue
            out.append((name, step, t, f))
        return out

    def _collect(self, now: float) -> tuple[list[EventRow], list[ScalarRow], list[SampleRow]]:
        rec = self.rec
        steps = _drain(rec.steps)
        drained = _drain(rec.events)
        scalars = self._scalars(_drain(rec.scalars))
        events: list[EventRow] = []
        samples: list[SampleRow] = []
        for mono, opt in steps:
            t = _clock.at(mono)  # the hook kept the monotonic clock: the trial's, now
            k, n = self._numbers.next(opt)
            events.append(
                (
                    "optimizer_step",
                    t,
                    type(opt).__name__,
                    n,
                    None,
                    None,
                    {"optimizer": k} if k else None,
                )
            )
        waits = 0.0
        step_sum = 0.0
        n_steps = 0
        n_optim = len(steps)  # hooked steps, and the ones an integration records below
        for row in drained:
            events.append(row)
            kind, _t, _name, _step, duration, value, _data = row
            if kind == "optimizer_step":
                n_optim += 1
            elif kind == "data_wait" and value is not None and duration is not None:
                waits += duration
                step_sum += value
                n_steps += 1
        # derived samples of the period since the last flush
        period = now - self._last
        self._last = now

        def sample(metric: str, device: str | None, value: float) -> None:
            if math.isfinite(value):
                samples.append((metric, device, None, now, value))

        if n_optim:
            self._stepped = True
        if self._stepped and period >= self.period / 4:  # no rate over a sliver of time
            sample("train.throughput", None, n_optim / period)
        if n_steps:
            sample("train.step_time", None, step_sum / n_steps)
            if step_sum > 0:
                sample("train.data_wait", None, min(100.0, 100.0 * waits / step_sum))
        try:
            for metric, dev, value in torch_memory():
                sample(metric, dev, value)
        except Exception as exc:
            self._once.warn(
                "torch",
                "tunescope: reading torch.cuda memory stats failed (%s: "
                "%s); torch.mem series are skipped",
                type(exc).__name__,
                exc,
            )
        return events, scalars, samples
