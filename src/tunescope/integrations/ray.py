"""Ray Tune: every Tune trial is a tunescope trial, recorded on whichever node runs it.

::

    from ray import tune
    from tunescope.integrations.ray import TunescopeCallback, track

    asha = ASHAScheduler(grace_period=1, max_t=20)
    tuner = tune.Tuner(
        track(train_fn, run="asha-sweep"),                     # in each trial's process
        tune_config=tune.TuneConfig(scheduler=asha, metric="loss", mode="min"),
        run_config=tune.RunConfig(
            callbacks=[TunescopeCallback(run="asha-sweep", scheduler=asha)]  # in the driver
        ),
    )

Two halves, one trial each:

* :func:`track` wraps a function trainable (or a ``Trainable`` class). In the Ray worker
  process that runs a trial it opens a tunescope trial of the run ``run`` (default: the Tune
  experiment's name) named as Tune names the trial, with the trial's config as params
  (values as the SDK keeps them: JSON values, others as their ``str``), and starts its
  sampler there: the hardware of that worker's process tree on that node. The trainable's
  own SDK calls (``ts.current_trial()``) and torch's optimizer steps record into it.
* :class:`TunescopeCallback`, in ``RunConfig(callbacks=[...])``, runs in the driver. It writes
  the metrics of each ``tune.report`` / ``train.report`` (numbers only, nested dicts as
  ``a/b``, Tune's own bookkeeping keys left out) as scalars at the ``training_iteration``
  step, and how each trial ended. The driver writes the end because Ray may kill a trial's
  process before the trial's own code has run to its end.

Both name the trial by the same key, derived from the experiment's name and Tune's trial id
(:func:`trial_key`).

How a trial ends:

* ``completed``: its function returned (a class trainable's result said ``done``); or Tune
  stopped it once it reached its budget: the run's ``stop`` criteria
  (``RunConfig(stop={"training_iteration": 20})``) or, for the ``scheduler`` given to the
  callback, its ``max_t`` (ASHA, HyperBand);
* ``pruned``: Tune stopped it before that (the scheduler, e.g. ASHA's early stopping, or a
  ``Stopper``): Tune shows such a trial ``TERMINATED`` like a finished one;
* ``failed``: its trainable raised (the error as ``Type: message``), or Tune lost it (its
  process or node died: Tune's error, e.g. ``ActorDiedError: ...``).

Without the callback, a trial still records its hardware, SDK events, params and an end from
its own process (``completed`` also when Tune stopped it early; nothing when Ray killed its
process first: its sampler then ends it ``failed``), but no Tune metrics.

The store: ``store`` (a URL or path; it travels to the workers inside the pickled trainable)
or, without it, ``$TUNESCOPE_STORE`` in each process: set it where the driver runs and
where each node's ``ray start`` runs (a PostgreSQL URL or a team server reachable from every
node: a SQLite file only serves nodes that share its disk). Passwords go in the environment
or a ``~/.pgpass``, never on a command line. Nothing here raises into the trainable or into
Tune: a failure logs one warning and training goes on unrecorded.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import inspect
import math
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import ray.cloudpickle
import ray.tune
from ray.tune import Callback
from ray.tune.result import AUTO_RESULT_KEYS

import tunescope.record as ts
from tunescope.errors import ConfigError
from tunescope.integrations._common import LOG, safe
from tunescope.store import Batch, TrialEnd, TrialSpec, Writer, os_user, project_of, resolve_url

__all__ = ["TunescopeCallback", "track", "trial_key"]

_SKIP = frozenset(AUTO_RESULT_KEYS) | {"done", "trial_id", "experiment_tag", "should_checkpoint"}
"""Keys of a Tune result that are Tune's bookkeeping, not the trainable's metrics."""

FINISHED = "tunescope_finished"
"""Key a tracked class trainable adds to the result it ends with (``done`` True of its own):
the callback takes it out of the result again, and ends the trial ``completed``."""

CLOSE_WAIT_S = 5.0
"""Longest the callback waits at the experiment's end for its last writes (the rest is
spooled, for ``tunescope sync``)."""


def trial_key(experiment: str, trial_id: str) -> str:
    """The tunescope key of a Tune trial: the same in the worker and in the driver."""
    digest = hashlib.sha256(f"{experiment}\0{trial_id}".encode()).hexdigest()
    return f"ray-{digest[:32]}"


def _open(
    run: str | None,
    store: str | None,
    interval: float,
    sampler: bool,
    config: Any,
    trainable: Any = None,
) -> AbstractContextManager[Any]:
    """The trial of the Tune trial this process runs (entered by the caller), or a no-op:
    a class trainable's (``trainable``) or else the function trainable's of Tune's context."""
    try:
        if trainable is None:
            ctx = ray.tune.get_context()
            experiment, trial_id, name = (
                ctx.get_experiment_name(),
                ctx.get_trial_id(),
                ctx.get_trial_name(),
            )
        else:
            info = trainable._trial_info  # set by Tune before setup() and reset_config()
            experiment, trial_id, name = info.experiment_name, info.trial_id, info.trial_name
        key = trial_key(experiment, trial_id)
        params = dict(config) if isinstance(config, Mapping) else {}
        r = ts.run(run or experiment, store=store, interval=interval, sampler=sampler)
        return r.trial(name, params=params, key=key)
    except Exception as exc:
        LOG.warning(
            "tunescope: cannot record this Tune trial (%s: %s); it trains unrecorded",
            type(exc).__name__,
            exc,
        )
        return nullcontext()


