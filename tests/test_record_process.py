"""Across processes: children join the parent's trial, torch is never imported for us, the
sampler launcher (with stand-in samplers for its failure modes), and the real sampler."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tunescope.record as ts
from tunescope.store import Batch, Store, TrialSpec, new_key

LOGGER = "tunescope.record"


def _python(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


CHILD = """
    import sys, torch
    import tunescope.record as ts

    trial = ts.current_trial()
    assert trial is not None and trial.attached, trial
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
    trial.mark("from the child")
    with ts.run("ignored") as run, run.trial() as again:
        assert again.id == trial.id and run.attached
        again.log(step=1, child_loss=0.5)
    print(trial.id)
"""


@pytest.mark.ml
def test_a_child_process_joins_the_trial(sqlite_url: str, db: Store) -> None:
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(model.parameters())
    with ts.run("parent", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        for _ in range(3):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
        child = _python(CHILD)
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == str(trial.id)
        assert trial.id is not None
        assert db.get_trial(trial.id).state == "running"  # the child changed no state
    assert db.get_trial(trial.id).state == "completed"
    assert run.id is not None
    assert len(db.list_trials(run.id)) == 1
    ev = db.events(trial.id, 0, time.time() + 1).events
    assert ev is not None
    steps = sorted((str(e.name), e.step) for e in ev if e.kind == "optimizer_step")
    assert steps == [("Adam", 1), ("Adam", 2), ("Adam", 3)] + [("SGD", k) for k in range(1, 6)]
    assert [e.name for e in ev if e.kind == "mark"] == ["from the child"]
    assert [s.value for s in db.scalars(trial.id, "child_loss")] == [0.5]


def test_torch_is_never_imported_for_us(sqlite_url: str) -> None:
    code = """
        import sys
        import tunescope.record as ts
        from tunescope.record import _state

        with ts.run("no-torch", store=sys.argv[1], sampler=False) as run, \\
                run.trial() as trial:
            for _ in trial.watch(range(3)):
                trial.log(loss=1.0)
            with trial.evaluation():
                trial.mark("m")
            assert ts.current_trial() is trial
        assert "torch" not in sys.modules, "torch was imported"
        assert not _state.hook_installed()
        print("ok")
    """
    out = _python(code, sqlite_url)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


FAKE_SAMPLER = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
mode = os.environ["FAKE_SAMPLER_MODE"]
log = os.environ["FAKE_SAMPLER_LOG"]
with open(log, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
    f.write("store " + os.environ.get("TUNESCOPE_STORE", "-") + "\\n")
if mode == "die":
    print("probe exploded", file=sys.stderr)
    sys.exit(3)
if mode == "slow":
    time.sleep(1.0)
print("ready", flush=True)
if mode == "deaf":
    time.sleep(60)
line = sys.stdin.readline()
with open(log, "a") as f:
    f.write("got " + (line.strip() or "EOF") + "\\n")
"""


@pytest.fixture
def fake_sampler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fake_sampler.py").write_text(FAKE_SAMPLER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    log = tmp_path / "sampler.log"
    monkeypatch.setenv("FAKE_SAMPLER_LOG", str(log))
    return log


SPEC = TrialSpec(key="k" * 32, run="r", start=1.0)


def test_launcher_protocol(fake_sampler: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler's command line names the trial by key and carries no store URL (it may
    hold a password): the store comes in the environment, with the trial's spec."""
    monkeypatch.setenv("FAKE_SAMPLER_MODE", "ok")
    url = "postgresql://u:secret@db.example/x"
    handle = ts.start_sampler(url, SPEC, 1234, 0.5, ready_timeout=30, module="fake_sampler")
    assert handle is not None and handle.ready.is_set() and handle.poll() is None
    assert "secret" not in " ".join(handle.proc.args)  # type: ignore[arg-type]
    assert handle.stop() == 0
    assert handle.stop() == 0  # idempotent
    assert fake_sampler.read_text().splitlines() == [
        f"--trial-key {SPEC.key} --pid 1234 --interval 0.5",
        f"store {url}",
        "got stop",
    ]


def test_launcher_sampler_that_dies(
    fake_sampler: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FAKE_SAMPLER_MODE", "die")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert (
            ts.start_sampler("x.db", SPEC, 1, 1.0, ready_timeout=30, module="fake_sampler") is None
        )
    msgs = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(msgs) == 1
    assert "exited with code 3" in msgs[0] and "probe exploded" in msgs[0]


