"""Launch the sampler process and stop it in order.

The sampler runs as ``sys.executable -m tunescope.collect --store URL --trial ID --pid PID
--interval S`` with pipes on stdin and stdout. It prints ``ready`` once its first sample is in
the store. Writing ``stop`` to its stdin (then closing it) stops it in order: a final sample, a
flush, exit 0, the trial's state untouched. End of input without ``stop`` means the parent died,
and the sampler then marks the trial failed; so the parent keeps the handle (and the pipe) open
for as long as the trial runs.

The launcher never raises into training: when the sampler cannot start or dies before it is
ready, it logs one warning and :func:`start_sampler` returns None. A sampler that is alive but
not ready within ``ready_timeout`` is kept (a slow NVML start still produces data) and a warning
says so. The sampler's stderr goes to a temporary file whose last lines are quoted in those
warnings (and logged at INFO after an orderly stop); stdout is drained by a reader thread so
the pipe never fills. Both the SDK and ``tunescope run -- CMD`` (watching the child's pid)
use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

from tunescope.record._safety import LOG

__all__ = ["SamplerHandle", "start_sampler"]

SAMPLER_MODULE = "tunescope.collect"


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
    """A running sampler. :meth:`stop` ends it in order; ``pid`` and :meth:`poll` as Popen."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        errfile: IO[bytes] | None,
        ready: threading.Event,
        trial_id: int,
    ) -> None:
        self.proc = proc
        self.trial_id = trial_id
        self.ready = ready
        self._err = errfile
        self._stopped = False
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        """The exit code if the sampler has ended, else None."""
        return self.proc.poll()

    def stderr_tail(self, lines: int = 5) -> str:
        """The last lines the sampler wrote to stderr, joined by `` | ``."""
        return _tail(self._err, lines)

    def stop(self, timeout: float = 10.0) -> int | None:
        """Send ``stop``, wait up to ``timeout`` s for the final sample and exit, kill it if it
        does not end. Returns its exit code (None if it could not be reaped). Never raises;
        calling it again returns the same code."""
        with self._lock:
            if self._stopped:
                return self.proc.poll()
            self._stopped = True
            code: int | None = None
            try:
                stdin = self.proc.stdin
                if stdin is not None:
                    try:
                        stdin.write(b"stop\n")
                        stdin.flush()
                    except (BrokenPipeError, OSError, ValueError):
                        pass
                    try:
                        stdin.close()
                    except (BrokenPipeError, OSError):
                        pass
                try:
                    code = self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    LOG.warning(
                        "tunescope: the sampler of trial %s did not stop within %.0f s; killing it",
                        self.trial_id,
                        timeout,
                    )
                    self.proc.kill()
                    code = self.proc.wait(5.0)
                if code not in (0, None):
                    LOG.warning(
                        "tunescope: the sampler of trial %s exited with code %s%s",
                        self.trial_id,
                        code,
                        _quote(self.stderr_tail()),
                    )
                elif tail := self.stderr_tail(20):
                    LOG.info("tunescope: the sampler of trial %s said: %s", self.trial_id, tail)
            except Exception as exc:
                LOG.warning(
                    "tunescope: stopping the sampler of trial %s failed (%s: %s)",
                    self.trial_id,
                    type(exc).__name__,
                    exc,
                )
            finally:
                self._close_err()
            return code

    def _close_err(self) -> None:
        if self._err is not None:
            try:
                self._err.close()
            except Exception:
                pass
            self._err = None


def _quote(tail: str) -> str:
    return f": {tail}" if tail else ""


def _reader(stream: IO[bytes], ready: threading.Event) -> None:
    """Drain the sampler's stdout for its whole life; set ``ready`` at the line ``ready``."""
    try:
        for line in stream:
            if line.strip() == b"ready":
                ready.set()
    except Exception:
        pass
    finally:
        try:
            stream.close()
        except Exception:
            pass


def start_sampler(
    store_url: str,
    trial_id: int,
    pid: int,
    interval: float,
    *,
    ready_timeout: float = 10.0,
    module: str = SAMPLER_MODULE,
) -> SamplerHandle | None:
    """Start the sampler of ``trial_id`` watching the process tree of ``pid`` and wait up to
    ``ready_timeout`` s for its first sample. Returns None (after one warning) if it cannot
    start or exits before it is ready; never raises. ``module`` is for tests."""
    cmd = [
        sys.executable,
        "-m",
        module,
        "--store",
        store_url,
        "--trial",
        str(trial_id),
        "--pid",
        str(pid),
        "--interval",
        repr(float(interval)),
    ]
    err: IO[bytes] | None = None
    try:
        err = tempfile.TemporaryFile(prefix="tunescope-sampler-")  # noqa: SIM115 (kept open)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            close_fds=True,
            env=os.environ.copy(),
        )
    except Exception as exc:
        LOG.warning(
            "tunescope: cannot start the sampler for trial %s (%s: %s); no hardware "
            "series will be recorded",
            trial_id,
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
        name=f"tunescope-sampler-out-{trial_id}",
    ).start()
    handle = SamplerHandle(proc, err, ready, trial_id)
    step = 0.02
    deadline = time.monotonic() + ready_timeout
    while not ready.wait(step):
        code = proc.poll()
        if code is not None:
            ready.wait(0.2)  # it may have printed ready and exited at once
            if ready.is_set():
                break
            LOG.warning(
                "tunescope: the sampler for trial %s exited with code %s before its "
                "first sample; no hardware series will be recorded%s",
                trial_id,
                code,
                _quote(handle.stderr_tail()),
            )
            handle._stopped = True
            handle._close_err()
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            return None
        if time.monotonic() >= deadline:
            LOG.warning(
                "tunescope: the sampler for trial %s is not ready after %.0f s; "
                "training goes on and it keeps starting",
                trial_id,
                ready_timeout,
            )
            break
        step = min(0.1, step * 1.5)
    return handle
