"""The sampling loop: probes → batched store writes, on a fixed schedule, until told to stop.

Timing: the first sample is taken at once; sample ``k`` is due ``k x interval`` seconds after
it on the monotonic clock, so delays never accumulate (a sample that comes late is followed by
the next one on schedule; slots missed entirely are skipped). Waiting is
``threading.Event.wait``, so a stop request is acted on at once. Stored times are wall-clock
UNIX seconds taken at the start of each sample, strictly increasing.

Writes: samples are buffered and written by a writer thread with one ``append_samples`` every
``flush_every`` seconds (1 s), so the store's latency never delays a sample; each flush also
refreshes the trial's heartbeat and, when the set grew, its pids (every pid ever seen in the
tree), both ``only_if_running``. A failed write keeps its samples for the next flush (up to
:data:`MAX_PENDING`) and is logged once.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tunescope.collect._gpu import GpuBackend
from tunescope.collect._gpuprobe import GpuProbe
from tunescope.collect._host import HostProbe
from tunescope.collect._once import OnceLog
from tunescope.errors import ConfigError, StoreError
from tunescope.metrics import metric as catalog_metric
from tunescope.store import Store

__all__ = ["MAX_PENDING", "MIN_INTERVAL", "Sampler", "StdinWatch", "StopSignal", "failure_message"]

MIN_INTERVAL = 0.1
"""The shortest sampling interval accepted, seconds."""

MAX_PENDING = 500_000
"""Rows kept for retry while the store cannot be written; the oldest go first beyond it."""

_WRITER_JOIN_S = 30.0
"""How long stopping waits for a write in progress before the final flush."""

_Value = tuple[str, str | None, str | None, float, float]
"""(metric, device, note, t, value): a sample not yet written."""

_FINAL_MIN_GAP = 0.05
"""A final sample closer than this (s) to the previous one is not taken: rates over a few
milliseconds are mostly clock-tick noise."""


def failure_message(root_pid: int) -> str:
    """The error a trial gets when its training process vanished without closing it."""
    return f"training process {root_pid} ended without closing the trial (killed or crashed)"


class StopSignal:
    """Why and when to stop: ``stop`` (orderly: stdin line or SIGTERM) or ``eof`` (stdin
    closed without ``stop``: the parent died). The first reason given wins."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self._lock = threading.Lock()

    def request(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
        self.event.set()


class StdinWatch(threading.Thread):
    """Reads the stop protocol from a file descriptor (stdin): a line ``stop`` asks for an
    orderly stop, end of file without it means the parent died. Reads the raw descriptor, so
    the thread never holds a Python-level lock at interpreter exit."""

    def __init__(self, fd: int, stop: StopSignal, log: OnceLog) -> None:
        super().__init__(name="tunescope-stdin", daemon=True)
        self._fd = fd
        self._stop_signal = stop
        self._log = log

    def run(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._fd, 4096)
            except OSError as exc:
                self._log("stdin", "cannot read stdin (%s): stop the sampler with SIGTERM", exc)
                return
            if not chunk:
                self._stop_signal.request("eof")
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                word = line.strip().decode(errors="replace")
                if word == "stop":
                    self._stop_signal.request("stop")
                    return
                if word:
                    self._log(
                        "stdin-word", "ignoring %r on stdin (only 'stop' is understood)", word
                    )


class Sampler:
    """Samples one trial's process tree (and its GPUs) into ``store``.

    ``root_pid`` is the training process; ``interval`` in seconds (>= :data:`MIN_INTERVAL`);
    ``gpu`` the GPU backend or None for none. Call :meth:`sample` and :meth:`flush` directly,
    or :meth:`run` for the scheduled loop, then :meth:`finish`.

    Sampling never touches the store: :meth:`sample` only buffers values, and during
    :meth:`run` a writer thread flushes them, so a slow or locked store (a long transaction
    elsewhere, a far server) delays writes, never samples.
    """

    def __init__(
        self,
        store: Store,
        trial_id: int,
        root_pid: int,
        interval: float = 1.0,
        *,
        gpu: GpuBackend | None = None,
        log: OnceLog | None = None,
        exclude_pid: int | None = None,
        proc: Path = Path("/proc"),
        flush_every: float = 1.0,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        if not math.isfinite(interval) or interval < MIN_INTERVAL:
            raise ConfigError(
                f"the sampling interval must be at least {MIN_INTERVAL} s (got {interval})"
            )
        self.store = store
        self.trial_id = trial_id
        self.root_pid = root_pid
        self.interval = float(interval)
        self.flush_every = flush_every
        self._log = log or OnceLog()
        self._wall = wall
        self._mono = mono
        self.host = HostProbe(root_pid, exclude_pid=exclude_pid, proc=proc, log=self._log)
        self.gpu = GpuProbe(gpu, root_pid, log=self._log, proc=proc) if gpu else None
        self._lock = threading.Lock()  # guards _pending and _pids
        self._flush_lock = threading.Lock()  # one flush at a time
        self._pending: list[_Value] = []
        self._pids: frozenset[int] = frozenset()
        self._series: dict[tuple[str, str | None], int] = {}
        self._noted: set[tuple[str, str | None]] = set()
        self._last_t = -math.inf
        self._last_mono: float | None = None
        self._first_mono: float | None = None
        self._pids_written: frozenset[int] = frozenset()
        self.samples = 0
        """Samples taken so far."""

    # ------------------------------------------------------------------ one sample
    def sample(self) -> None:
        """Read every probe once and buffer the values (time: now, wall clock)."""
        t = self._wall()
        if t <= self._last_t:  # the wall clock stepped back: keep stored times increasing
            t = self._last_t + 0.001
        self._last_t = t
        mono = self._mono()
        if self._first_mono is None:
            self._first_mono = mono
        self._last_mono = mono
        values: list[tuple[str, str | None, float, str | None]] = []
        try:
            values.extend((k, None, v, None) for k, v in self.host.sample(mono).items())
        except Exception as exc:  # never let a probe bug end the sampling
            self._log("host-sample", "host sampling failed (%s: %s)", type(exc).__name__, exc)
        if self.gpu is not None:
            values.extend(self.gpu.sample(self.host.current_pids))
        rows = [(m, d, n, t, v) for m, d, v, n in values if math.isfinite(v)]
        with self._lock:
            self._pending.extend(rows)
            if len(self._pending) > MAX_PENDING:
                del self._pending[: len(self._pending) - MAX_PENDING]
                self._log("dropped", "the store has failed for long: dropping the oldest samples")
            self._pids = frozenset(self.host.seen_pids)
        self.samples += 1

    # ------------------------------------------------------------------ writing
    def _series_id(self, metric: str, device: str | None, note: str | None) -> int | None:
        key = (metric, device)
        sid = self._series.get(key)
        if sid is not None and (note is None or key in self._noted):
            return sid
        try:
            catalog_metric(metric)
        except KeyError as exc:  # a probe bug: every key must be in the catalog
            self._log("catalog:" + metric, "%s; its values are dropped", exc.args[0])
            return None
        sid = self.store.series(self.trial_id, metric, device, note=note).id
        self._series[key] = sid
        if note is not None:
            self._noted.add(key)
        return sid

    def flush(self) -> bool:
        """Write the buffered samples, then refresh the heartbeat and (when the set grew)
        the trial's pids. True if everything was written; on a store error the samples stay
        buffered for the next flush and the error is logged once."""
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, []
                pids = self._pids
            try:
                rows = []
                for metric, device, note, t, v in batch:
                    sid = self._series_id(metric, device, note)
                    if sid is not None:
                        rows.append((sid, t, v))
                if rows:
                    self.store.append_samples(rows)
            except StoreError as exc:
                self._log("append", "cannot write samples (%s); keeping them to retry", exc)
                with self._lock:
                    self._pending[:0] = batch
                return False
            changed = pids != self._pids_written
            try:
                self.store.update_trial(
                    self.trial_id,
                    heartbeat=self._wall(),
                    pids=sorted(pids) if changed else None,
                    only_if_running=True,
                )
                self._pids_written = pids
            except StoreError as exc:
                self._log("heartbeat", "cannot update the trial's heartbeat (%s)", exc)
            return True

    def _writer(self, done: threading.Event) -> None:
        while not done.wait(self.flush_every):
            self.flush()

    # ------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event) -> None:
        """Sample every ``interval`` on a fixed schedule anchored at the first sample until
        ``stop`` is set, flushing every ``flush_every`` seconds from a writer thread. Takes
        (and writes) the first sample itself if none was taken yet."""
        if self._first_mono is None:
            self.sample()
            self.flush()
        assert self._first_mono is not None
        done = threading.Event()
        writer = threading.Thread(
            target=self._writer, args=(done,), daemon=True, name="tunescope-writer"
        )
        writer.start()
        try:
            t0 = self._first_mono
            k = 1
            while not stop.is_set():
                delay = t0 + k * self.interval - self._mono()
                if delay > 0 and stop.wait(delay):
                    break
                self.sample()
                # Next slot after now: a late sample does not shift the schedule.
                k = max(k + 1, math.floor((self._mono() - t0) / self.interval) + 1)
        finally:
            done.set()
            writer.join(timeout=_WRITER_JOIN_S)

    def finish(self, parent_died: bool) -> None:
        """Final sample and flush. ``parent_died``: stdin ended without ``stop``, so a trial
        still ``running`` is marked ``failed`` (see :func:`failure_message`). Then compact."""
        if self._last_mono is None or self._mono() - self._last_mono >= _FINAL_MIN_GAP:
            self.sample()
        if not self.flush():
            self.flush()  # one more try before giving up on them
        if parent_died:
            try:
                self.store.update_trial(
                    self.trial_id,
                    state="failed",
                    end=self._wall(),
                    error=failure_message(self.root_pid),
                    only_if_running=True,
                )
            except StoreError as exc:
                self._log("fail-trial", "cannot mark the trial failed (%s)", exc)
        try:
            self.store.compact()
        except StoreError as exc:
            self._log("compact", "cannot compact the samples (%s)", exc)
        if self.gpu is not None:
            self.gpu.close()
