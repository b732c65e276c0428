"""Optuna: one line makes every trial of a study a tunescope trial of one run.

::

    from tunescope.integrations.optuna import track

    study = optuna.create_study(study_name="lora-search", pruner=optuna.pruners.MedianPruner())
    study.optimize(track(objective), n_trials=20)

Each call of the objective runs inside a tunescope trial named ``trial-<number>`` of the run
named ``run`` (default: the study's name) in ``store``; the objective's own SDK calls, and the
Hugging Face or Lightning callbacks it builds a trainer with, record into it. When the
objective returns, the trial's params are the Optuna trial's params (set as they are
suggested, so they are written when the objective ends) and its value is logged as the scalar
``eval/objective`` (``eval/objective_<i>`` for each value of a multi-objective study; for a
pruned trial the last value it reported, as Optuna keeps it; the Evaluation tab lists the
latest per trial). The study's direction is the trial param ``optuna.direction``
(``"minimize"`` or ``"maximize"``, a list of them for a multi-objective study; a search
parameter of that name would win over it); ``tunescope trials`` and ``report`` show both.
The trial ends:

* ``completed`` when the objective returns a value Optuna accepts;
* ``pruned`` when it raises ``optuna.TrialPruned`` (Optuna's state PRUNED, not a failure);
* ``failed`` when it raises anything else, or returns what Optuna fails the trial for (None,
  NaN, a value that is not a number, the wrong number of values).

``run`` may also be an open :class:`~tunescope.record.Run`, shared with other code. With
``study.optimize(n_jobs=k)`` each thread records its own trial. ``track`` also works as a
decorator: ``@track(run="search")``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, overload

import optuna

import tunescope.record as ts

__all__ = ["TrackedObjective", "track"]

Objective = Callable[[optuna.Trial], Any]


def _values(value: Any, n: int) -> list[float] | str:
    """The objective's value(s) as Optuna reads them, or why Optuna fails the trial."""
    seq = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    if len(seq) != n:
        return f"the objective returned {len(seq)} values for {n} objectives"
    out: list[float] = []
    for v in seq:
        try:
            f = float(v)
        except (TypeError, ValueError):
            return f"the objective returned {v!r}, not a number"
        if math.isnan(f):
            return "the objective returned nan"
        out.append(f)
    return out


def _last_reported(trial: optuna.Trial) -> float | None:
    """The last intermediate value a trial reported: Optuna's value of a pruned trial."""
    running = trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for frozen in running:
        if frozen.number == trial.number and frozen.last_step is not None:
            value: float = frozen.intermediate_values[frozen.last_step]
            return value
    return None


DIRECTION_PARAM = "optuna.direction"
"""The trial param of the study's direction(s) (``tunescope.analyze`` reads it by this name)."""


def _direction(trial: optuna.Trial) -> dict[str, str | list[str]]:
    """The study's direction as a trial param: a name, or one per objective."""
    names = [d.name.lower() for d in trial.study.directions]  # MINIMIZE -> "minimize"
    return {DIRECTION_PARAM: names[0] if len(names) == 1 else names}


class TrackedObjective:
    """An Optuna objective that records each call as a tunescope trial (see the module doc)."""

    def __init__(
        self,
        objective: Objective,
        *,
        run: str | ts.Run | None = None,
        store: str | None = None,
        interval: float = 1.0,
        sampler: bool = True,
    ) -> None:
        self.objective = objective
        self._run = run
        self._store = store
        self._interval = interval
        self._sampler = sampler

    def __call__(self, trial: optuna.Trial) -> Any:
        with ExitStack() as stack:
            if isinstance(self._run, ts.Run):
                run = self._run
            else:
                run = stack.enter_context(
                    ts.run(
                        self._run or trial.study.study_name,
                        store=self._store,
                        interval=self._interval,
                        sampler=self._sampler,
                    )
                )
            rec = stack.enter_context(
                run.trial(f"trial-{trial.number}", params={**_direction(trial), **trial.params})
            )
            try:
                value = self.objective(trial)
            except optuna.TrialPruned:
                rec.update_params(trial.params)
                rec.end_as("pruned")
                last = _last_reported(trial)
                if last is not None:
                    rec.log(None, **{"eval/objective": last})
                raise
            except BaseException:
                rec.update_params(trial.params)
                raise
            rec.update_params(trial.params)
            values = _values(value, len(trial.study.directions))
            if isinstance(values, str):
                rec.end_as("failed", values)
            elif len(values) == 1:
                rec.log(None, **{"eval/objective": values[0]})
            else:
                rec.log(None, **{f"eval/objective_{i}": v for i, v in enumerate(values)})
            return value


@overload
def track(
    objective: Objective,
    *,
    run: str | ts.Run | None = None,
    store: str | None = None,
    interval: float = 1.0,
    sampler: bool = True,
) -> TrackedObjective: ...


@overload
def track(
    objective: None = None,
    *,
    run: str | ts.Run | None = None,
    store: str | None = None,
    interval: float = 1.0,
    sampler: bool = True,
) -> Callable[[Objective], TrackedObjective]: ...


def track(
    objective: Objective | None = None,
    *,
    run: str | ts.Run | None = None,
    store: str | None = None,
    interval: float = 1.0,
    sampler: bool = True,
) -> TrackedObjective | Callable[[Objective], TrackedObjective]:
    """Wrap an Optuna objective so that each trial is recorded: ``study.optimize(
    track(objective), …)``. ``run``: the run's name (default: the study's name) or an open
    Run; ``store``, ``interval``, ``sampler`` as for :func:`tunescope.record.run`."""

    def wrap(fn: Objective) -> TrackedObjective:
        return TrackedObjective(fn, run=run, store=store, interval=interval, sampler=sampler)

    return wrap if objective is None else wrap(objective)
