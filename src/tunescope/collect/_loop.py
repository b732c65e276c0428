"""The sampling loop: probes → batches for the trial's writer, on a fixed schedule, until told
to stop or the trial's root process ends.

Timing: the first sample is taken at once; slot ``k`` is the ``k``-th interval after it on the
monotonic clock, and each slot gets one sample, taken at its start, so delays never accumulate.
A sample that comes late does not shift the schedule: the next one is due at the next slot's
start, or :data:`SPACING` intervals after the late one if that is later (rates over a few
milliseconds are mostly clock-tick noise), so a late wake-up costs no slot. A slot with no sample
(the machine left the sampler no CPU for all of it) is recorded (see :data:`STARVED`). Waiting is
``threading.Event.wait``, so a stop request is acted on at once. Stored times are wall-clock
UNIX seconds taken at the start of each sample, strictly increasing.

Writes: every ``flush_every`` seconds (1 s) the buffered samples go to the writer as one batch
with the trial's heartbeat and, when the set grew, its pids (every pid ever seen in the tree).
Batches are of this host (``Batch.host``), so each node of a multi-node trial writes its own
series; the first one also says where the trial runs here (``collect/_where.py``).
Handing a batch over never waits for the store: the writer (``store/produce/_writer.py``) sends it
from its own thread, and keeps it (in memory, then in the spool) while the store is away.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import tunescope._clock as _clock
import tunescope._protocol as protocol
from tunescope._once import Once
from tunescope.collect._host import HostProbe, start_and_state
from tunescope.collect._once import LOGGER_NAME
from tunescope.errors import ConfigError
from tunescope.metrics import metric as catalog_metric

if TYPE_CHECKING:  # the store (and numpy) load after the first sample: see _main
    from tunescope.collect._gpu import GpuBackend
    from tunescope.collect._gpuprobe import GpuProbe
    from tunescope.store import Batch, EventRow, SampleRow, TrialEnd

__all__ = [
    "MIN_INTERVAL",
    "OomWatch",
    "Root",
    "Sampler",
    "Sink",
    "StdinWatch",
    "StopSignal",
    "end_of",
    "failure_message",
]

MIN_INTERVAL = 0.1
"""The shortest sampling interval accepted, seconds."""

SPACING = 0.25
"""The least time between two scheduled samples, in intervals: a late sample's successor waits
this long after it even when its slot has begun (its start stays in that slot)."""

STARVED = "sampler starved"
"""The name of the ``sampler_gap`` event recorded when a slot got no sample (the machine was too
busy to run the sampler for all of it): it spans the hole, from the sample before to the one
after, so every slot of a trial is sampled or accounted for, never silently missing."""

_FINAL_MIN_GAP = 0.05
"""A final sample closer than this (s) to the previous one is not taken: rates over a few
milliseconds are mostly clock-tick noise."""


class Sink(Protocol):
    """Where batches go: a :class:`~tunescope.store.Writer` (``put`` never blocks)."""

    def put(self, batch: Batch) -> None: ...


def failure_message(root_pid: int) -> str:
    """The error a trial gets when its training process vanished without closing it."""
    return f"training process {root_pid} ended without closing the trial (killed or crashed)"


def end_of(code: int, t: float) -> TrialEnd:
    """How a trial whose command ended with ``code`` (a shell's: 128 + N for signal N) ended."""
    from tunescope.store import TrialEnd

    if code == 0:
        return TrialEnd("completed", t, exit_code=0)
    if code > 128:
        import signal

        try:
            why = f"killed by signal {signal.Signals(code - 128).name}"
        except ValueError:
            why = f"exited with code {code}"
    else:
        why = f"exited with code {code}"
    return TrialEnd("failed", t, why, exit_code=code)


class StopSignal:
    """Why and when to stop: ``stop`` (orderly: a stdin line or SIGTERM), ``end`` (orderly,
    with how the launcher's trial ended: :attr:`end`), ``exit`` (the root ended with
    :attr:`code`, as the launcher says), ``root`` (the root process ended). The first reason
    given wins. :attr:`eof` records that stdin closed, which alone stops nothing."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self.code: int | None = None
        self.end: TrialEnd | None = None
        self.eof = False
        self._lock = threading.Lock()
        self._handed: list[Any] = []
        self._sink: Any = None

    def hand(self, batch: Any) -> None:
        """A batch the training handed over (``batch JSON``): to the writer once there is
        one (:meth:`attach`), kept till then."""
        with self._lock:
            sink = self._sink
            if sink is None:
                self._handed.append(batch)
                return
        sink.put(batch)

    def attach(self, sink: Any) -> None:
        """The writer that takes the handed batches from now on (and those kept till now)."""
        with self._lock:
            self._sink, handed, self._handed = sink, self._handed, []
        for b in handed:
            sink.put(b)

    def request(self, reason: str, code: int | None = None, end: TrialEnd | None = None) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
                self.code = code
                self.end = end
        self.event.set()


def parse_end(arg: str) -> TrialEnd:
    """The trial end an ``end JSON`` line carries (``tunescope/_protocol.py``), as a copy
    that changes nothing unless the trial is still running; ValueError when malformed."""
    import json

    from tunescope.store import TrialEnd

    raw = json.loads(arg)
    if not isinstance(raw, dict) or raw.get("state") not in ("completed", "failed", "pruned"):
        raise ValueError("not a trial end")
    t = float(raw["t"])
    error = raw.get("error")
    code = raw.get("exit_code")
    if not math.isfinite(t) or not (error is None or isinstance(error, str)):
        raise ValueError("not a trial end")
    if not (code is None or isinstance(code, int)):
        raise ValueError("not a trial end")
    return TrialEnd(str(raw["state"]), t, error, exit_code=code, only_if_running=True)


class StdinWatch(threading.Thread):
    """Reads the stop protocol from a file descriptor (stdin): ``stop``, ``end JSON``, ``exit
    CODE``; after ``stop`` or ``end``, ``batch JSON`` lines (what the training's writer could
    not keep when it left) go to :meth:`StopSignal.hand`; end of file is noted and stops
    nothing. Reads the raw descriptor, so the thread never holds a
    Python-level lock at interpreter exit."""

    def __init__(self, fd: int, stop: StopSignal, log: Once) -> None:
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
                self._stop_signal.eof = True
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                word = line.strip().decode(errors="replace")
                if word == protocol.STOP:
                    self._stop_signal.request(protocol.STOP)
                    continue  # batch lines may follow
                head, _, arg = word.partition(" ")
                if head == protocol.BATCH:
                    try:
                        from tunescope.store import Batch

                        batch = Batch.from_json(arg.encode())
                    except Exception:
                        self._log("stdin-batch", "ignoring a malformed batch line on stdin")
                        continue
                    self._stop_signal.hand(batch)
                    continue
                if head == protocol.END:
                    try:
                        end = parse_end(arg)
                    except (ValueError, TypeError, KeyError):
                        self._log("stdin-end", "ignoring a malformed end line on stdin")
                        continue
                    self._stop_signal.request(protocol.END, end=end)
                    continue  # batch lines may follow
                if head == protocol.EXIT:
                    try:
                        code = int(arg)
                    except ValueError:
                        self._log(
                            "stdin-exit", "ignoring %r on stdin (%s CODE)", word, protocol.EXIT
                        )
                        continue
                    self._stop_signal.request(protocol.EXIT, code)
                    return
                if word:
                    self._log(
                        "stdin-word",
                        "ignoring %r on stdin (only %s, %s, %s and %s CODE)",
                        word,
                        protocol.STOP,
                        protocol.END,
                        protocol.BATCH,
                        protocol.EXIT,
                    )


class OomWatch:
    """Whether the kernel's OOM killer ended a process: the ``oom_kill`` counter of its
    innermost memory cgroup (``_cgroup.oom_kills``), read while it lives (at most every
    :data:`OOM_EVERY_S`; a process may be moved into another cgroup after its start) and
    compared once it ended. A counter that rose while the process was in that cgroup, with
    an exit by SIGKILL (or an exit whose code no one knows), is an OOM kill."""

    OOM_EVERY_S = 1.0

    def __init__(self, pid: int, mono: Callable[[], float] = time.monotonic) -> None:
        self.pid = pid
        self._mono = mono
        self._path: Path | None = None
        self._base = 0
        self._at = -math.inf
        self.check(force=True)

    def check(self, *, force: bool = False) -> None:
        """Read the process's cgroup and counter (rate-limited unless ``force``)."""
        now = self._mono()
        if not force and now - self._at < self.OOM_EVERY_S:
            return
        self._at = now
        try:
            from tunescope.collect._cgroup import oom_kills

            got = oom_kills(self.pid)
        except Exception:  # never into the sampling
            return
        if got is not None and got[0] != self._path:  # a new cgroup: its own baseline
            self._path, self._base = got

    def killed(self, code: int | None) -> bool:
        """After the process ended with ``code`` (a shell's, None when unknown)."""
        import signal

        if self._path is None or (code is not None and code != 128 + signal.SIGKILL):
            return False
        from tunescope.collect._cgroup import read_oom_kill

        now = read_oom_kill(self._path)
        return now is not None and now > self._base


def _zombie_code(pid: int) -> int | None:
    """The exit code (a shell's) of ``pid`` while it is a zombie nobody reaped yet: field 52
    of ``/proc/PID/stat`` (Linux 3.5+), None when unreadable or another user's."""
    try:
        me = os.geteuid()
        if me != 0 and os.stat(f"/proc/{pid}").st_uid != me:
            return None  # another user's: the kernel shows 0 for a code it does not let us see
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
        fields = raw[raw.rfind(b")") + 2 :].split()
        if fields[0] != b"Z" or len(fields) < 50:
            return None
        return protocol.exit_code_of(int(fields[49]))
    except (OSError, ValueError, IndexError):
        return None


class Root:
    """The trial's root process: whether it ended, and with what code when it is this
    process's child (``tunescope run``'s command). A child is reaped by a thread of its own
    that requests ``root`` on ``stop`` at once; another process is polled each sample (its
    code is known when the sampler sees it a zombie nobody reaped yet). An ``exec()`` keeps
    the pid and the start time: the root goes on as the new program. :attr:`oom` tells an
    OOM kill."""

    def __init__(self, pid: int, *, child: bool = False, stop: StopSignal | None = None) -> None:
        self.pid = pid
        self.child = child
        self.code: int | None = None
        self.ended_at: float | None = None
        got = start_and_state(pid)
        self._start = None if got is None else got[0]
        self.oom = OomWatch(pid)
        if child:
            threading.Thread(
                target=self._reap, args=(stop,), name="tunescope-reaper", daemon=True
            ).start()

    def _reap(self, stop: StopSignal | None) -> None:
        while True:
            try:
                _pid, status = os.waitpid(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                status = 0
            break
        self.code = protocol.exit_code_of(status)
        self.ended_at = _clock.now()
        if stop is not None:
            stop.request("root")

    def ended(self) -> bool:
        if self.child:
            if self.ended_at is None:
                self.oom.check()
            return self.ended_at is not None
        if self.ended_at is not None:
            return True
        gone = self._start is None
        if not gone:
            try:
                got = start_and_state(self.pid, strict=True)
                gone = got is None or got[0] != self._start or got[1] in (b"Z", b"X")
                if got is not None and got[0] == self._start and got[1] == b"Z":
                    self.code = _zombie_code(self.pid)
            except OSError:  # another user's process (hidepid): it exists
                gone = False
        if gone:
            self.ended_at = _clock.now()
        else:
            self.oom.check()
        return gone


class Sampler:
    """Samples one trial's process tree (and its GPUs) into batches for ``sink``.

    ``key`` names the trial; ``root_pid`` is the training process; ``interval`` in seconds
    (>= :data:`MIN_INTERVAL`); ``gpu`` the GPU backend or None for none; ``gap_since``: this
    sampler replaces one that died, seen alive last at that time: the first sample records a
    ``sampler_gap`` event over the time without samples; ``note_starved``: record a starved
    schedule's holes as ``sampler_gap`` events (see :data:`STARVED`; a node
    sampler, which records no events, says False); ``flush_every``: seconds between
    the hand-overs :meth:`run` makes (``math.inf``: none, the samples are kept for a
    :meth:`flush` by hand). Call :meth:`sample` and
    :meth:`flush` directly, or :meth:`run` for the scheduled loop, then :meth:`finish`.

    Sampling never touches the store: :meth:`sample` only buffers values and :meth:`flush`
    hands them to the sink, which writes from a thread of its own.
    """

    def __init__(
        self,
        sink: Sink,
        key: str,
        root_pid: int,
        interval: float = 1.0,
        *,
        gpu: GpuBackend | None = None,
        log: Once | None = None,
        exclude_pid: int | None = None,
        proc: Path = Path("/proc"),
        flush_every: float = 1.0,
        gap_since: float | None = None,
        note_starved: bool = True,
        wall: Callable[[], float] = _clock.now,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        if not math.isfinite(interval) or interval < MIN_INTERVAL:
            raise ConfigError(
                f"the sampling interval must be at least {MIN_INTERVAL} s (got {interval})"
            )
        self.sink = sink
        self.key = key
        self.root_pid = root_pid
        self.interval = float(interval)
        self.flush_every = flush_every
        self._log = log or Once(LOGGER_NAME)
        self._wall = wall
        self._mono = mono
        self.host = HostProbe(root_pid, exclude_pid=exclude_pid, proc=proc, log=self._log)
        self._proc = proc
        self.gpu: GpuProbe | None = None
        if gpu:
            self.add_gpu(gpu)
        self._where_told = False  # where the trial runs here: found and sent at the first flush
        self._lock = threading.Lock()  # guards the buffers
        self._samples: list[SampleRow] = []
        self._events: list[EventRow] = []
        self._pids: frozenset[int] = frozenset()
        self._pids_sent: frozenset[int] = frozenset()
        self._known: set[str] = set()
        self._gap_since = gap_since
        self._note_starved_gaps = note_starved
        self._last_t = -math.inf
        self._last_mono: float | None = None
        self._first_mono: float | None = None
        self._slot = 0  # the schedule's slot of the last sample (see run)
        self._flushed_mono: float | None = None
        self.samples = 0
        """Samples taken so far."""

    def add_gpu(self, gpu: GpuBackend) -> None:
        """Sample ``gpu`` too from the next sample on (the sampler process opens the GPU
        library after its first sample: see ``_main``)."""
        from tunescope.collect._gpuprobe import GpuProbe

        self.gpu = GpuProbe(gpu, self.root_pid, log=self._log, proc=self._proc)

    # ------------------------------------------------------------------ one sample
    def sample(self) -> None:
        """Read every probe once and buffer the values (time: now, the trial's clock)."""
        t = self._wall()
        if t <= self._last_t:  # never the same time twice (a clock given by a test may repeat)
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
        rows = [(m, d, n, t, v) for m, d, v, n in values if math.isfinite(v) and self._known_key(m)]
        with self._lock:
            self._samples.extend(rows)
            self._pids = frozenset(self.host.seen_pids)
            if self._gap_since is not None:
                since, self._gap_since = self._gap_since, None
                if t > since:
                    self._events.append(
                        ("sampler_gap", since, "sampler restarted", None, t - since, None, None)
                    )
        self.samples += 1

    def _known_key(self, metric: str) -> bool:
        if metric in self._known:
            return True
        try:
            catalog_metric(metric)
        except KeyError as exc:  # a probe bug: every key must be in the catalog
            self._log("catalog:" + metric, "%s; its values are dropped", exc.args[0])
            return False
        self._known.add(metric)
        return True

    # ------------------------------------------------------------------ writing
    def _where_once(self) -> dict[str, Any] | None:
        """Where the trial runs here (``collect/_where.py``), the first time only (None
        after): found at the first flush, when the GPU backend is known."""
        if self._where_told:
            return None
        self._where_told = True
        try:
            from tunescope.collect._where import where

            return where(self.gpu, proc=self._proc)
        except Exception as exc:  # a bug of ours must not stop the sampling
            self._log("where", "cannot tell where the trial runs (%s: %s)", type(exc).__name__, exc)
            return None

    def flush(self, end: TrialEnd | None = None) -> None:
        """Hand the buffered samples to the sink as one batch, with the trial's heartbeat,
        its pids when the set grew, and ``end`` when given. Never waits for the store."""
        with self._lock:
            samples, self._samples = self._samples, []
            events, self._events = self._events, []
            pids = self._pids
        grew = pids != self._pids_sent
        from tunescope.store import Batch

        here = self._where_once()
        self.sink.put(
            Batch(
                self.key,
                samples=tuple(samples),
                events=tuple(events),
                heartbeat=self._wall(),
                pids=tuple(sorted(pids)) if grew else None,
                end=end,
                where=here,
            )
        )
        self._pids_sent = pids
        self._flushed_mono = self._mono()

    # ------------------------------------------------------------------ the loop
    def run(self, stop: threading.Event, root: Root | None = None) -> None:
        """Sample every ``interval`` on a fixed schedule anchored at the first sample until
        ``stop`` is set or ``root`` ended, flushing every ``flush_every`` seconds (see the
        module doc). Takes (and flushes) the first sample itself if none was taken yet;
        called again, it goes on with the same schedule."""
        if self._first_mono is None:
            self.sample()
            self.flush()
        assert self._first_mono is not None and self._last_mono is not None
        t0, step = self._first_mono, self.interval
        while not stop.is_set():
            if root is not None and root.ended():
                break
            at = max(t0 + (self._slot + 1) * step, self._last_mono + SPACING * step)
            delay = at - self._mono()
            if delay > 0 and stop.wait(delay):
                break
            before = (self._last_t, self._slot)
            self.sample()
            # the slot this sample started in (never the last one's again: a wait may end a
            # hair early); slots passed over in between got none
            self._slot = max(self._slot + 1, math.floor((self._last_mono - t0) / step + 1e-9))
            self._note_starved(*before)
            due = (
                self._flushed_mono is None or self._mono() - self._flushed_mono >= self.flush_every
            )
            if due and math.isfinite(self.flush_every):  # infinite: keep them all for now
                self.flush()

    def _note_starved(self, t_prev: float, slot_prev: int) -> None:
        """Record the hole between the previous sample and the one just taken as a
        ``sampler_gap`` (:data:`STARVED`) when a slot between them got no sample."""
        if not self._note_starved_gaps or self._slot - slot_prev < 2:
            return
        hole = self._last_t - t_prev
        with self._lock:
            self._events.append(("sampler_gap", t_prev, STARVED, None, hole, None, None))

    def finish(self, end: TrialEnd | None = None) -> None:
        """The final sample and flush, carrying ``end`` (how the trial ended, when this
        sampler ends it)."""
        if self._last_mono is None or self._mono() - self._last_mono >= _FINAL_MIN_GAP:
            self.sample()
        self.flush(end)
        self.host.close()
        if self.gpu is not None:
            with contextlib.suppress(Exception):
                self.gpu.close()
