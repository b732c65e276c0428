"""Ray Tune on a real two-node local cluster: every Tune trial is a tunescope trial, sampled on
the node that ran it, with Tune's metrics, its optimizer steps, its config and how it ended
(completed, pruned by ASHA, failed), as Tune itself saw it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tunescope.store import open_store

pytestmark = [pytest.mark.ml, pytest.mark.slow]

ITERATIONS = 6
"""Each trial's budget: its function's loop, and ASHA's max_t."""


def _train(config: dict[str, Any]) -> None:
    """A tiny torch fit that also uses the SDK; level -1 raises before its first report."""
    import ray
    import torch
    from ray import tune

    import tunescope.record as ts

    if config["level"] < 0:
        raise ValueError("diverged")
    node = ray.get_runtime_context().get_node_id()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    trial = ts.current_trial()
    assert trial is not None and trial.recording
    for i in trial.watch(range(ITERATIONS)):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        # nested metrics flatten as a/b; a string is Tune's business, not a scalar
        tune.report({"loss": config["level"] + 1.0 / (i + 1), "extra": {"i": i}, "node": node})


@pytest.fixture
def cluster(spool: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A head and one worker node of one CPU each; the store reaches the workers through
    $TUNESCOPE_STORE (set before the nodes start, as `ray start` would inherit it)."""
    import ray
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("TUNESCOPE_STORE", sqlite_url)
    monkeypatch.setenv("TUNESCOPE_QUIET", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    c = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        c.add_node(**node)
        ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
        yield c
    finally:
        # the cluster's processes: GCS, raylets, their workers and agents, our samplers
        started = psutil.Process().children(recursive=True)
        ray.shutdown()
        c.shutdown()
    _, alive = psutil.wait_procs(started, timeout=20)
    assert alive == [], [p.cmdline()[:3] for p in alive]


def test_an_asha_sweep_on_two_nodes(cluster: Any, sqlite_url: str, tmp_path: Path) -> None:
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from tunescope.integrations.ray import TunescopeCallback, track

    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    asha = ASHAScheduler(grace_period=1, max_t=ITERATIONS, reduction_factor=2)
    tuner = tune.Tuner(
        track(_train, interval=0.2),
        # two good trials run first (one per node), then two bad ones, then one that raises
        param_space={"level": tune.grid_search([0.0, 0.1, 5.0, 6.0, -1.0])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=asha, reuse_actors=True),
        run_config=tune.RunConfig(
            name="asha-sweep",
            storage_path=str(tmp_path / "ray"),
            callbacks=[TunescopeCallback(scheduler=asha)],
            verbose=0,
        ),
    )
    grid = tuner.fit()
    tune_trials = {r.metrics["trial_id"]: r for r in grid if r.metrics}
    failed = [r for r in grid if r.error is not None]
    assert len(failed) == 1 and len(grid) == 5

    with open_store(sqlite_url) as st:
        trials = {t.name: t for t in st.list_trials(st.get_run("asha-sweep").id)}
        assert len(trials) == 5
        nodes = set()
        states = []
        for r in grid:
            level = r.config["level"]
            (ours,) = [t for name, t in trials.items() if t.params == {"level": level}]
            assert ours.end is not None and ours.host
            assert st.list_series(ours.id, "cpu.mem"), ours.name  # sampled where it ran
            if r.error is not None:
                assert ours.state == "failed"
                assert ours.error == "ValueError: diverged"
                assert st.scalars(ours.id) == []
                states.append("failed")
                continue
            trial_id = r.metrics["trial_id"]
            assert trial_id in tune_trials and ours.name.endswith(trial_id)
            last = r.metrics["training_iteration"]
            nodes.add(r.metrics["node"])
            assert r.metrics["pid"] in ours.pids
            # Tune's word: a trial ASHA let run its budget completed, the others were pruned
            expected = "completed" if last == ITERATIONS else "pruned"
            assert ours.state == expected, (ours.name, last)
            if expected == "completed":  # long enough for a rate between two samples
                assert st.list_series(ours.id, "cpu.util"), ours.name
            states.append(expected)
            losses = st.scalars(ours.id, "loss")
            assert [(s.step, s.value) for s in losses] == [
                (i + 1, pytest.approx(level + 1.0 / (i + 1))) for i in range(last)
            ]
            assert [s.value for s in st.scalars(ours.id, "extra/i")] == list(range(last))
            assert set(st.scalar_names(ours.id)) == {"loss", "extra/i"}
            # Tune stops a trial inside its report: as many steps and batches as reports
            assert st.count_events(ours.id, kinds=["optimizer_step"]) == last
            assert st.count_events(ours.id, kinds=["data_wait"]) == last
    assert sorted(set(states)) == ["completed", "failed", "pruned"]
    assert len(nodes) == 2  # both nodes ran trials


def test_track_refuses_a_class_and_keeps_the_function() -> None:
    from ray import tune

    from tunescope.integrations.ray import track

    with pytest.raises(TypeError, match="function trainable"):
        track(tune.Trainable)
    wrapped = track(_train)
    assert wrapped.__name__ == "_train"


def test_it_imports_its_own_framework_only() -> None:
    code = (
        "import sys, tunescope.integrations.ray\n"
        "print([m for m in ('torch', 'transformers', 'optuna') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
