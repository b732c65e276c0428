"""Optuna's distributed mode: worker processes that share one study in a PostgreSQL RDB
storage make one tunescope run (named after the study), each Optuna trial once, under its
study-wide number."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import PG_URL, pg_schema
from tunescope.store import open_store

pytestmark = [pytest.mark.ml, pytest.mark.postgres]

WORKERS = 3
TRIALS_EACH = 4

WORKER = """
import os, sys, time
import optuna
from tunescope.integrations.optuna import track

optuna.logging.set_verbosity(optuna.logging.WARNING)


def objective(trial):
    x = trial.suggest_float("x", -10.0, 10.0)
    trial.set_user_attr("pid", os.getpid())
    time.sleep(0.05)  # the workers' trials interleave
    if trial.number % 4 == 3:
        raise optuna.TrialPruned()
    return (x - 2) ** 2


study = optuna.load_study(study_name=sys.argv[1], storage=os.environ["OPTUNA_STORAGE"])
study.optimize(track(objective, sampler=False), n_trials=int(sys.argv[2]))
"""


@pytest.fixture
def optuna_storage() -> Iterator[str]:
    """An SQLAlchemy URL (psycopg 3 driver) on a fresh PostgreSQL schema, dropped after."""
    if PG_URL is None:
        pytest.skip("needs TUNESCOPE_TEST_POSTGRES (Optuna's distributed mode needs an RDB)")
    with pg_schema() as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_workers_sharing_a_study_make_one_run(
    optuna: Any, optuna_storage: str, tmp_path: Path
) -> None:
    name = f"dist-{uuid.uuid4().hex[:8]}"
    storage = optuna.storages.RDBStorage(optuna_storage)
    try:
        study = optuna.create_study(study_name=name, storage=storage)
        _run_workers(optuna, study, optuna_storage, tmp_path)
    finally:  # our connections closed before the schema is dropped
        storage.remove_session()
        storage.engine.dispose()


def _run_workers(optuna: Any, study: Any, optuna_storage: str, tmp_path: Path) -> None:
    name = study.study_name
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    with pg_schema() as store_url:
        env = {
            **os.environ,
            "OPTUNA_STORAGE": optuna_storage,
            "TUNESCOPE_STORE": store_url,
            "TUNESCOPE_QUIET": "1",
        }
        workers = [
            subprocess.Popen(
                [sys.executable, str(script), name, str(TRIALS_EACH)],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(WORKERS)
        ]
        for w in workers:
            _, err = w.communicate(timeout=180)
            assert w.returncode == 0, err[-3000:]

        theirs = {t.number: t for t in study.get_trials(deepcopy=False)}
        assert sorted(theirs) == list(range(WORKERS * TRIALS_EACH))
        assert len({t.user_attrs["pid"] for t in theirs.values()}) == WORKERS
        assert {t.state.name for t in theirs.values()} == {"COMPLETE", "PRUNED"}
        with open_store(store_url) as st:
            (run,) = st.list_runs()
            assert run.name == name
            ours = st.list_trials(run.id)
            assert len(ours) == len(theirs)  # one each: no duplicate, none lost
            assert {t.name for t in ours} == {f"trial-{n}" for n in theirs}
            for t in ours:
                other = theirs[int(t.name.removeprefix("trial-"))]
                assert t.params == {"optuna.direction": "minimize", **other.params}
                assert other.user_attrs["pid"] in t.pids  # recorded by the worker that ran it
                if other.state == optuna.trial.TrialState.PRUNED:
                    assert t.state == "pruned"
                else:
                    assert other.state == optuna.trial.TrialState.COMPLETE
                    assert t.state == "completed"
                    (value,) = st.scalars(t.id, "eval/objective")
                    assert value.value == pytest.approx(other.value)
