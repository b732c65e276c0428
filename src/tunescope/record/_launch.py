"""Launch the sampler process, watch it, and stop it in order.

The sampler runs as ``sys.executable -m tunescope.collect --trial-key KEY --pid PID
--interval S`` (the protocol is ``tunescope/_protocol.py``). The store URL, password
included, travels in its environment (``TUNESCOPE_STORE``), never on its command line, with
the trial's spec, so that the sampler can create the trial if it reaches the store first.

The sampler runs in a process group of its own: a signal to the training's group
(``timeout``, Slurm's scancel, a shell's job control) must not stop the one process that
records how the training ended. Starting does not wait for the sampler unless asked
(``ready_timeout``): a trial's start is
bounded, whatever the store does. Stopping (:meth:`SamplerHandle.request_stop`) asks for a
final sample and returns at once; the sampler then writes what it holds, however long the store
takes, and exits by itself: it is never killed with data in hand. The launcher never raises
into training: when the sampler cannot start it logs one warning and :func:`start_sampler`
returns None. The sampler's stderr goes to a temporary file whose last lines are quoted in
those warnings; stdout is drained by a reader thread so the pipe never fills.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

import tunescope._protocol as protocol
from tunescope import _clock
from tunescope._env import ENV_SAMPLER_SPEC, ENV_STORE, ENV_STORE_FILE
from tunescope.record._safety import LOG
from tunescope.store import Batch, TrialEnd, TrialSpec, file_id

__all__ = [
    "MAX_RESTARTS",
    "SamplerHandle",
    "Supervised",
    "end_line",
    "own_group",
    "sampler_env",
    "start_sampler",
]

MAX_RESTARTS = 3
HELD_S = 1.5
"""How long before a sampler was last seen alive its death may have lost samples: it hands
its samples to its writer every second (``collect``'s ``FLUSH_EVERY_S``) and the writer takes
a moment more to land them. The gap a restarted sampler records, and the gap to the trial's
end once the restarts are used up, start this much earlier (:func:`held_since`), so that they
cover what the killed one held (some samples that did land then fall inside the gap)."""


def held_since(alive_at: float, start: float) -> float:
    """Where the gap of a sampler last seen alive at ``alive_at`` starts (see
    :data:`HELD_S`), never before the trial's ``start``."""
    return max(start, alive_at - HELD_S)


HAND_MAX_BYTES = 48 * 1024
"""The most a training hands its sampler in ``batch`` lines when it leaves (what its writer
could keep neither in the store nor in the spool): less than a pipe holds, so handing them
never waits on a sampler that does not read."""
"""How many times a trial's sampler is started again after it died."""


def own_group() -> dict[str, object]:
    """``subprocess.Popen`` keywords that start a process in a process group of its own,
    in the caller's session (so that it keeps the controlling terminal)."""
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}  # pragma: no cover - Python 3.10


def end_line(end: TrialEnd) -> str:
    """The ``end JSON`` line that hands a trial's end to its sampler (``_protocol``)."""
    raw = {"state": end.state, "t": end.t, "error": end.error, "exit_code": end.exit_code}
    return f"{protocol.END} {json.dumps(raw)}"


def _tail(f: IO[bytes] | None, lines: int = 5) -> str:
    """The last lines of the sampler's stderr file. Reads with ``pread`` where it exists so
    the offset the sampler writes at (shared with this descriptor) never moves."""
    if f is None:
        return ""
    try:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - 4000)
        if hasattr(os, "pread"):
            raw = os.pread(fd, size - start, start)
        else:  # pragma: no cover - Windows
            f.seek(start)
            raw = f.read()
        text = raw.decode("utf-8", "replace").strip().splitlines()[-lines:]
        return " | ".join(text)
    except Exception:
        return ""


