"""The SDK's public face, scalars and events round-trip, store selection, the environment a
trial sets, and what happens when the store fails under a running trial."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

import tunescope.record as ts
from fault_helpers import wait_for
from tunescope.errors import ConfigError, Rejected, StoreError, StoreUnavailable
from tunescope.record import _state
from tunescope.store import Batch, Store, TrialSpec, new_key, open_store, replay, spool_dir
from tunescope.store.produce import _writer

LOGGER = "tunescope.record"


def _warnings(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.WARNING and needle in r.getMessage()
    ]


@pytest.mark.ml
def test_log_checkpoint_mark_round_trip(
    sqlite_url: str, db: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    adapter = tmp_path / "adapter"
    (adapter / "sub").mkdir(parents=True)
    (adapter / "adapter_model.bin").write_bytes(b"x" * 1000)
    (adapter / "sub" / "config.json").write_bytes(b"{}" * 12)
    single = tmp_path / "ckpt.pt"
    single.write_bytes(b"y" * 333)
    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        ts.run("api", store=sqlite_url, sampler=False) as run,
        run.trial("t", params={"lora_r": 8, "lr": 3e-4}) as trial,
    ):
        assert ts.current_trial() is trial
        for step in range(1, 4):
            trial.log(step=step, loss=1.0 / step, lr=torch.tensor(3e-4))
            trial.log(step=step, **{"eval/accuracy": 0.5 + step / 10})
        trial.log(loss=float("nan"))
        trial.log(loss=float("inf"), note="text", other=None)
        trial.log(step=7, loss=0.1)
        trial.checkpoint(adapter, name="adapter")
        trial.checkpoint(single)
        trial.checkpoint(tmp_path / "missing")
        trial.mark("warmup done")
    trial.log(step=8, loss=0.2)  # after the trial: nothing, and no error
    assert ts.current_trial() is None
    assert trial.id is not None
    assert db.scalar_names(trial.id) == ["eval/accuracy", "loss", "lr"]
    loss = db.scalars(trial.id, "loss")
    assert [(s.step, s.value) for s in loss] == [
        (1, 1.0),
        (2, 0.5),
        (3, pytest.approx(1 / 3)),
        (7, pytest.approx(0.1)),
    ]
    assert [s.step for s in db.scalars(trial.id, "eval/accuracy")] == [1, 2, 3]
    assert db.scalars(trial.id, "lr")[0].value == pytest.approx(3e-4)
    # one warning per skipped name, never an exception
    assert len(_warnings(caplog, "log(loss=")) == 1
    assert len(_warnings(caplog, "log(note=")) == 1
    assert len(_warnings(caplog, "log(other=")) == 1
    ev = db.events(trial.id, 0, time.time() + 1).events
    assert ev is not None
    ck = [e for e in ev if e.kind == "checkpoint"]
    assert [(e.name, e.data) for e in ck] == [
        ("adapter", {"path": str(adapter), "bytes": 1024}),
        ("checkpoint", {"path": str(single), "bytes": 333}),
        ("checkpoint", {"path": str(tmp_path / "missing"), "bytes": None}),
    ]
    marks = [e for e in ev if e.kind == "mark"]
    assert [(m.name, m.duration) for m in marks] == [("warmup done", None)]


def test_default_names(sqlite_url: str, db: Store) -> None:
    with ts.run(store=sqlite_url, sampler=False) as run:
        assert run.name.startswith("run-") and len(run.name) == len("run-20250101-120000")
        with run.trial() as a, run.trial("x") as b:
            pass
        with run.trial("x") as c:  # a name the run already has: recorded under a new one
            pass
    assert (a.name, b.name, c.name) == ("trial-0", "x", "x-2")
    assert run.id is not None
    assert [t.name for t in db.list_trials(run.id)] == ["trial-0", "x", "x-2"]


def test_store_precedence_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env_db = tmp_path / "env.db"
    arg_db = tmp_path / "arg.db"
    monkeypatch.setenv("TUNESCOPE_STORE", str(env_db))
    with ts.run("p", sampler=False) as run:
        assert run.url == f"sqlite:///{env_db}"
    with ts.run("p", store=arg_db, sampler=False) as run:
        assert run.url == f"sqlite:///{arg_db}"
    # explicit bad URLs are user input: they raise at run(), before training starts
    with pytest.raises(ConfigError):
        ts.run(store="mysql://nope", sampler=False)
    with pytest.raises(StoreError):
        ts.run(store=tmp_path / "no" / "such" / "dir.db", sampler=False)
    monkeypatch.setenv("TUNESCOPE_STORE", str(tmp_path / "missing-dir" / "x.db"))
    with pytest.raises(StoreError):
        ts.run(sampler=False)
    with pytest.raises(ConfigError):
        ts.run(store=arg_db, interval=0)
    with pytest.raises(ConfigError):
        ts.run("  ", store=arg_db)
    # the default ./tunescope.db that cannot be opened: warn once, record nothing, run anyway
    monkeypatch.delenv("TUNESCOPE_STORE")
    cwd = tmp_path / "cwd"
    (cwd / "tunescope.db").mkdir(parents=True)  # the default path, not openable as a store
    monkeypatch.chdir(cwd)
    ran = False
    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        ts.run(sampler=False) as run,
        run.trial() as trial,
    ):
        trial.log(loss=1.0)
        trial.mark("x")
        assert list(trial.watch([1, 2])) == [1, 2]
        with trial.evaluation():
            ran = True
    assert ran and trial.id is None and not trial.recording
    assert len(_warnings(caplog, "cannot open the default store")) == 1


def test_environment_names_the_trial_and_is_restored(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TUNESCOPE_TRIAL_ID", raising=False)
    monkeypatch.setenv("TUNESCOPE_RUN_ID", "previous")
    with ts.run("env", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        assert trial.key is not None and os.environ["TUNESCOPE_TRIAL_KEY"] == trial.key
        assert os.environ["TUNESCOPE_TRIAL_ID"] == str(trial.id)
        assert os.environ["TUNESCOPE_RUN"] == "env"
        assert "TUNESCOPE_RUN_ID" not in os.environ  # an outer trial's ids are not ours
        assert os.environ["TUNESCOPE_STORE"] == sqlite_url
        # a nested run() in the process that set the variables does not join its own trial
        with ts.run("inner", store=sqlite_url, sampler=False) as inner:
            assert not inner.attached
    assert "TUNESCOPE_TRIAL_ID" not in os.environ and "TUNESCOPE_TRIAL_KEY" not in os.environ
    assert os.environ["TUNESCOPE_RUN_ID"] == "previous"


def test_attach_in_process_when_the_environment_names_a_trial(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a process started by `tunescope run -- CMD` sees: the variables, no SDK trial."""
    spec = TrialSpec(key=new_key(), run="cli", name="cli-trial", start=time.time())
    owner = db.get_trial(db.write(Batch(spec.key, spec=spec)))
    monkeypatch.setenv("TUNESCOPE_STORE", sqlite_url)
    monkeypatch.setenv("TUNESCOPE_RUN", "cli")
    monkeypatch.setenv("TUNESCOPE_TRIAL_KEY", spec.key)
    with ts.run("ignored", sampler=True) as run, run.trial("ignored too") as trial:
        assert run.attached and trial.attached and run.name == "cli"
        assert (trial.id, trial.name) == (owner.id, "cli-trial")
        trial.mark("from the script")
    assert db.get_trial(owner.id).state == "running"  # the owner decides the state
    ev = db.events(owner.id, 0, time.time() + 1).events
    assert ev is not None and [e.name for e in ev] == ["from the script"]
    assert db.list_series(owner.id) == []  # no sampler was started