_ending: set[threading.Event] = set()
"""One event per function trial open in this process, set once the trial has been left."""
_ending_lock = threading.Lock()
_at_exit: list[bool] = []


def _leaving() -> threading.Event:
    """Note a trial being opened in a training thread. Tune stops a trial by raising in that
    (daemon) thread and then ends the actor's process: at exit, the process waits (a bounded
    time) for its trials to be left, so that what they hold reaches the store."""
    done = threading.Event()
    with _ending_lock:
        _ending.add(done)
        if not _at_exit:
            _at_exit.append(True)
            atexit.register(_wait_for_trials)
    return done


def _left(done: threading.Event) -> None:
    done.set()
    with _ending_lock:
        _ending.discard(done)


def _wait_for_trials() -> None:
    deadline = time.monotonic() + ts.EXIT_WAIT_S + 0.5
    with _ending_lock:
        pending = list(_ending)
    for done in pending:
        done.wait(max(0.0, deadline - time.monotonic()))


def _ended_by_tune(trial: Any, exc: BaseException | None) -> None:
    """Set how the trial ends as this process sees it. Deferred, so that the driver's word
    (pruned or completed, from the scheduler's decision) wins whatever lands first: Tune
    stops a function trainable by raising ``SystemExit(0)`` out of ``report``."""
    if not isinstance(trial, ts.Trial):
        return
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
        trial.end_as("completed", defer=True)