class SamplerHandle:
    """A running sampler: :meth:`request_stop` ends it in order; ``pid`` and :meth:`poll`
    as Popen. Thread-safe."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        errfile: IO[bytes] | None,
        ready: threading.Event,
        key: str,
    ) -> None:
        self.proc = proc
        self.key = key
        self.ready = ready
        self._err = errfile
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stopping(self) -> bool:
        """Whether a stop (or exit) was asked for."""
        return self._stopped

    def poll(self) -> int | None:
        """The exit code if the sampler has ended, else None."""
        return self.proc.poll()

    def stderr_tail(self, lines: int = 5) -> str:
        """The last lines the sampler wrote to stderr, joined by `` | ``."""
        return _tail(self._err, lines)

    def _say(self, line: str, keep_open: bool = False) -> bool:
        """Write ``line`` and close stdin (unless ``keep_open``), once; True if the line went
        into the pipe of a sampler that had not exited."""
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            said = False
            stdin = self.proc.stdin
            if stdin is not None:
                with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                    stdin.write(line.encode() + b"\n")
                    stdin.flush()
                    said = self.proc.poll() is None
                if not keep_open:
                    with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                        stdin.close()
            return said

    def request_stop(self, end: TrialEnd | None = None, keep_open: bool = False) -> bool:
        """Ask for a final sample and an orderly exit, handing over how the trial ended when
        ``end`` is given (the sampler writes it unless the trial ended by then); returns at
        once, True if the sampler got the line. ``keep_open``: stdin stays open for
        :meth:`hand` until :meth:`close_stdin`."""
        return self._say(protocol.STOP if end is None else end_line(end), keep_open)

    def hand(self, batches: list[Batch]) -> bool:
        """Hand the sampler batches to write with its own (``batch JSON`` lines, after
        :meth:`request_stop` with ``keep_open``): what the training's writer could keep
        neither in the store nor in the spool when it left; the sampler outlives the training
        and keeps them until the store is back. False (nothing handed) past
        :data:`HAND_MAX_BYTES`, or when the sampler exited or its stdin is closed."""
        data = b"".join(f"{protocol.BATCH} ".encode() + b.to_json() + b"\n" for b in batches)
        if len(data) > HAND_MAX_BYTES:
            return False
        with self._lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed or self.proc.poll() is not None:
                return False
            try:
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                return False
            return True

    def close_stdin(self) -> None:
        """Close the sampler's stdin (after :meth:`hand`): nothing more will be said."""
        with self._lock:
            stdin = self.proc.stdin
            if stdin is not None:
                with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                    stdin.close()

    def send_exit(self, code: int) -> bool:
        """Tell the sampler its root process ended with ``code``: it ends the trial and
        exits (``tunescope run``, for a sampler watching a command it reaped itself). True
        if the sampler got the line."""
        return self._say(f"{protocol.EXIT} {int(code)}")

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the sampler to exit; its code, or None if it still
        runs (it then finishes by itself). Never kills it."""
        try:
            code = self.proc.wait(max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None
        if code != 0:
            LOG.warning(
                "tunescope: the sampler of trial %s exited with code %s%s",
                self.key[:8],
                code,
                _quote(self.stderr_tail()),
            )
        elif tail := self.stderr_tail(20):
            LOG.info("tunescope: the sampler of trial %s said: %s", self.key[:8], tail)
        self._close_err()
        return code

    def stop(self, timeout: float = 10.0) -> int | None:
        """:meth:`request_stop`, then :meth:`wait` up to ``timeout`` s. Never kills."""
        self.request_stop()
        return self.wait(timeout)

    def _close_err(self) -> None:
        err, self._err = self._err, None
        if err is not None:
            with contextlib.suppress(Exception):
                err.close()


def _quote(tail: str) -> str:
    return f": {tail}" if tail else ""


def _reader(stream: IO[bytes], ready: threading.Event) -> None:
    """Drain the sampler's stdout for its whole life; set ``ready`` at the line ``ready``."""
    try:
        for line in stream:
            if line.strip() == protocol.READY.encode():
                ready.set()
    except Exception:
        pass
    finally:
        try:
            stream.close()
        except Exception:
            pass


