"""The sampler process: ``python -m tunescope.collect --store URL --trial ID --pid PID``.

Protocol with the process that starts it:

* stdout: exactly one line, ``ready``, once the first sample is in the store. Nothing else is
  ever written to stdout; failures go to stderr, each kind once.
* stdin: a line ``stop`` asks for an orderly stop (final sample, flush, compact, exit 0; the
  trial's state is left alone). End of file without ``stop`` means the parent died: final
  sample, flush, and a trial still ``running`` is marked ``failed`` (exit 0).
* SIGTERM: orderly stop, like ``stop``. SIGINT is ignored: Ctrl-C reaches the whole process
  group, and the sampler must outlive the training to record its end.

Exit codes: 0 after a stop, 1 when the store or the trial cannot be opened (or a replay asked
for cannot be read), 2 for bad arguments (an interval under 0.1 s).
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from tunescope.collect._gpu import GpuBackend, open_gpu_backend
from tunescope.collect._loop import MIN_INTERVAL, Sampler, StdinWatch, StopSignal
from tunescope.collect._once import LOGGER_NAME, OnceLog
from tunescope.errors import TunescopeError
from tunescope.store import open_store

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    """The sampler's command line."""
    p = argparse.ArgumentParser(
        prog="python -m tunescope.collect",
        description="Sample a trial's process tree (and its GPUs) into a tunescope store "
        "until a 'stop' line or end of file on stdin.",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="store URL or SQLite path (default: $TUNESCOPE_STORE, then ./tunescope.db)",
    )
    p.add_argument(
        "--trial",
        metavar="ID",
        type=int,
        required=True,
        help="id of the trial to record (it must exist)",
    )
    p.add_argument(
        "--pid",
        metavar="PID",
        type=int,
        required=True,
        help="root process of the trial; its descendants are watched too",
    )
    p.add_argument(
        "--interval",
        metavar="S",
        type=float,
        default=1.0,
        help=f"seconds between samples (default 1.0, at least {MIN_INTERVAL})",
    )
    return p


def _setup_logging(trial: int) -> logging.Logger:
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"tunescope sampler (trial {trial}): %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sampler process; returns its exit code (see the module doc)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    args = parser().parse_args(argv)
    if not math.isfinite(args.interval) or args.interval < MIN_INTERVAL:
        parser().error(
            f"--interval must be at least {MIN_INTERVAL} seconds (got {args.interval:g})"
        )
    logger = _setup_logging(args.trial)
    log = OnceLog(logger)
    stop = StopSignal()

    def _on_term(signum: int, frame: FrameType | None) -> None:
        stop.request("stop")

    signal.signal(signal.SIGTERM, _on_term)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but "ready" may reach the real stdout
    watch = StdinWatch(0, stop, log)
    watch.start()
    try:
        store = open_store(args.store)
    except TunescopeError as exc:
        logger.error("cannot open the store: %s", exc)
        return 1
    try:
        store.get_trial(args.trial)
        gpu: GpuBackend | None = open_gpu_backend(args.pid, log=log)
        sampler = Sampler(store, args.trial, args.pid, args.interval, gpu=gpu, log=log)
    except TunescopeError as exc:
        logger.error("cannot start: %s", exc)
        store.close()
        return 1
    try:
        sampler.sample()
        sampler.flush()
        try:
            out.write("ready\n")
            out.flush()
        except OSError:
            pass
        sampler.run(stop.event)
        sampler.finish(parent_died=stop.reason == "eof")
    finally:
        store.close()
    return 0
