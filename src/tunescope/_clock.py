"""One clock for a trial's times: a wall-clock anchor plus ``time.monotonic()``.

Every time stamped as a trial's data (samples, events, scalars, the heartbeat, the end) is
:func:`now`: the wall clock read once, at the *anchor*, plus the monotonic time elapsed since.
A step of the wall clock during a trial (an NTP step, an admin's ``date -s``) therefore moves
nothing: times stay ordered and keep their true distances. The anchor is taken when the first
trial of a process starts (:func:`start`) and kept while any trial of the process is open;
the next trial, once all have left, takes a new one (so a clock corrected between trials is
followed).

The processes of one trial share its anchor through the environment: :func:`start` puts it in
``$TUNESCOPE_CLOCK`` (the wall-minus-monotonic offset and this boot's id), which the sampler,
``tunescope run``'s command and every child inherit; a process that finds it, of the same
boot (``CLOCK_MONOTONIC`` is one clock for every process of a boot), adopts it, so the
sampler's samples and the training's events lie on one axis whatever the wall clock does. A
process of another boot (a node of a multi-node job that inherited the variable) takes its
own anchor. A process that never started a trial anchors at its first :func:`now`.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable

from tunescope._env import ENV_CLOCK

__all__ = ["at", "now", "start", "stop"]

_OFFSET_TRIES = 5

_lock = threading.Lock()
_offset: float | None = None
"""Wall clock minus monotonic clock at the anchor."""
_held = 0
"""Trials of this process that started and have not stopped."""
_put: tuple[str, str | None] | None = None
"""(the value this process put in the environment, the value it replaced)."""
_boot_id: str | None = None


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _boot() -> str:
    """This boot's identity: the kernel's boot id, else the host's name."""
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                _boot_id = f.read().strip() or socket.gethostname()
        except OSError:
            _boot_id = socket.gethostname()
    return _boot_id


def _parse(value: str | None) -> float | None:
    """The offset in a ``$TUNESCOPE_CLOCK`` value of this boot, else None."""
    if not value:
        return None
    offset, _, boot = value.partition("@")
    if boot != _boot():
        return None
    try:
        f = float(offset)
    except ValueError:
        return None
    return f if f == f and abs(f) < 1e11 else None


def _value(offset: float) -> str:
    return f"{offset!r}@{_boot()}"


def now() -> float:
    """The current time on the anchor's axis, UNIX epoch seconds."""
    off = _offset
    if off is None:
        off = _first()
    return off + time.monotonic()


def at(mono: float) -> float:
    """A ``time.monotonic()`` reading on the anchor's axis (for a hook that may call nothing
    but C: it keeps the reading, and the flusher converts it while the trial holds the
    anchor)."""
    off = _offset
    if off is None:
        off = _first()
    return off + mono


def _read_offset(
    mono: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time
) -> float:
    """Wall clock minus monotonic clock, read as closely together as this machine allows:
    the wall clock between two monotonic readings, the tightest of a few tries (a process
    preempted between two plain reads would shift every time of its trial by the pause)."""
    best, spread = 0.0, math.inf
    for _ in range(_OFFSET_TRIES):
        m0 = mono()
        w = wall()
        m1 = mono()
        if m1 - m0 < spread:
            best, spread = w - (m0 + m1) / 2, m1 - m0
        if spread < 1e-5:
            break
    return best


def _first() -> float:
    global _offset
    with _lock:
        if _offset is None:
            got = _parse(os.environ.get(ENV_CLOCK))
            _offset = got if got is not None else _read_offset()
        return _offset


def start() -> float:
    """A trial starts in this process: anchor the clock unless a trial of this process holds
    it already or an anchor was inherited from the launching process, and name it in
    ``$TUNESCOPE_CLOCK``; returns :func:`now`, the trial's start. Pair with :func:`stop`."""
    global _offset, _held, _put
    with _lock:
        if _held == 0:
            old = os.environ.get(ENV_CLOCK)
            got = _parse(old)
            if got is None:
                got = _read_offset()
                value = _value(got)
                os.environ[ENV_CLOCK] = value
                _put = (value, old)
            _offset = got
        _held += 1
    return now()


def stop() -> None:
    """A trial of this process left: once none is open, the environment is as it was."""
    global _held, _put
    with _lock:
        _held = max(0, _held - 1)
        if _held or _put is None:
            return
        (value, old), _put = _put, None
        if os.environ.get(ENV_CLOCK) == value:
            if old is None:
                os.environ.pop(ENV_CLOCK, None)
            else:
                os.environ[ENV_CLOCK] = old
