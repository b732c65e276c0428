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

* :func:`track` wraps a function trainable. In the Ray worker process that runs a trial it
  opens a tunescope trial of the run ``run`` (default: the Tune experiment's name) named as
  Tune names the trial, with the trial's config as params (values as the SDK keeps them:
  JSON values, others as their ``str``), and starts its sampler there: the hardware of that
  worker's process tree on that node. The function's own SDK calls (``ts.current_trial()``)
  and torch's optimizer steps record into it.
* :class:`TunescopeCallback`, in ``RunConfig(callbacks=[...])``, runs in the driver. It writes
  the metrics of each ``tune.report`` / ``train.report`` (numbers only, nested dicts as
  ``a/b``, Tune's own bookkeeping keys left out) as scalars at the ``training_iteration``
  step, and how each trial ended. The driver writes the end because Ray may kill a trial's
  process before the trial's own code has run to its end.

Both name the trial by the same key, derived from the experiment's name and Tune's trial id
(:func:`trial_key`); a restored experiment (``Tuner.restore``) records into the same trials.

How a trial ends:

* ``completed``: its function returned; or Tune stopped it once it reached its budget: the
  run's ``stop`` criteria (``RunConfig(stop={"training_iteration": 20})``) or, for the
  ``scheduler`` given to the callback, its ``max_t`` (ASHA, HyperBand);
* ``pruned``: Tune stopped it before that (the scheduler, e.g. ASHA's early stopping, or a
  ``Stopper``): Tune shows such a trial ``TERMINATED`` like a finished one;
* ``failed``: its function raised (the error as ``Type: message``), or Tune lost it (its
  process or node died), with Tune's error.

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

import functools
import hashlib
import inspect
import math
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

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

CLOSE_WAIT_S = 5.0
"""Longest the callback waits at the experiment's end for its last writes (the rest is
spooled, for ``tunescope sync``)."""


def trial_key(experiment: str, trial_id: str) -> str:
    """The tunescope key of a Tune trial: the same in the worker and in the driver."""
    digest = hashlib.sha256(f"{experiment}\0{trial_id}".encode()).hexdigest()
    return f"ray-{digest[:32]}"


def _open(
    run: str | None, store: str | None, interval: float, sampler: bool, config: Any
) -> AbstractContextManager[Any]:
    """The trial of the Tune trial this process runs (entered by the caller), or a no-op."""
    try:
        ctx = ray.tune.get_context()
        experiment = ctx.get_experiment_name()
        key = trial_key(experiment, ctx.get_trial_id())
        params = dict(config) if isinstance(config, Mapping) else {}
        r = ts.run(run or experiment, store=store, interval=interval, sampler=sampler)
        return r.trial(ctx.get_trial_name(), params=params, key=key)
    except Exception as exc:
        LOG.warning(
            "tunescope: cannot record this Tune trial (%s: %s); it trains unrecorded",
            type(exc).__name__,
            exc,
        )
        return nullcontext()


def _ended_by_tune(trial: Any, exc: BaseException | None) -> None:
    """Set how the trial ends as this process sees it. Deferred, so that the driver's word
    (pruned or completed, from the scheduler's decision) wins whatever lands first: Tune
    stops a function trainable by raising ``SystemExit(0)`` out of ``report``."""
    if not isinstance(trial, ts.Trial):
        return
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
        trial.end_as("completed", defer=True)


def track(
    trainable: Callable[..., Any],
    *,
    run: str | None = None,
    store: str | None = None,
    interval: float = 1.0,
    sampler: bool = True,
) -> Callable[..., Any]:
    """Wrap a Tune function trainable (``def train_fn(config)``, a generator one too) so that
    each of its trials is recorded (see the module doc). ``run``: the run's name (default:
    the experiment's); ``store``, ``interval``, ``sampler`` as for
    :func:`tunescope.record.run`. Raises ConfigError for a bad ``interval`` (here, on the
    driver); the wrapper keeps the function's name, signature and Tune attributes
    (``tune.with_resources``)."""
    if inspect.isclass(trainable):
        raise TypeError(
            "tunescope.integrations.ray.track wraps a function trainable, not a class: call "
            "the SDK from the class's setup/step/cleanup instead"
        )
    if not (isinstance(interval, (int, float)) and math.isfinite(interval) and interval > 0):
        raise ConfigError(f"interval must be a positive number of seconds, not {interval!r}")
    url = None if store is None else str(store)

    if inspect.isgeneratorfunction(trainable):

        @functools.wraps(trainable)
        def generator(config: Any) -> Iterator[Any]:
            with _open(run, url, interval, sampler, config) as trial:
                try:
                    yield from trainable(config)
                except BaseException as exc:
                    _ended_by_tune(trial, exc)
                    raise
                _ended_by_tune(trial, None)

        return generator

    @functools.wraps(trainable)
    def function(config: Any) -> Any:
        with _open(run, url, interval, sampler, config) as trial:
            try:
                out = trainable(config)
            except BaseException as exc:
                _ended_by_tune(trial, exc)
                raise
            _ended_by_tune(trial, None)
            return out

    return function


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


class TunescopeCallback(Callback):
    """Tune's driver-side half (see the module doc): the reported metrics as scalars and how
    each trial ended, written by the trial's key. ``run`` and ``store`` as given to
    :func:`track` (they name the run of a trial the driver reaches the store for before its
    worker does); ``scheduler``: the Tune scheduler, whose ``max_t`` is the budget a trial
    it stops there completed."""

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
        step = result.get("training_iteration")
        t = time.time()
        step = int(step) if isinstance(step, int) else None
        scalars = tuple((name, step, t, v) for name, v in _metrics(result))
        if result.get("done"):  # Tune's stop decision (a trainable's own end never gets here)
            budget = dict(trial.stopping_criterion or {})
            if self._budget is not None:
                budget[self._budget[0]] = self._budget[1]
            self._stopped[trial.trial_id] = "completed" if _reached(result, budget) else "pruned"
        if scalars:
            self._put(trial, result, scalars=scalars)

    @safe
    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        state = self._stopped.pop(trial.trial_id, "completed")
        self._put(trial, end=TrialEnd(state, time.time()))

    @safe
    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._stopped.pop(trial.trial_id, None)
        err = trial.get_error() if hasattr(trial, "get_error") else None
        text = ts.error_text(err) if isinstance(err, BaseException) else "the trial failed in Tune"
        # deferred: the worker's own error (the function's exception) is the better one
        self._put(trial, end=TrialEnd("failed", time.time(), text, only_if_running=True))

    @safe
    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close(CLOSE_WAIT_S)
