"""Runs: :func:`run` names the store and the run; :func:`current_trial` finds the trial.

Entering a run never waits long for the store: :func:`run` checks the store in the background
and waits at most :data:`ENTER_WAIT_S` for it. A store that answers in time is checked for what
only the user can fix (a URL of an unknown kind, a foreign or newer database, a path that
cannot be written) and such a store named explicitly raises before training starts. A store
that does not answer in time (a stopped server, a lock held elsewhere) holds nothing up:
training starts, its trials record through their writers, which keep everything (in memory,
then in the spool) until the store is back.

A process started with ``TUNESCOPE_TRIAL_KEY`` set (by a parent trial or by
``tunescope run -- CMD``) joins that trial: :func:`run` returns a run whose trials all record
into it, and :func:`current_trial` returns a trial bound to it that lives until the
interpreter exits (it flushes then).
"""

from __future__ import annotations

import atexit
import math
import os
import shlex
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tunescope._env import ENV_INTERVAL, ENV_STORE
from tunescope._names import default_run_name, page_root
from tunescope.errors import ConfigError, StoreError, StoreUnavailable
from tunescope.record import _state
from tunescope.record._env import attach_key
from tunescope.record._mode import disabled, quiet
from tunescope.record._safety import LOG, once
from tunescope.record._trial import ENTER_WAIT_S, WAKE_MARGIN_S, Trial, rec_trial
from tunescope.store import (
    display,
    open_store,
    os_user,
    project_of,
    redact,
    resolve_url,
)

__all__ = ["ENTER_WAIT_S", "Run", "current_trial", "run"]

R = TypeVar("R")