def test_launcher_missing_module(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert (
            ts.start_sampler("x.db", SPEC, 1, 1.0, ready_timeout=30, module="no_such_sampler_mod")
            is None
        )
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1


def test_launcher_slow_and_deaf_samplers(
    fake_sampler: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting waits no longer than asked; stopping never kills a sampler that holds data:
    a deaf one is left to finish by itself."""
    monkeypatch.setenv("FAKE_SAMPLER_MODE", "slow")
    slow = ts.start_sampler("x.db", SPEC, 1, 1.0, ready_timeout=0.2, module="fake_sampler")
    assert slow is not None and not slow.ready.is_set()  # kept: it is still starting
    assert slow.ready.wait(10)
    assert slow.stop() == 0
    monkeypatch.setenv("FAKE_SAMPLER_MODE", "deaf")
    deaf = ts.start_sampler("x.db", SPEC, 1, 1.0, module="fake_sampler")
    assert deaf is not None
    try:
        assert deaf.stop(timeout=0.5) is None
        assert deaf.poll() is None  # still alive: never killed with data in hand
    finally:
        deaf.proc.kill()
        assert deaf.wait(10) == -signal.SIGKILL


def test_with_the_real_sampler(sqlite_url: str, db: Store) -> None:
    interval = 1.0
    with ts.run("sampled", store=sqlite_url, interval=interval) as run, run.trial() as trial:
        end = time.time() + 2.5
        x = 0
        while time.time() < end:  # some CPU work to see
            x += 1
    assert trial.id is not None
    info = db.get_trial(trial.id)
    assert info.state == "completed" and info.interval == interval
    series = {s.metric: s for s in db.list_series(trial.id) if s.device is None}
    assert {"cpu.util", "cpu.mem"} <= set(series)
    for metric in ("cpu.util", "cpu.mem"):  # how soon the first comes: make bench-sampler
        t, _ = db.read_samples(series[metric].id)
        assert len(t) >= 2, metric
        assert all(info.start <= x <= info.start + 10 for x in t)
    assert float(db.read_samples(series["cpu.mem"].id)[1].max()) > 10e6  # a python process


def test_sampler_marks_the_trial_failed_when_training_is_killed(sqlite_url: str, db: Store) -> None:
    code = """
        import os, signal, sys, time
        import tunescope.record as ts

        run = ts.run("killed", store=sys.argv[1], interval=0.5)
        trial = run.trial().__enter__()
        print(trial.id, flush=True)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    """
    out = _python(code, sqlite_url)
    assert out.returncode == -signal.SIGKILL, out.stderr
    trial_id = int(out.stdout.strip())
    deadline = time.time() + 20
    while db.get_trial(trial_id).state == "running" and time.time() < deadline:
        time.sleep(0.2)
    assert db.get_trial(trial_id).state == "failed"


def test_tunescope_run_environment_then_sdk(sqlite_url: str, db: Store) -> None:
    """A script using the SDK under a trial owned by another process (as `tunescope run`
    starts it) records into that trial and leaves its state alone."""
    spec = TrialSpec(key=new_key(), run="cli", name="cmd", start=time.time(), interval=0.5)
    owner = db.get_trial(db.write(Batch(spec.key, spec=spec)))
    env = dict(os.environ, **ts.trial_env(sqlite_url, "cli", spec.key, 0.5))
    code = """
        import tunescope.record as ts
        with ts.run() as run, run.trial() as trial:
            for _ in trial.watch(range(5)):
                pass
            trial.log(step=5, loss=0.25)
        print(trial.id)
    """
    out = _python(code, env=env)
    assert out.returncode == 0 and out.stdout.strip() == str(owner.id), out.stderr
    assert db.get_trial(owner.id).state == "running"
    assert [s.value for s in db.scalars(owner.id, "loss")] == [0.25]
    ev = db.events(owner.id, 0, time.time() + 1, kinds=["data_wait"]).events
    assert ev is not None and [e.step for e in ev] == [0, 1, 2, 3, 4]


def test_a_forked_child_joins_through_the_environment(sqlite_url: str, db: Store) -> None:
    code = """
        import os, sys
        import tunescope.record as ts

        with ts.run("fork", store=sys.argv[1], sampler=False) as run, run.trial() as trial:
            pid = os.fork()
            if pid == 0:
                joined = ts.current_trial()
                ok = joined is not None and joined.attached and joined.id == trial.id
                if ok:
                    joined.mark("forked")
                    joined.__exit__(None, None, None)
                os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            assert ts.current_trial() is trial
            trial.mark("parent")
        print(trial.id)
    """
    out = _python(code, sqlite_url)
    assert out.returncode == 0, out.stderr
    trial_id = int(out.stdout.strip())
    ev = db.events(trial_id, 0, time.time() + 1, kinds=["mark"]).events
    assert ev is not None and sorted(str(e.name) for e in ev) == ["forked", "parent"]
    assert db.get_trial(trial_id).state == "completed"