class FlakyStore:
    """The trial writer's store, made to fail on demand like an unreachable database."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.down = False
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name == "close":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.down:
                raise StoreUnavailable("database is unreachable (test)")
            return attr(*args, **kwargs)

        return call


@pytest.mark.ml
def test_store_failure_mid_run_never_reaches_training(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    flaky: list[FlakyStore] = []

    def factory(url: str) -> Any:
        flaky.append(FlakyStore(open_store(url)))
        return flaky[-1]

    monkeypatch.setattr(_writer, "open_store", factory)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def steps(n: int) -> None:
        for _ in range(n):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            trial.log(loss=1.0)
            time.sleep(0.005)

    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        ts.run("flaky", store=sqlite_url, sampler=False, interval=0.5) as run,
        run.trial() as trial,
    ):
        steps(50)
        assert wait_for(lambda: trial.writer is not None and trial.writer.written >= 2)
        flaky[0].down = True
        before = flaky[0].calls
        steps(200)  # the store fails under several flushes
        assert wait_for(lambda: flaky[0].calls > before + 2)  # the writer kept trying
        flaky[0].down = False  # it comes back: what was kept is written
        steps(50)
    assert trial.id is not None
    assert db.get_trial(trial.id).state == "completed"
    ev = db.events(trial.id, 0, time.time() + 1, kinds=["optimizer_step"], limit=10_000).events
    assert ev is not None and [e.step for e in ev] == list(range(1, 301))
    assert len(db.scalars(trial.id, "loss")) == 300
    assert len(_warnings(caplog, "is unavailable")) == 1


def test_store_down_until_the_end_spools_and_loses_nothing(
    sqlite_url: str, db: Store, spool: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store never answers this process: the trial runs, its end returns, and everything
    it recorded (the trial itself, its state, every scalar) is in the spool, written by the
    next replay (the sampler's, or `tunescope sync`)."""

    def factory(url: str) -> Any:
        store = FlakyStore(open_store(url))
        store.down = True
        return store

    monkeypatch.setattr(_writer, "open_store", factory)
    with ts.run("down", store=sqlite_url, sampler=False, interval=0.5) as run, run.trial() as trial:
        for i in range(20):
            trial.log(step=i, loss=float(i))
        time.sleep(0.6)
    assert trial.id is None  # the store never answered
    assert db.list_runs() == [] or db.get_run("down").trials == 0
    stats = replay(sqlite_url, db.write, root=spool)
    assert stats.kept == 0 and stats.rejected == 0 and stats.written >= 2
    (info,) = db.list_trials(db.get_run("down").id)
    assert info.state == "completed" and info.key == trial.key
    assert [s.value for s in db.scalars(info.id)] == [float(i) for i in range(20)]