def track(
    trainable: Any,
    *,
    run: str | None = None,
    store: str | None = None,
    interval: float = 1.0,
    sampler: bool = True,
) -> Any:
    """Wrap a Tune trainable so that each of its trials is recorded (see the module doc): a
    function (``def train_fn(config)``, a generator one too), whose wrapper keeps its name,
    signature and Tune attributes (``tune.with_resources``); or a ``tune.Trainable`` class,
    of which it returns a subclass that records each trial from ``setup`` to ``cleanup``
    (its ``step`` results are the reported metrics). ``run``: the run's name (default: the
    experiment's); ``store``, ``interval``, ``sampler`` as for :func:`tunescope.record.run`.
    Raises ConfigError for a bad ``interval`` and TypeError for a class that is no
    Trainable (here, on the driver)."""
    if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
        raise ConfigError(f"interval must be a positive number of seconds, not {interval!r}")
    url = None if store is None else str(store)
    if inspect.isclass(trainable):
        if not issubclass(trainable, ray.tune.Trainable):
            raise TypeError(f"{trainable.__name__} is a class but not a ray.tune.Trainable")
        return _track_class(trainable, run, url, interval, sampler)

    if inspect.isgeneratorfunction(trainable):

        @functools.wraps(trainable)
        def generator(config: Any) -> Iterator[Any]:
            done = _leaving()
            try:
                with _open(run, url, interval, sampler, config) as trial:
                    try:
                        yield from trainable(config)
                    except BaseException as exc:
                        _ended_by_tune(trial, exc)
                        raise
                    _ended_by_tune(trial, None)
            finally:
                _left(done)

        return generator

    @functools.wraps(trainable)
    def function(config: Any) -> Any:
        done = _leaving()
        try:
            with _open(run, url, interval, sampler, config) as trial:
                try:
                    out = trainable(config)
                except BaseException as exc:
                    _ended_by_tune(trial, exc)
                    raise
                _ended_by_tune(trial, None)
                return out
        finally:
            _left(done)

    return function


def _track_class(
    cls: type[ray.tune.Trainable], run: str | None, url: str | None, interval: float, sampler: bool
) -> type[ray.tune.Trainable]:
    """A subclass of ``cls`` whose every trial (one per ``setup``, and one more per
    ``reset_config`` when Tune reuses the actor) is recorded from ``setup`` to ``cleanup``."""

    class Tracked(cls):  # type: ignore[valid-type,misc]
        _tunescope: Any = None

        def _tunescope_open(self, config: Any) -> None:
            trial = _open(run, url, interval, sampler, config, trainable=self)
            trial.__enter__()
            self._tunescope = trial

        def _tunescope_close(self, exc: BaseException | None) -> None:
            trial, self._tunescope = self._tunescope, None
            if trial is not None:
                _ended_by_tune(trial, exc)
                trial.__exit__(None if exc is None else type(exc), exc, None)

        def setup(self, config: Any) -> None:
            self._tunescope_open(config)
            try:
                super().setup(config)
            except BaseException as exc:
                self._tunescope_close(exc)
                raise

        def step(self) -> Any:
            try:
                result = super().step()
            except BaseException as exc:
                self._tunescope_close(exc)
                raise
            if isinstance(result, dict) and result.get("done"):
                # the trainable's own end, which Tune's result does not tell from its stop
                result = {**result, FINISHED: True}
            return result

        def reset_config(self, new_config: Any) -> bool:
            ok = bool(super().reset_config(new_config))
            if ok:  # the actor goes on with the next trial
                self._tunescope_close(None)
                self._tunescope_open(new_config)
            return ok

        def cleanup(self) -> None:
            try:
                super().cleanup()
            finally:
                self._tunescope_close(None)

    Tracked.__name__ = cls.__name__
    Tracked.__qualname__ = cls.__qualname__
    Tracked.__module__ = cls.__module__
    Tracked.__doc__ = cls.__doc__
    return Tracked


