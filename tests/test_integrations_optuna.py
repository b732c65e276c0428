"""Optuna: every trial of a study is a tunescope trial of one run, with Optuna's params, its
state (pruned is not failed) and its value."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from typing import Any

import pytest

import tunescope.record as ts
from tunescope.store import open_store

pytestmark = pytest.mark.ml


def _objective(trial: Any) -> float:
    import optuna

    x = trial.suggest_float("x", -10.0, 10.0)
    k = trial.suggest_int("k", 1, 3)
    opt = trial.suggest_categorical("optimizer", ["adamw", "sgd"])
    for step in range(3):
        trial.report((x - 2) ** 2 + step, step)
        if trial.number == 2 and trial.should_prune():
            raise optuna.TrialPruned()
    return (x - 2) ** 2 + k + (opt == "sgd")


def test_three_trials_one_pruned(sqlite_url: str, optuna: Any) -> None:
    from tunescope.integrations.optuna import track

    study = optuna.create_study(
        study_name="quadratic",
        sampler=optuna.samplers.RandomSampler(seed=0),
        # prunes any trial past its first report once one trial has completed
        pruner=optuna.pruners.ThresholdPruner(upper=-1.0, n_warmup_steps=0),
    )
    study.optimize(track(_objective, store=sqlite_url, sampler=False), n_trials=3)
    assert [t.state for t in study.trials] == [
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.COMPLETE,
        optuna.trial.TrialState.PRUNED,
    ]
    with open_store(sqlite_url) as st:
        trials = st.list_trials(st.get_run("quadratic").id)
        assert [t.name for t in trials] == ["trial-0", "trial-1", "trial-2"]
        assert [t.state for t in trials] == ["completed", "completed", "pruned"]
        assert all(t.error is None and t.end is not None for t in trials)
        for ours, theirs in zip(trials, study.trials, strict=True):
            # the study's direction rides along as a param of its own name
            assert ours.params == {"optuna.direction": "minimize", **theirs.params}
            values = [s.value for s in st.scalars(ours.id, "eval/objective")]
            assert values == ([] if theirs.value is None else [theirs.value])


def test_failures_and_a_value_optuna_rejects_end_failed(sqlite_url: str, optuna: Any) -> None:
    from tunescope.integrations.optuna import track

    def objective(trial: Any) -> float:
        trial.suggest_int("n", 0, 10)
        if trial.number == 0:
            raise ValueError("diverged")
        return math.nan

    study = optuna.create_study(study_name="bad")
    study.optimize(
        track(objective, store=sqlite_url, sampler=False), n_trials=2, catch=(ValueError,)
    )
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] * 2
    with open_store(sqlite_url) as st:
        trials = st.list_trials(st.get_run("bad").id)
        assert [(t.state, t.error) for t in trials] == [
            ("failed", "ValueError: diverged"),
            ("failed", "the objective returned nan"),
        ]
        assert [set(t.params) for t in trials] == [{"n", "optuna.direction"}] * 2


def test_multi_objective_values_and_a_shared_run(sqlite_url: str, optuna: Any) -> None:
    from tunescope.integrations.optuna import track

    @track(run=None)
    def unused(trial: Any) -> float:  # the decorator form
        return 0.0

    assert callable(unused)
    with ts.run("shared", store=sqlite_url, sampler=False) as run:
        study = optuna.create_study(directions=["minimize", "maximize"])

        def objective(trial: Any) -> tuple[float, float]:
            a = trial.suggest_float("a", 0.0, 1.0)
            assert ts.current_trial() is not None  # the objective's SDK calls land here
            return a, 1.0 - a

        study.optimize(track(objective, run=run), n_trials=2)
    with open_store(sqlite_url) as st:
        trials = st.list_trials(st.get_run("shared").id)
        assert len(trials) == 2
        for ours, theirs in zip(trials, study.trials, strict=True):
            assert ours.state == "completed"
            assert ours.params["optuna.direction"] == ["minimize", "maximize"]
            got = [st.scalars(ours.id, f"eval/objective_{i}")[0].value for i in (0, 1)]
            assert got == pytest.approx(theirs.values)


def test_the_sampler_watches_each_trial(sqlite_url: str, optuna: Any) -> None:
    from tunescope.integrations.optuna import track

    def objective(trial: Any) -> float:
        trial.suggest_float("x", 0.0, 1.0)
        time.sleep(1.5)
        return 0.0

    study = optuna.create_study(study_name="watched")
    study.optimize(track(objective, store=sqlite_url, interval=0.5), n_trials=1)
    with open_store(sqlite_url) as st:
        (trial,) = st.list_trials(st.get_run("watched").id)
        assert trial.state == "completed"
        assert st.list_series(trial.id, "cpu.mem")


def test_it_imports_its_own_framework_only() -> None:
    others = ("torch", "transformers", "lightning")
    mod = "tunescope.integrations.optuna"
    code = f"import sys, {mod}\nprint([m for m in {others!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