def test_rejected_batch_is_set_aside_not_retried(
    sqlite_url: str,
    db: Store,
    spool: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch the store proves wrong (Rejected) while it otherwise works is set aside (one
    warning), never retried; the batches after it land."""
    refused: list[Batch] = []

    def factory(url: str) -> Any:
        store = open_store(url)
        real = store.write

        def write(batch: Batch) -> int:
            if any(v == 1.0 for _n, _s, _t, v in batch.scalars):
                refused.append(batch)
                raise Rejected("constraint failed (test)")
            return real(batch)

        store.write = write  # type: ignore[method-assign]
        return store

    monkeypatch.setattr(_writer, "open_store", factory)
    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        ts.run("reject", store=sqlite_url, sampler=False, interval=0.5) as run,
        run.trial() as trial,
    ):
        trial.log(loss=1.0)
        assert wait_for(lambda: len(refused) == 1)
        trial.mark("kept")
        trial.log(loss=2.0)
    assert trial.id is not None
    assert len(refused) == 1  # no retry of a refused batch
    assert len(_warnings(caplog, "rejected a batch")) == 1
    ev = db.events(trial.id, 0, time.time() + 1).events
    assert ev is not None and [e.name for e in ev] == ["kept"]
    assert [s.value for s in db.scalars(trial.id)] == [2.0]
    aside = list((spool_dir(sqlite_url, spool) / "rejected").iterdir())
    assert len(aside) == 1 and refused[0].id.encode() in aside[0].read_bytes()


@pytest.mark.ml
def test_torch_cuda_memory_is_sampled_on_the_flusher(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in for CUDA (this machine has no GPU): the allocator stats of the devices the
    process uses become per-device series named by physical index."""
    import torch

    stats = {
        1: {
            "allocated_bytes.all.current": 2 * 2**30,
            "reserved_bytes.all.current": 3 * 2**30,
            "num_alloc_retries": 4,
        }
    }
    reads: list[str] = []

    def memory_stats(i: int) -> dict[str, int]:
        import threading

        reads.append(threading.current_thread().name)
        return stats.get(i, {})

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "memory_stats", memory_stats)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    with ts.run("cuda", store=sqlite_url, sampler=False, interval=0.5) as run, run.trial() as trial:
        time.sleep(1.2)
    assert trial.id is not None
    series = {(s.metric, s.device): s for s in db.list_series(trial.id)}
    assert set(series) == {
        ("torch.mem.allocated", "5"),
        ("torch.mem.reserved", "5"),
        ("torch.alloc_retries", "5"),
    }
    assert db.read_samples(series["torch.mem.reserved", "5"].id)[1][0] == 3 * 2**30
    assert db.read_samples(series["torch.alloc_retries", "5"].id)[1][0] == 4
    assert reads and all(name.startswith("tunescope-flush") for name in reads)


