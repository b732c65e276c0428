"""The in-memory buffer of a trial, which trial is current, and the torch optimizer hook.

The training thread only appends tuples to a :class:`Recorder`'s deques (``deque.append`` is
atomic under the GIL); the flusher thread drains them with ``popleft``. Which trial receives
an optimizer step: the one entered in the calling thread, else the most recently entered trial
still open in the process (so steps taken in another thread, or by a framework's worker thread,
still land somewhere sensible).

The optimizer hook is torch's global ``register_optimizer_step_post_hook``, installed once per
process and never removed, and only when ``torch.optim.optimizer`` is already imported: this
module never imports torch. :func:`ensure_hook` is called at trial start and from the cheap
SDK calls (watch, log, evaluation…), so a script that imports torch after entering a trial is
hooked at its next SDK call; optimizer steps taken before that are not recorded. A step that a
gradient scaler skips (``GradScaler.step`` with inf/NaN gradients) never calls
``optimizer.step()``, so the hook does not record it. A trial whose ``auto_steps`` is off is
left alone by the hook: an integration that knows the framework's own step numbers (the
Trainer's ``global_step``) records them explicitly.

While torch compiles, the hook is called through ``torch.compiler.disable``, so that
``torch.compile`` never traces into it: a compiled training step that calls
``optimizer.step()`` gets no warning and no graph break from us (Dynamo cannot trace
the clock nor the thread-local lookup), and the hook still runs, eagerly, once per step.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from typing import Any

__all__ = [
    "MAX_BUFFER",
    "OPTIMIZER_MODULE",
    "WAKE_AT",
    "Recorder",
    "current",
    "ensure_hook",
    "hook_installed",
    "on_optimizer_step",
    "pop",
    "push",
]

MAX_BUFFER = 1_000_000
"""Raw entries a deque holds before the oldest are dropped: a safety net only, reached when the
flusher thread cannot drain for a long time (it drains every flush period whatever the
store's health)."""

EventRow = tuple[
    str, float, "str | None", "int | None", "float | None", "float | None", "dict[str, Any] | None"
]
"""(kind, t, name, step, duration, value, data), as the SDK appends it."""


WAKE_AT = 50_000
"""Entries in a buffer at which a hook wakes the flusher early (a burst of ``log()`` calls),
so that buffers drain long before :data:`MAX_BUFFER`."""


class Recorder:
    """The buffers of one trial in this process. ``key`` is the trial's key."""

    __slots__ = ("auto_steps", "closed", "events", "key", "scalars", "steps", "wake")

    def __init__(self, key: str) -> None:
        self.key = key
        self.wake = threading.Event()
        """Set by a hook when a buffer passes :data:`WAKE_AT` entries."""
        self.auto_steps = True
        """Whether the torch hook records this trial's optimizer steps (an integration that
        knows the real step numbers turns it off and records them as events itself)."""
        self.steps: deque[tuple[float, object]] = deque(maxlen=MAX_BUFFER)
        """(``time.monotonic()``, optimizer) per optimizer step; numbered, and put on the
        trial's clock, by the flusher."""
        self.events: deque[EventRow] = deque(maxlen=MAX_BUFFER)
        self.scalars: deque[tuple[str, int | None, float, object]] = deque(maxlen=MAX_BUFFER)
        """(name, step, ``time.monotonic()``, value): value a float, or a detached one-element
        tensor; the flusher puts the time on the trial's clock and converts the tensor
        (``Trial.log`` never reads a tensor in the training thread)."""
        self.closed = False


class _Local(threading.local):
    rec: Recorder | None = None


_local = _Local()
_stack: list[Recorder] = []
_top: Recorder | None = None
_lock = threading.Lock()
_time = time.monotonic
"""The hook's clock: one C call; the flusher puts its readings on the trial's (``_clock.at``)."""


def on_optimizer_step(optimizer: object, args: object, kwargs: object) -> None:
    """torch's global post-step hook: one timestamped tuple into the current trial's buffer."""
    try:
        rec = _local.rec or _top
        if rec is not None and rec.auto_steps:
            rec.steps.append((_time(), optimizer))
    except Exception:  # the hook never raises into training
        pass


def push(rec: Recorder) -> Recorder | None:
    """Make ``rec`` current in this thread and the process; returns this thread's previous."""
    global _top
    prev = _local.rec
    _local.rec = rec
    with _lock:
        _stack.append(rec)
        _top = rec
    return prev


def pop(rec: Recorder, prev: Recorder | None) -> None:
    """Undo :func:`push` (trials may end in any order)."""
    global _top
    if _local.rec is rec:
        _local.rec = prev
    with _lock:
        for i in range(len(_stack) - 1, -1, -1):
            if _stack[i] is rec:
                del _stack[i]
                break
        _top = _stack[-1] if _stack else None


def current() -> Recorder | None:
    """The recorder a hook would dispatch to now."""
    return _local.rec or _top


def any_active() -> bool:
    """Whether any trial is open in this process."""
    return bool(_stack)


OPTIMIZER_MODULE = "torch.optim.optimizer"
"""torch's module whose global step hook records optimizer steps; looked for, never imported."""
_handle: object | None = None


def ensure_hook() -> bool:
    """Install the optimizer hook if torch's optimizer module is loaded; True if installed."""
    global _handle
    if _handle is not None:
        return True
    mod = sys.modules.get(OPTIMIZER_MODULE)
    register = getattr(mod, "register_optimizer_step_post_hook", None)
    if register is None:
        return False
    with _lock:
        if _handle is None:
            _handle = register(_invisible_to_compile(on_optimizer_step))
    return True


def _invisible_to_compile(hook: Any) -> Any:
    """``hook``, called under ``torch.compiler.disable`` while torch compiles (2.1 and newer);
    torch is already imported here (the caller checked ``torch.optim.optimizer``). In eager
    mode the hook is called directly: ``disable``'s own wrapper costs about 1 µs a call,
    ``is_compiling()`` a tenth of that."""
    compiler = getattr(sys.modules.get("torch"), "compiler", None)
    disable = getattr(compiler, "disable", None)
    is_compiling = getattr(compiler, "is_compiling", None)
    if disable is None or is_compiling is None:
        return hook
    try:
        hidden = disable(hook)
    except Exception:  # an odd torch build: an uncompiled hook still records
        return hook

    def invisible(*args: Any) -> Any:
        if is_compiling():
            return hidden(*args)
        return hook(*args)

    invisible.__wrapped__ = hook  # type: ignore[attr-defined]
    return invisible


def _after_fork_in_child() -> None:
    """A forked child (a data-loader worker…) inherits no open trial: the parent's buffers
    are drained by a thread that does not exist there. It may join the trial afresh through
    the environment, like any child process."""
    global _top, _lock
    _lock = threading.Lock()
    _stack.clear()
    _top = None
    _local.rec = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def hook_installed() -> bool:
    """Whether the optimizer hook is installed in this process."""
    return _handle is not None