def sampler_env(
    spec: TrialSpec, store_url: str, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``env`` (default: this process's) as a trial's sampler takes it: the store, the
    trial's spec (to create the trial where the store has not seen it), and for a SQLite store
    the file the trial began in, so that the sampler writes into that file or none (see
    ``tunescope/_protocol.py``)."""
    out = dict(os.environ if env is None else env)
    out[ENV_STORE] = store_url
    out[ENV_SAMPLER_SPEC] = spec.to_json()
    out.pop(ENV_STORE_FILE, None)
    if (fid := file_id(store_url)) is not None:
        out[ENV_STORE_FILE] = fid
    return out


def start_sampler(
    store_url: str,
    spec: TrialSpec,
    pid: int,
    interval: float,
    *,
    gap_since: float | None = None,
    ready_timeout: float = 0.0,
    node: bool = False,
    module: str = protocol.MODULE,
) -> SamplerHandle | None:
    """Start the sampler of the trial ``spec`` names, watching the process tree of ``pid``;
    wait up to ``ready_timeout`` s for its first sample. ``gap_since``: the sampler replaces
    one that died; it records the gap since then. ``node``: a node sampler, which samples
    this node's part of a multi-node trial and never ends it (``tunescope/_protocol.py``).
    Returns None (after one warning) if it cannot start or exits before it is ready; never
    raises. ``module`` is for tests."""
    cmd = protocol.sampler_command(
        spec.key, interval, pid=pid, gap_since=gap_since, node=node, module=module
    )
    env = sampler_env(spec, store_url)
    err: IO[bytes] | None = None
    try:
        err = tempfile.TemporaryFile(prefix="tunescope-sampler-")  # noqa: SIM115 (kept open)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            close_fds=True,
            env=env,
            **own_group(),  # type: ignore[call-overload]
        )
    except Exception as exc:
        LOG.warning(
            "tunescope: cannot start the sampler for trial %s (%s: %s); no hardware "
            "series will be recorded",
            spec.name or spec.key[:8],
            type(exc).__name__,
            exc,
        )
        if err is not None:
            err.close()
        return None
    ready = threading.Event()
    assert proc.stdout is not None
    threading.Thread(
        target=_reader,
        args=(proc.stdout, ready),
        daemon=True,
        name=f"tunescope-sampler-out-{spec.key[:8]}",
    ).start()
    handle = SamplerHandle(proc, err, ready, spec.key)
    step = 0.02
    deadline = time.monotonic() + ready_timeout
    while ready_timeout > 0 and not ready.wait(step):
        code = proc.poll()
        if code is not None:
            ready.wait(0.2)  # it may have printed ready and exited at once
            if ready.is_set():
                break
            LOG.warning(
                "tunescope: the sampler for trial %s exited with code %s before its "
                "first sample; no hardware series will be recorded%s",
                spec.name or spec.key[:8],
                code,
                _quote(handle.stderr_tail()),
            )
            handle._stopped = True
            handle._close_err()
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            return None
        if time.monotonic() >= deadline:
            break
        step = min(0.1, step * 1.5)
    return handle


class Supervised:
    """A trial's sampler, kept alive: :meth:`check` (the flusher calls it every period)
    starts a new one when it died, at most :data:`MAX_RESTARTS` times, and the new one records
    the gap (a ``sampler_gap`` event) since the last moment the dead one was seen alive.
    Thread-safe. ``node``: node samplers (see :func:`start_sampler`)."""

    def __init__(
        self, url: str, spec: TrialSpec, pid: int, interval: float, *, node: bool = False
    ) -> None:
        self._args = (url, spec, pid, interval)
        self._node = node
        self._lock = threading.Lock()
        self.restarts = 0
        self._alive_at = _clock.now()
        self.gave_up_at: float | None = None
        """When the last sampler was last seen alive, once none is restarted any more (its
        restarts used up): the trial has no samples from then on, a gap the trial's end
        records (:meth:`gap_to`)."""
        self.handle = start_sampler(url, spec, pid, interval, node=node)

    def check(self) -> None:
        with self._lock:
            h = self.handle
            if h is None or h.stopping:
                return
            code = h.poll()
            if code is None:
                self._alive_at = _clock.now()
                return
            url, spec, pid, interval = self._args
            if self.restarts >= MAX_RESTARTS:
                self.handle = None
                self.gave_up_at = held_since(self._alive_at, spec.start)
                LOG.warning(
                    "tunescope: the sampler of trial %s died again (code %s); after %d "
                    "restarts, hardware series of this trial stop here%s",
                    spec.name or spec.key[:8],
                    code,
                    self.restarts,
                    _quote(h.stderr_tail()),
                )
                return
            self.restarts += 1
            LOG.warning(
                "tunescope: the sampler of trial %s died (code %s); starting it again "
                "(%d of %d), the gap is recorded%s",
                spec.name or spec.key[:8],
                code,
                self.restarts,
                MAX_RESTARTS,
                _quote(h.stderr_tail()),
            )
            h._close_err()
            self.handle = start_sampler(
                url,
                spec,
                pid,
                interval,
                gap_since=held_since(self._alive_at, spec.start),
                node=self._node,
            )

    def gap_to(self, t_end: float) -> tuple[Any, ...] | None:
        """The ``sampler_gap`` event (an SDK event tuple) from the moment the last sampler was
        seen alive to ``t_end``, when its restarts were used up (None otherwise): no sample
        was taken then, and the gap says so, as a restarted sampler's does."""
        with self._lock:
            since = self.gave_up_at
        if since is None or t_end <= since:
            return None
        why = f"sampler gave up after {self.restarts} restarts"
        return ("sampler_gap", since, why, None, t_end - since, None, None)

    @property
    def pid(self) -> int | None:
        """The running sampler's pid (None when none runs)."""
        h = self.handle
        return None if h is None else h.pid

    def request_stop(self, end: TrialEnd | None = None, keep_open: bool = False) -> bool:
        """Stop the sampler in order, handing it ``end`` (see
        :meth:`SamplerHandle.request_stop`); True if a sampler got it."""
        with self._lock:
            if self.handle is not None:
                return self.handle.request_stop(end, keep_open)
            return False

    def hand(self, batches: list[Batch]) -> bool:
        """:meth:`SamplerHandle.hand` to the running sampler; False when none runs."""
        h = self.handle
        return h is not None and h.hand(batches)

    def close_stdin(self) -> None:
        h = self.handle
        if h is not None:
            h.close_stdin()

    def wait(self, timeout: float) -> int | None:
        h = self.handle
        return None if h is None else h.wait(timeout)

    def ready(self, timeout: float) -> bool:
        h = self.handle
        return h is not None and h.ready.wait(max(0.0, timeout))
