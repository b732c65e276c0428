"""Ray Tune on a real two-node local cluster: every Tune trial is a tunescope trial, sampled on
the node that ran it, with Tune's metrics, its optimizer steps, its config and how it ended
(completed, pruned by ASHA, failed), as Tune itself saw it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
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


def _settled(url: str) -> None:
    """Wait until what the sweep's trials held is in the store: a trial leaves what its store
    could not take in time to its sampler (which outlives it, Ray leaving it be) or to the
    spool. So: every sampler of ours has ended (bounded), then the spool is replayed, as
    `tunescope sync` would."""
    samplers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "tunescope.collect" in " ".join(p.info["cmdline"] or ())
    ]
    _, alive = psutil.wait_procs(samplers, timeout=30)
    assert alive == [], [p.pid for p in alive]
    done = subprocess.run(
        [sys.executable, "-m", "tunescope", "sync", "--store", url, "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _ours(trials: Iterable[Any], result: Any) -> Any:
    """Our trial of a Tune result: Tune's trial directory starts with the trial's name (a
    result of a trial that never reported has no config to tell it by)."""
    folder = os.path.basename(result.path)
    (ours,) = [t for t in trials if folder.startswith(f"{t.name}_")]
    return ours


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head and one worker node of one CPU each, for the module; yields the store's URL.
    The store reaches the workers through $TUNESCOPE_STORE (set before the nodes start, as
    `ray start` would inherit it); each test's sweep is a run of its own."""
    import ray
    from ray.cluster_utils import Cluster

    folder = tmp_path_factory.mktemp("ray-cluster")
    url = str(folder / "store.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TUNESCOPE_STORE", url)
        mp.setenv("TUNESCOPE_SPOOL", str(folder / "spool"))
        mp.setenv("TUNESCOPE_QUIET", "1")
        mp.setenv("OMP_NUM_THREADS", "1")
        # as docs/integrations.md advises: a trial's sampler outlives its process (Ray ends a
        # stopped trial's actor) to write its last samples, then exits by itself
        mp.setenv("RAY_kill_child_processes_on_worker_exit", "0")
        mp.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # this module, for the workers
        node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
        before = set(psutil.Process().children(recursive=True))  # e.g. a session's browser
        c = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        try:
            c.add_node(**node)
            ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
            yield url
        finally:
            # the cluster's processes: GCS, raylets, their workers and agents, our samplers
            started = [p for p in psutil.Process().children(recursive=True) if p not in before]
            ray.shutdown()
            c.shutdown()
    _, alive = psutil.wait_procs(started, timeout=20)
    assert alive == [], [p.cmdline()[:3] for p in alive]


def test_an_asha_sweep_on_two_nodes(cluster: str, tmp_path: Path) -> None:
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
    _settled(cluster)
    tune_trials = {r.metrics["trial_id"]: r for r in grid if r.metrics}
    failed = [r for r in grid if r.error is not None]
    assert len(failed) == 1 and len(grid) == 5

    with open_store(cluster) as st:
        trials = {t.name: t for t in st.list_trials(st.get_run("asha-sweep").id)}
        assert len(trials) == 5
        nodes = set()
        states = []
        for r in grid:
            ours = _ours(trials.values(), r)
            level = ours.params["level"]
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


def _fit_class() -> Any:
    """A class trainable that uses the SDK in its steps; level -1 raises in its second, the
    process of level -2 dies in its first (as one killed, or on a lost node)."""
    from ray import tune

    import tunescope.record as ts

    class Fit(tune.Trainable):  # type: ignore[misc]
        def setup(self, config: dict[str, Any]) -> None:
            self.level, self.i = config["level"], 0

        def step(self) -> dict[str, float]:
            self.i += 1
            if self.level == -1 and self.i == 2:
                raise ValueError("diverged at 2")
            if self.level == -2:
                os._exit(3)
            trial = ts.current_trial()
            assert trial is not None and trial.recording
            trial.mark(f"step {self.i}")
            # level 0 is done before the run's budget: it says so itself
            return {"loss": self.level + 1.0 / self.i, "done": self.level == 0 and self.i == 3}

        def save_checkpoint(self, checkpoint_dir: str) -> dict[str, int]:
            return {"i": self.i}

        def load_checkpoint(self, checkpoint: dict[str, int]) -> None:
            self.i = checkpoint["i"]

    return Fit


def test_a_class_trainable(cluster: str, tmp_path: Path) -> None:
    """A Trainable class: each trial recorded from setup to cleanup; the run's stop criterion
    is its budget (a trial ASHA stops before it is pruned)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from tunescope.integrations.ray import TunescopeCallback, track

    fit = _fit_class()
    tracked = track(fit, run="class-sweep", interval=0.2)
    assert issubclass(tracked, fit) and tracked.__name__ == "Fit"
    tuner = tune.Tuner(
        tracked,
        param_space={"level": tune.grid_search([0.0, 0.1, -1.0, 5.0, -2.0])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=ASHAScheduler(grace_period=1, max_t=99)
        ),
        run_config=tune.RunConfig(
            name="class-experiment",
            storage_path=str(tmp_path / "ray"),
            stop={"training_iteration": ITERATIONS},
            callbacks=[TunescopeCallback(run="class-sweep")],
            verbose=0,
        ),
    )
    grid = tuner.fit()
    _settled(cluster)
    with open_store(cluster) as st:
        trials = st.list_trials(st.get_run("class-sweep").id)
        assert len(trials) == len(grid) == 5
        for r in grid:
            ours = _ours(trials, r)
            losses = [(s.step, s.value) for s in st.scalars(ours.id, "loss")]
            if ours.params["level"] == -2:  # its process died: Tune says so through the driver
                assert ours.state == "failed" and losses == []
                assert ours.error is not None and ours.error.startswith("ActorDiedError: ")
                continue  # (dead at once, perhaps before its sampler's first sample)
            assert st.list_series(ours.id, "cpu.mem"), ours.name
            if r.error is not None:
                assert (ours.state, ours.error) == ("failed", "ValueError: diverged at 2")
                assert losses == [(1, pytest.approx(0.0))]
                continue
            last, level = r.metrics["training_iteration"], ours.params["level"]
            if level == 0:
                assert (last, ours.state) == (3, "completed")
            else:
                assert ours.state == ("completed" if last == ITERATIONS else "pruned")
            assert "tunescope_finished" not in r.metrics  # taken out of Tune's results
            assert losses == [(i, pytest.approx(level + 1.0 / i)) for i in range(1, last + 1)]
            assert st.count_events(ours.id, kinds=["mark"]) == last


def test_track_checks_what_it_is_given() -> None:
    from tunescope.errors import ConfigError
    from tunescope.integrations.ray import track

    with pytest.raises(TypeError, match=r"not a ray\.tune\.Trainable"):
        track(dict)
    with pytest.raises(ConfigError, match="interval"):
        track(_train, interval=0)
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