def test_an_internal_failure_in_a_call_logs_once_and_returns(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: object) -> None:
        raise RuntimeError("internal bug")

    with (
        caplog.at_level(logging.WARNING, logger=LOGGER),
        ts.run("guard", store=sqlite_url, sampler=False) as run,
        run.trial() as trial,
    ):
        monkeypatch.setattr(ts.Trial, "_events", broken)
        for _ in range(3):
            trial.mark("x")
            trial.checkpoint("nowhere")
            with trial.evaluation():
                pass
        assert list(trial.watch([1, 2, 3])) == [1, 2, 3]

        class Full:  # log's own guard (it has no wrapper): a buffer that fails inside
            def append(self, row: object) -> None:
                raise RuntimeError("internal bug")

        kept, trial._sink = trial._sink, Full().append
        for i in range(3):
            assert trial.log(step=i, loss=1.0) is None
        trial._sink = kept
        trial.log(step=9, loss=2.0)
    assert len(_warnings(caplog, "Trial.mark failed")) == 1
    assert len(_warnings(caplog, "Trial.checkpoint failed")) == 1
    assert len(_warnings(caplog, "Trial.log failed")) == 1
    assert [(s.step, s.value) for s in db.scalars(trial.id, "loss")] == [(9, 2.0)]


@pytest.mark.ml
def test_hook_is_installed_once(sqlite_url: str) -> None:
    import torch.optim.optimizer as optmod

    with ts.run("once", store=sqlite_url, sampler=False) as run:
        for _ in range(3):
            with run.trial():
                _state.ensure_hook()
    ours = [  # registered under torch.compiler.disable, which wraps it
        h
        for h in optmod._global_optimizer_post_hooks.values()
        if getattr(h, "__wrapped__", h) is _state.on_optimizer_step
    ]
    assert len(ours) == 1


def test_trial_outliving_its_run_and_entered_twice(sqlite_url: str, db: Store) -> None:
    run = ts.run("short-lived", store=sqlite_url, sampler=False)
    trial = run.trial().__enter__()
    run.close()  # the run's connection goes first
    trial.mark("still recorded")
    trial.__exit__(None, None, None)
    assert trial.id is not None
    assert db.get_trial(trial.id).state == "completed"
    with trial:  # a second time: a no-op, never an error
        trial.mark("ignored")
    ev = db.events(trial.id, 0, time.time() + 1).events
    assert ev is not None and [e.name for e in ev] == ["still recorded"]


def test_ctrl_c_while_the_trial_starts(
    sqlite_url: str, db: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunescope.record import _trial

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_trial, "Supervised", interrupted)
    with ts.run("interrupted", store=sqlite_url) as run:
        trial = run.trial()
        with pytest.raises(KeyboardInterrupt), trial:
            pytest.fail("the block must not run")
    assert ts.current_trial() is None and "TUNESCOPE_TRIAL_KEY" not in os.environ
    assert trial.id is not None
    assert (db.get_trial(trial.id).state, db.get_trial(trial.id).error) == (
        "failed",
        "KeyboardInterrupt",
    )
