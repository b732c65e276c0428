"""What the SDK offers integrations: explicit optimizer steps with the hook off, late params,
evaluations reported afterwards, checkpoint steps, and the end states (pruned, end_as); and
a step the gradient scaler skips is no step."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

import tunescope.record as ts
from store_helpers import events_of as _events
from tunescope.store import Store

if TYPE_CHECKING:
    import torch
    from torch import nn


def _step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    import torch

    loss = model(torch.randn(4, 3)).sum()
    opt.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()


@pytest.mark.ml
def test_with_the_hook_off_only_explicit_steps_count(sqlite_url: str, db: Store) -> None:
    import torch
    from torch import nn

    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ts.run("steps", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        assert trial.auto_optimizer_steps
        _step(model, opt)  # hooked: step 1
        trial.auto_optimizer_steps = False
        for k in (10, 20, 30):
            for _ in range(2):  # micro-batches: the hook would see each optimizer.step()
                _step(model, opt)
            trial.optimizer_step(k, "SGD")
        trial.auto_optimizer_steps = True
        _step(model, opt)  # hooked again: step 2 of this optimizer
        time.sleep(0.6)  # a flush period, for the throughput sample
    assert trial.id is not None
    got = [(e.step, e.name) for e in _events(db, trial.id, "optimizer_step")]
    assert sorted(got, key=lambda s: s[0] or 0) == [
        (1, "SGD"),
        (2, "SGD"),
        (10, "SGD"),
        (20, "SGD"),
        (30, "SGD"),
    ]
    assert db.list_series(trial.id, "train.throughput")


@pytest.mark.ml
def test_a_step_the_grad_scaler_skips_is_not_recorded(sqlite_url: str, db: Store) -> None:
    import torch
    from torch import nn

    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with ts.run("scaler", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        for bad in (False, True, False):
            loss = model(torch.randn(4, 3)).sum() * (float("inf") if bad else 1.0)
            opt.zero_grad()
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            scaler.step(opt)
            scaler.update()
    assert trial.id is not None
    assert [e.step for e in _events(db, trial.id, "optimizer_step")] == [1, 2]


def test_params_evaluations_and_checkpoint_steps(sqlite_url: str, db: Store) -> None:
    with ts.run("late", store=sqlite_url, sampler=False) as run:
        with run.trial("a", params={"lr": 0.1}) as trial:
            trial.update_params({"rank": 8, "lr": 0.2})
            trial.record_evaluation("eval", time.time() - 2.0, 1.5, step=40)
            trial.checkpoint(__file__, name="adapter", step=40)
            assert trial.params == {"lr": 0.2, "rank": 8}
        trial.update_params({"after": True})  # once ended, still written
    assert trial.id is not None
    assert db.get_trial(trial.id).params == {"lr": 0.2, "rank": 8, "after": True}
    (ev,) = _events(db, trial.id, "evaluation")
    assert (ev.name, ev.step, ev.duration) == ("eval", 40, 1.5)
    (ck,) = _events(db, trial.id, "checkpoint")
    assert (ck.name, ck.step) == ("adapter", 40) and ck.data is not None and ck.data["bytes"] > 0


@pytest.mark.ml
def test_end_states(sqlite_url: str, db: Store) -> None:
    import optuna

    with ts.run("ends", store=sqlite_url, sampler=False) as run:
        with pytest.raises(optuna.TrialPruned), run.trial("pruned-by-exception"):
            raise optuna.TrialPruned()
        with run.trial("pruned-by-call") as t:
            t.end_as("pruned")
        with pytest.raises(KeyError), run.trial("pruned-then-raised") as t:
            t.end_as("pruned")
            raise KeyError("stop")
        with run.trial("failed-by-call") as t:
            t.end_as("failed", "returned nan")
        with run.trial("bad-state") as t:
            t.end_as("lost")  # not a way to end: logged, ignored
        run_id = run.id
    assert run_id is not None
    got = {t.name: (t.state, t.error) for t in db.list_trials(run_id)}
    assert got == {
        "pruned-by-exception": ("pruned", None),
        "pruned-by-call": ("pruned", None),
        "pruned-then-raised": ("pruned", None),
        "failed-by-call": ("failed", "returned nan"),
        "bad-state": ("completed", None),
    }


def test_a_given_key_and_a_deferred_end(sqlite_url: str, db: Store) -> None:
    """A trial entered under a key another process also writes by: the store knows it by that
    key, and a deferred end gives way to an end already written there (a deferred end of a
    trial still running is written as any end)."""
    from tunescope.store import Batch, TrialEnd, Writer

    with ts.run("keys", store=sqlite_url, sampler=False) as run:
        with run.trial("stopped-elsewhere", key="elsewhere-1") as t:
            other = Writer(sqlite_url)  # the other process: it ends the trial first
            other.put(Batch("elsewhere-1", end=TrialEnd("pruned", time.time())))
            assert other.close(5.0)
            t.end_as("completed", defer=True)
        with run.trial("ended-here", key="here-1") as t:
            t.end_as("completed", defer=True)
            t.mark("first")
        with run.trial("ended-here", key="here-1") as t:  # the same key: the same trial
            t.mark("again")
        run_id = run.id
    assert run_id is not None and len(db.list_trials(run_id)) == 2
    assert [e.name for e in _events(db, db.trial_by_key("here-1").id, "mark")] == [
        "first",
        "again",
    ]
    assert db.trial_by_key("elsewhere-1").name == "stopped-elsewhere"
    assert db.trial_by_key("elsewhere-1").state == "pruned"
    assert db.trial_by_key("here-1").state == "completed"
