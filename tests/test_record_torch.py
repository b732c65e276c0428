"""The SDK around a real torch training loop on CPU: optimizer steps, evaluations and the
trial's end state are recorded one for one."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

import tunescope.record as ts
from store_helpers import events_of as _events
from tunescope.record import _state
from tunescope.store import Store

if TYPE_CHECKING:
    import torch
    from torch import nn


@pytest.fixture(scope="module", name="torch")
def seeded_torch() -> Any:
    """torch, imported by the tests that use it (not at collection), seeded once."""
    import torch

    torch.manual_seed(0)
    return torch


def _model() -> nn.Module:
    from torch import nn

    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def _batches(n: int, size: int = 16) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    import torch

    for _ in range(n):
        x = torch.randn(size, 8)
        yield x, x.sum(dim=1, keepdim=True)


@pytest.mark.ml
def test_every_optimizer_step_and_evaluation_is_recorded(
    sqlite_url: str, db: Store, torch: Any
) -> None:
    from torch import nn

    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps = 0
    evals = 0
    with (
        ts.run("torch", store=sqlite_url, sampler=False) as run,
        run.trial(params={"lr": 1e-3}) as trial,
    ):
        assert _state.hook_installed()
        for epoch in range(3):
            for x, y in _batches(25):
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
            with trial.evaluation(), torch.no_grad():
                time.sleep(0.02)
                model(torch.randn(64, 8))
                evals += 1
            trial.log(step=steps, loss=loss.item(), epoch=epoch)
    assert trial.id is not None
    info = db.get_trial(trial.id)
    assert info.state == "completed" and info.error is None and info.end is not None
    assert info.params == {"lr": 1e-3}
    got = _events(db, trial.id, "optimizer_step")
    assert len(got) == steps == 75
    assert [e.step for e in got] == list(range(1, steps + 1))
    assert {e.name for e in got} == {"Adam"}
    assert all(info.start <= e.t <= info.end for e in got)
    ev = _events(db, trial.id, "evaluation")
    assert len(ev) == evals == 3
    assert all(e.name == "eval" and e.duration is not None and e.duration >= 0.02 for e in ev)
    # each evaluation ends before the next begins, the last before the trial ends
    ends = [e.t + (e.duration or 0.0) for e in ev]
    assert ends[0] <= ev[1].t and ends[1] <= ev[2].t and ends[2] <= info.end
    assert [s.value for s in db.scalars(trial.id, "epoch")] == [0.0, 1.0, 2.0]


@pytest.mark.ml
def test_two_optimizers_count_separately(sqlite_url: str, db: Store, torch: Any) -> None:
    from torch import nn

    gen, disc = _model(), _model()
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
    opt_d = torch.optim.AdamW(disc.parameters(), lr=0.01)
    with ts.run("gan", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        for i, (x, y) in enumerate(_batches(30)):
            loss_d = nn.functional.mse_loss(disc(x), y)
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            if i % 3 == 0:
                loss_g = nn.functional.mse_loss(gen(x), y)
                opt_g.zero_grad()
                loss_g.backward()
                opt_g.step()
    assert trial.id is not None
    got = _events(db, trial.id, "optimizer_step")
    by_name: dict[str, list[int | None]] = {}
    for e in got:
        by_name.setdefault(str(e.name), []).append(e.step)
    assert by_name == {"AdamW": list(range(1, 31)), "SGD": list(range(1, 11))}
    # the first optimizer to step carries no data; the other one is told apart by index
    assert {(e.name, None if e.data is None else e.data.get("optimizer")) for e in got} == {
        ("AdamW", None),
        ("SGD", 1),
    }


@pytest.mark.ml
def test_gradient_accumulation_counts_optimizer_steps_not_micro_batches(
    sqlite_url: str, db: Store, torch: Any
) -> None:
    from torch import nn

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    accumulate = 4
    calls = 0
    with ts.run("accum", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        for i, (x, y) in enumerate(trial.watch(_batches(40))):
            (nn.functional.mse_loss(model(x), y) / accumulate).backward()
            if (i + 1) % accumulate == 0:
                opt.step()
                opt.zero_grad()
                calls += 1
    assert trial.id is not None
    assert calls == 10
    assert [e.step for e in _events(db, trial.id, "optimizer_step")] == list(range(1, 11))
    assert len(_events(db, trial.id, "data_wait")) == 40


@pytest.mark.ml
def test_steps_outside_a_trial_are_not_recorded(sqlite_url: str, db: Store, torch: Any) -> None:
    from torch import nn

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with ts.run("outside", store=sqlite_url, sampler=False) as run:
        with run.trial() as first:
            for x, y in _batches(5):
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
        for x, y in _batches(7):  # between trials
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        with run.trial() as second:
            for x, y in _batches(3):
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    assert first.id is not None and second.id is not None
    assert [e.step for e in _events(db, first.id, "optimizer_step")] == [1, 2, 3, 4, 5]
    # the same optimizer counts again from 1 in a new trial
    assert [e.step for e in _events(db, second.id, "optimizer_step")] == [1, 2, 3]


@pytest.mark.ml
def test_exception_marks_the_trial_failed_and_propagates(
    sqlite_url: str, db: Store, torch: Any
) -> None:
    from torch import nn

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with ts.run("boom", store=sqlite_url, sampler=False) as run:
        trial = run.trial("doomed")
        with pytest.raises(RuntimeError, match="loss went NaN") as raised, trial:
            for i, (x, y) in enumerate(_batches(10)):
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                if i == 5:
                    raise RuntimeError("loss went NaN at step 6")
    assert type(raised.value) is RuntimeError  # unchanged
    assert trial.id is not None
    info = db.get_trial(trial.id)
    assert info.state == "failed"
    assert info.error == "RuntimeError: loss went NaN at step 6"
    assert info.end is not None
    assert len(_events(db, trial.id, "optimizer_step")) == 6  # flushed before the state


def test_keyboard_interrupt_marks_the_trial_failed(sqlite_url: str, db: Store) -> None:
    with ts.run("ctrl-c", store=sqlite_url, sampler=False) as run:
        trial = run.trial()
        with pytest.raises(KeyboardInterrupt), trial:
            raise KeyboardInterrupt
    assert trial.id is not None
    info = db.get_trial(trial.id)
    assert info.state == "failed" and info.error == "KeyboardInterrupt"


def test_system_exit_zero_completes(sqlite_url: str, db: Store) -> None:
    with ts.run("exit", store=sqlite_url, sampler=False) as run:
        ok, bad = run.trial(), run.trial()
        with pytest.raises(SystemExit), ok:
            raise SystemExit(0)
        with pytest.raises(SystemExit), bad:
            raise SystemExit(3)
    assert ok.id is not None and bad.id is not None
    assert db.get_trial(ok.id).state == "completed"
    assert (db.get_trial(bad.id).state, db.get_trial(bad.id).error) == ("failed", "SystemExit: 3")


@pytest.mark.ml
def test_the_hook_only_timestamps_and_appends(sqlite_url: str, torch: Any) -> None:
    """The optimizer hook runs no Python function and exactly two C calls per step, the
    timestamp and the buffer's append: no lock, log call or store write can slip into the
    training loop (bench/bench_record.py measures what a step costs)."""
    opt = torch.optim.SGD(_model().parameters(), lr=0.01)
    hook = _state.on_optimizer_step
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_qualname)
        elif event == "c_call" and frame.f_code is hook.__code__:
            calls.append(f"C {arg.__name__}")

    with ts.run("cheap", store=sqlite_url, sampler=False) as run, run.trial():
        gc.disable()  # no finalizer may run inside the profiled calls
        sys.setprofile(profile)
        try:
            for _ in range(100):
                hook(opt, (), {})
        finally:
            sys.setprofile(None)
            gc.enable()
    # the timestamp is time.monotonic(): the flusher puts it on the trial's clock
    assert calls == ["on_optimizer_step", "C monotonic", "C append"] * 100


@pytest.mark.ml
def test_log_of_a_tensor_is_read_off_the_training_thread(
    sqlite_url: str, db: Store, caplog: pytest.LogCaptureFixture, torch: Any
) -> None:
    """``trial.log(loss=tensor)`` never reads the tensor in the caller's thread (on a GPU that
    read waits for the device): the flusher thread does, and stores the value the tensor had
    when it was logged, even if training changes it in place afterwards. A tensor that cannot
    be read is dropped with one warning, and the other scalars are kept."""

    class _Spy(torch.Tensor):
        """A tensor that notes which thread reads it as a number (``float()`` or ``.item()``)."""

        readers: list[str] = []  # noqa: RUF012 - shared on purpose
        broken = False

        @classmethod
        def __torch_function__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func in (torch.Tensor.__float__, torch.Tensor.item):
                _Spy.readers.append(threading.current_thread().name)
                if cls.broken:
                    raise RuntimeError("device lost")
            return super().__torch_function__(func, types, args, kwargs or {})

    class _Broken(_Spy):
        broken = True

    _Spy.readers.clear()
    w = torch.tensor(1.25, requires_grad=True)
    with ts.run("lazy", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        for step in range(1, 4):
            loss = (w * 2 * step).as_subclass(_Spy)  # requires grad: log must detach it
            acc = torch.tensor(float(step)).as_subclass(_Spy)
            trial.log(step=step, loss=loss, acc=acc)
            acc.add_(100.0)  # an in-place change after log() does not reach the store
            assert _Spy.readers == []  # nothing read in the training thread
            trial.log(step=step, bad=torch.tensor(1.0).as_subclass(_Broken))
            trial.log(step=step, nan=torch.tensor(float("nan")), vec=torch.ones(3))
        assert threading.current_thread().name not in _Spy.readers
    assert _Spy.readers and all(r.startswith("tunescope-flush") for r in _Spy.readers)
    assert trial.id is not None
    got = {(s.name, s.step): s.value for s in db.scalars(trial.id)}
    assert got == {
        **{("loss", s): 2.5 * s for s in (1, 2, 3)},
        **{("acc", s): float(s) for s in (1, 2, 3)},
    }
    warned = [r.getMessage() for r in caplog.records if "tunescope: log(" in r.getMessage()]
    assert len([m for m in warned if "bad" in m and "device lost" in m]) == 1
    assert len([m for m in warned if "nan=" in m and "not a finite" in m]) == 1
    assert len([m for m in warned if "vec=" in m and "3 elements" in m]) == 1
