"""Runs: :func:`run` opens the store and the run; :func:`current_trial` finds the trial.

A process started with ``TUNESCOPE_TRIAL_ID`` set (by a parent trial or by
``tunescope run -- CMD``) joins that trial: :func:`run` returns a run whose trials all record
into it, and :func:`current_trial` returns a trial bound to it that lives until the
interpreter exits (it flushes then).
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
from typing import Any

from tunescope.errors import ConfigError, StoreError
from tunescope.record import _state
from tunescope.record._env import ENV_INTERVAL, ENV_RUN_ID, ENV_STORE, attach_ids
from tunescope.record._safety import LOG, once
from tunescope.record._trial import Trial, rec_trial
from tunescope.store import Store, open_store, resolve_url

__all__ = ["Run", "current_trial", "run"]


class Run:
    """One fine-tune job (e.g. a hyperparameter search); a context manager that closes its
    store connection. Create with :func:`run`."""

    def __init__(
        self,
        name: str,
        url: str,
        store: Store | None,
        *,
        run_id: int | None,
        interval: float,
        sampler: bool,
        attach_to: int | None = None,
    ) -> None:
        self._name = name
        self.url = url
        self._store = store
        self._id = run_id
        self.interval = interval
        self.sampler = sampler
        self._attach_to = attach_to

    @property
    def id(self) -> int | None:
        """The run's id in the store; None when nothing is recorded."""
        return self._id

    @property
    def name(self) -> str:
        return self._name

    @property
    def attached(self) -> bool:
        """True when this process joined a trial of a run another process owns."""
        return self._attach_to is not None

    def __repr__(self) -> str:
        return f"Run(id={self._id}, name={self._name!r}, url={self.url!r})"

    def trial(self, name: str | None = None, *, params: dict[str, Any] | None = None) -> Trial:
        """A new trial of this run (``name`` defaults to ``trial-<k>``), to use with ``with``.
        In an attached run every trial records into the trial the process joined."""
        return Trial(self, name, params, attach_to=self._attach_to)

    def close(self) -> None:
        """Release the store connection (trials still open keep their own flushers)."""
        store, self._store = self._store, None
        if store is not None:
            try:
                store.close()
            except Exception as exc:
                once.warn(
                    "run-close",
                    "tunescope: closing the store failed (%s: %s)",
                    type(exc).__name__,
                    exc,
                )

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
    In a process started inside a trial (TUNESCOPE_TRIAL_ID set), the run joins that trial
    in the store $TUNESCOPE_STORE names (``name``, ``store`` and ``sampler`` are then
    ignored); store problems there log one warning and never raise.

    Raises ConfigError for a bad ``interval`` or name, or a store URL of an unknown kind, and
    StoreError when a store named explicitly (argument or $TUNESCOPE_STORE) cannot be opened:
    that is user input, checked before training starts. When only the default ./tunescope.db
    cannot be opened, or when joining a parent's trial, it logs one warning and returns a run
    that records nothing.
    """
    if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
        raise ConfigError(f"interval must be a positive number of seconds, not {interval!r}")
    if name is not None and not str(name).strip():
        raise ConfigError("a run name must not be empty")
    attach = attach_ids()
    if attach is not None:  # the trial id means something only in the store it came with
        return _attached_run(
            os.environ.get(ENV_STORE) or resolve_url(store), attach, float(interval)
        )
    url = resolve_url(store)
    explicit = (store is not None and str(store) != "") or bool(os.environ.get(ENV_STORE))
    run_name = str(name) if name is not None else time.strftime("run-%Y%m%d-%H%M%S")
    try:
        st = open_store(url)
    except ConfigError:
        raise
    except StoreError as exc:
        if explicit:
            raise
        LOG.warning(
            "tunescope: cannot open the default store %s (%s); nothing will be recorded", url, exc
        )
        return Run(run_name, url, None, run_id=None, interval=float(interval), sampler=sampler)
    try:
        info = st.ensure_run(run_name)
    except StoreError as exc:
        st.close()
        if explicit:
            raise
        LOG.warning(
            "tunescope: cannot create run %r in %s (%s); nothing will be recorded",
            run_name,
            url,
            exc,
        )
        return Run(run_name, url, None, run_id=None, interval=float(interval), sampler=sampler)
    return Run(info.name, st.url, st, run_id=info.id, interval=float(interval), sampler=sampler)


def _attached_run(url: str, ids: tuple[int, int], interval: float) -> Run:
    run_id, trial_id = ids
    try:  # the owner's interval, as `tunescope run` passes it
        env_interval = float(os.environ.get(ENV_INTERVAL, ""))
        if math.isfinite(env_interval) and env_interval > 0:
            interval = env_interval
    except ValueError:
        pass
    try:
        st = open_store(url)
        info = st.get_trial(trial_id)
        name = st.get_run(info.run_id).name
        if info.run_id != run_id:
            LOG.warning(
                "tunescope: trial %s belongs to run %s, not %s as %s says; joining it",
                trial_id,
                info.run_id,
                run_id,
                ENV_RUN_ID,
            )
        return Run(
            name,
            st.url,
            st,
            run_id=info.run_id,
            interval=interval,
            sampler=False,
            attach_to=trial_id,
        )
    except Exception as exc:
        once.warn(
            f"attach:{trial_id}",
            "tunescope: cannot join trial %s in %s (%s: %s); nothing will be recorded",
            trial_id,
            url,
            type(exc).__name__,
            exc,
        )
        return Run(
            f"run-{run_id}",
            url,
            None,
            run_id=None,
            interval=interval,
            sampler=False,
            attach_to=trial_id,
        )


_attach_lock = threading.Lock()
_joined: dict[int, Trial] = {}


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
        ids = attach_ids()
        if ids is None:
            return None
        _state.ensure_hook()
        with _attach_lock:
            trial = _joined.get(ids[1])
            if trial is None:
                r = _attached_run(resolve_url(None), ids, 1.0)
                trial = _joined[ids[1]] = r.trial()
                trial.__enter__()
                atexit.register(_leave, trial, r, os.getpid())
            return trial
    except Exception as exc:
        once.warn("current", "tunescope: current_trial() failed (%s: %s)", type(exc).__name__, exc)
        return None


def _leave(trial: Trial, r: Run, pid: int) -> None:
    """At interpreter exit: the final flush of a joined trial (not in a forked copy)."""
    if os.getpid() == pid:
        trial.__exit__(None, None, None)
        r.close()