class Background(Generic[R]):
    """``fn()`` in a daemon thread; :meth:`wait` waits for it a bounded time. The call goes
    on after a wait that timed out (it may still land; its result is then kept)."""

    def __init__(self, fn: Callable[[], R], name: str) -> None:
        self.value: R | None = None
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._fn = fn
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        try:
            self.value = self._fn()
        except BaseException as exc:  # reported through .error
            self.error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once the call has returned or raised."""
        return self._done.wait(max(0.0, timeout))


class Run:
    """One fine-tune job (e.g. a hyperparameter search); a context manager. Create with
    :func:`run`. ``url`` is the store's URL without its password."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        interval: float,
        sampler: bool,
        recording: bool = True,
        attach: tuple[str, str] | None = None,
        probe: Background[int] | None = None,
    ) -> None:
        self._name = name
        self._url = url
        self.url = display(url)
        self.interval = interval
        self.sampler = sampler
        self.recording = recording
        """False when nothing is recorded (the default store cannot be used)."""
        self._attach = attach
        self._probe = probe
        self.project = project_of(url)
        """The project the run records into (an HTTP store's, else $TUNESCOPE_PROJECT or
        default)."""

    @property
    def store_url(self) -> str:
        """The URL the run's writers use, password included if it has one: for launchers of
        the run's processes (which pass it in the environment), never to be shown."""
        return self._url

    @property
    def id(self) -> int | None:
        """The run's id in the store, once the store has answered; else None."""
        p = self._probe
        return p.value if p is not None else None

    @property
    def name(self) -> str:
        return self._name

    @property
    def attached(self) -> bool:
        """True when this process joined a trial of a run another process owns."""
        return self._attach is not None

    def __repr__(self) -> str:
        return f"Run(id={self.id}, name={self._name!r}, url={self.url!r})"

    def trial(
        self,
        name: str | None = None,
        *,
        params: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Trial:
        """A new trial of this run (``name`` defaults to ``trial-<k>``), to use with ``with``.
        In an attached run every trial records into the trial the process joined.

        ``key``: the key the trial's writers name it by (default: a new random one); an
        integration whose trial is also written from another process (Ray Tune's driver
        writes how each trial ended) derives it from what both processes know. Entering a
        trial under a key the store already has continues that trial."""
        return Trial(self, name, params, attach=self._attach, key=key)

    def close(self) -> None:
        """Nothing to release: each trial writes through its own writer. Kept so that a run
        is a context manager and older code calling it still works."""

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run(
    name: str | None = None,
    *,
    store: str | os.PathLike[str] | None = None,
    interval: float = 1.0,
    sampler: bool = True,
) -> Run:
    """Start (or continue) the run ``name`` (default ``run-YYYYmmdd-HHMMSS``) in the store
    named by ``store``, else $TUNESCOPE_STORE, else ./tunescope.db.

    ``interval``: sampler period in seconds. ``sampler``: start a sampler process per trial.
    In a process started inside a trial (TUNESCOPE_TRIAL_KEY set), the run joins that trial
    in the store $TUNESCOPE_STORE names (``name``, ``store`` and ``sampler`` are then
    ignored).

    Waits at most :data:`ENTER_WAIT_S` for the store (see the module doc). Raises ConfigError
    for a bad ``interval`` or name, or a store URL of an unknown kind, and StoreError when a
    store named explicitly (argument or $TUNESCOPE_STORE) answers that it cannot be used: that
    is user input, checked before training starts. When only the default ./tunescope.db
    cannot be used it logs one warning and returns a run that records nothing.

    With ``$TUNESCOPE_MODE=disabled`` it returns at once a run that records nothing, without
    checking anything or opening the store. A run that records says so once on stderr (where,
    and how to look), unless ``$TUNESCOPE_QUIET`` is set (see ``_mode``).
    """
    if disabled():
        run_name = str(name) if name else default_run_name("run")
        return Run(run_name, resolve_url(store), interval=1.0, sampler=False, recording=False)
    if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
        raise ConfigError(f"interval must be a positive number of seconds, not {interval!r}")
    if name is not None and not str(name).strip():
        raise ConfigError("a run name must not be empty")
    attach = attach_key()
    if attach is not None:  # the trial key means something only in the store it came with
        url = os.environ.get(ENV_STORE) or resolve_url(store)
        return Run(
            attach[0], url, interval=_env_interval(float(interval)), sampler=False, attach=attach
        )
    url = resolve_url(store)
    explicit = (store is not None and str(store) != "") or bool(os.environ.get(ENV_STORE))
    run_name = str(name) if name is not None else default_run_name("run")

    def ensure() -> int:
        with open_store(url) as st:
            return st.ensure_run(
                run_name, os_user=os_user(), host=socket.gethostname(), project=project_of(url)
            ).id

    probe = Background(ensure, "tunescope-run-probe")
    probe.wait(ENTER_WAIT_S - WAKE_MARGIN_S)
    err = probe.error
    if isinstance(err, ConfigError):
        raise err
    if isinstance(err, StoreError) and not isinstance(err, StoreUnavailable):
        if explicit:
            raise err
        LOG.warning(
            "tunescope: cannot open the default store %s (%s); nothing will be recorded",
            redact(url),
            err,
        )
        return Run(run_name, url, interval=float(interval), sampler=sampler, recording=False)
    if err is not None:  # unreachable now (a store slow to answer is not worth a warning)
        LOG.warning(
            "tunescope: store %s does not answer yet (%s); training starts, and what it "
            "records waits (in memory, then in the spool) until the store is back",
            redact(url),
            err,
        )
    announce(run_name, url)
    return Run(run_name, url, interval=float(interval), sampler=sampler, probe=probe)


_announced: set[tuple[str, str]] = set()
_announce_lock = threading.Lock()


def announce(run_name: str, url: str) -> None:
    """Say once per process and run, on stderr, where the run records and how to look at it
    (the store's URL without its password), unless ``$TUNESCOPE_QUIET`` is set."""
    try:
        if quiet():
            return
        with _announce_lock:
            if (url, run_name) in _announced:
                return
            _announced.add((url, run_name))
        shown = display(url)
        root = page_root(shown)  # a team server's page, at the root of its address
        view = f"tunescope ui --store {shlex.quote(shown)}" if root is None else f"{root}/"
        sys.stderr.write(f"tunescope: recording run {run_name!r} into {shown}; view: {view}\n")
        sys.stderr.flush()
    except Exception as exc:  # a closed stderr, say: never into training
        once.warn("announce", "tunescope: cannot say where the run records (%s)", exc)


def _env_interval(default: float) -> float:
    """The owner's interval, as ``tunescope run`` passes it."""
    try:
        env_interval = float(os.environ.get(ENV_INTERVAL, ""))
        if math.isfinite(env_interval) and env_interval > 0:
            return env_interval
    except ValueError:
        pass
    return default


_attach_lock = threading.Lock()
_joined: dict[str, Trial] = {}


def _after_fork_in_child() -> None:
    global _attach_lock
    _attach_lock = threading.Lock()
    _joined.clear()
    rec_trial.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_trial() -> Trial | None:
    """The trial being recorded for the calling thread (else the latest one opened in the
    process); in a process started inside a trial, the trial it joins; else None."""
    try:
        rec = _state.current()
        if rec is not None:
            trial = rec_trial.get(id(rec))
            if trial is not None:
                return trial
        attach = attach_key()
        if attach is None or disabled():
            return None
        _state.ensure_hook()
        with _attach_lock:
            trial = _joined.get(attach[1])
            if trial is None:
                r = run()
                trial = _joined[attach[1]] = r.trial()
                trial.__enter__()
                atexit.register(_leave, trial, os.getpid())
            return trial
    except Exception as exc:
        once.warn("current", "tunescope: current_trial() failed (%s: %s)", type(exc).__name__, exc)
        return None


def _leave(trial: Trial, pid: int) -> None:
    """At interpreter exit: the final flush of a joined trial (not in a forked copy)."""
    if os.getpid() == pid:
        trial.__exit__(None, None, None)