def _metrics(result: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """The trainable's numbers in a Tune result, nested dicts flattened as ``a/b``."""
    for k, v in result.items():
        name = f"{prefix}{k}"
        if not prefix and k in _SKIP:
            continue
        if isinstance(v, Mapping):
            yield from _metrics(v, f"{name}/")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            yield name, float(v)


def _budget(scheduler: Any) -> tuple[str, float] | None:
    """(attribute, max) at which ``scheduler`` stops a trial for having run its course:
    ASHA's and HyperBand's ``time_attr`` and ``max_t``."""
    if scheduler is None:
        return None
    attr = getattr(scheduler, "_time_attr", None)
    limit = getattr(scheduler, "_max_t", None)
    if limit is None:
        limit = getattr(scheduler, "_max_t_attr", None)
    if isinstance(attr, str) and isinstance(limit, (int, float)):
        return attr, float(limit)
    return None


def _reached(result: Mapping[str, Any], criteria: Mapping[str, Any]) -> bool:
    for name, limit in criteria.items():
        value = result.get(name)
        try:
            if value is not None and float(value) >= float(limit):
                return True
        except (TypeError, ValueError):
            continue
    return False


_NO_ERROR = "the trial failed in Tune"


def _tune_error(trial: Any) -> str | None:
    """Tune's error of a failed trial as ``Type: message``: the trainable's own exception
    (a ``RayTaskError``'s cause), else Tune's (``ActorDiedError``...); None if Tune kept
    none."""
    exc = None
    try:  # Tune has just written it on the driver; its copy in storage may lag behind
        path = trial.pickled_error_file
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                exc = ray.cloudpickle.load(f)
    except Exception:
        exc = None
    if isinstance(exc, BaseException):
        cause = getattr(exc, "cause", None)
        return ts.error_text(cause if isinstance(cause, BaseException) else exc)
    return None


class TunescopeCallback(Callback):
    """Tune's driver-side half (see the module doc): the reported metrics as scalars and how
    each trial ended, written by the trial's key. ``run`` and ``store`` as given to
    :func:`track` (they name the run of a trial the driver reaches the store for before its
    worker does); ``scheduler``: the Tune scheduler, if it has a budget (``max_t`` of ASHA or
    HyperBand): a trial it stops there has completed, not been pruned."""

    def __init__(
        self,
        *,
        run: str | None = None,
        store: str | None = None,
        scheduler: Any = None,
    ) -> None:
        self._run = run
        self._url = resolve_url(store)
        self._budget = _budget(scheduler)
        self._writer: Writer | None = None
        self._stopped: dict[str, str] = {}
        """Tune trial id -> the end Tune's stop decision means (completed or pruned)."""

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its run config
        state = dict(self.__dict__)
        state["_writer"] = None
        return state

    def _put(self, trial: Any, result: Mapping[str, Any] | None = None, **kw: Any) -> None:
        if ts.disabled():  # $TUNESCOPE_MODE=disabled: no store opened, no thread started
            return
        if self._writer is None:
            self._writer = Writer(self._url, name="ray tune callback")
        experiment = trial.experiment_dir_name
        key = trial_key(experiment, trial.trial_id)
        res = result if result is not None else (trial.last_result or {})
        pid = res.get("pid")
        spec = TrialSpec(
            key=key,
            run=self._run or experiment,
            name=str(trial),
            params=ts.jsonable(dict(trial.config or {})),
            host=str(res.get("hostname") or socket.gethostname()),
            pids=(int(pid),) if isinstance(pid, int) else (),
            start=time.time(),
            project=project_of(self._url),
            os_user=os_user(),
        )
        self._writer.put(Batch(key, spec=spec, **kw))

    @safe
    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        finished = bool(result.pop(FINISHED, False))  # results may be changed in place
        step = result.get("training_iteration")
        t = time.time()
        step = int(step) if isinstance(step, int) else None
        scalars = tuple((name, step, t, v) for name, v in _metrics(result))
        if result.get("done"):  # Tune's stop decision (a trainable's own end never gets here)
            budget = dict(trial.stopping_criterion or {})
            if self._budget is not None:
                budget[self._budget[0]] = self._budget[1]
            done = finished or _reached(result, budget)
            self._stopped[trial.trial_id] = "completed" if done else "pruned"
        if scalars:
            self._put(trial, result, scalars=scalars)

    @safe
    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        state = self._stopped.pop(trial.trial_id, "completed")
        self._put(trial, end=TrialEnd(state, time.time()))

    @safe
    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._stopped.pop(trial.trial_id, None)
        text = _tune_error(trial)
        # Tune's exception is the trainable's own, or why Tune lost the trial (its process or
        # node died: the sampler's guess, if it wrote first, gives way); without it the
        # worker's error, if it wrote one, is the better one
        known = text is not None
        end = TrialEnd("failed", time.time(), text or _NO_ERROR, only_if_running=not known)
        self._put(trial, end=end)

    @safe
    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close(CLOSE_WAIT_S)
