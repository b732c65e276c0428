"""The straggler-node finding over synthetic series of several hosts in a real store."""

from __future__ import annotations

from typing import Any

import pytest

from tunescope.analyze import findings_for_trial
from tunescope.store import Event, Store, TrialInfo

T0 = 1_700_000_000.0
N = 60


def trial(store: Store) -> TrialInfo:
    run = store.ensure_run("job", start=T0)
    tr = store.create_trial(run.id, "t", {}, start=T0, interval=1.0, host="node-a")
    store.add_events(
        [Event(tr.id, "optimizer_step", T0 + 2 + k, "SGD", k + 1) for k in range(N - 4)]
    )
    store.update_trial(tr.id, state="completed", end=T0 + N + 1)
    return tr


def put(
    store: Store,
    tr: TrialInfo,
    host: str,
    metric: str,
    value: float,
    device: str | None = None,
    n: int = N,
) -> None:
    sid = store.series(tr.id, metric, device, host=host).id
    store.append_samples([(sid, T0 + 1.0 + k, value) for k in range(n)])


def stragglers(store: Store, tr: TrialInfo, **settings: float) -> list[Any]:
    from tunescope.analyze import FindingSettings

    found = findings_for_trial(store, tr, FindingSettings(**settings))  # type: ignore[arg-type]
    return [f for f in found if f.rule == "straggler_node"]


def test_the_node_whose_gpus_idle_while_the_others_wait_is_named(store: Store) -> None:
    tr = trial(store)
    for host, util in (("node-a", 92.0), ("node-b", 88.0), ("node-c", 51.0)):
        for dev in ("0", "1"):
            put(store, tr, host, "gpu.util", util, dev)
        put(store, tr, host, "cpu.util", 30.0)  # the CPUs say nothing here
    (f,) = stragglers(store, tr)
    assert f.title == "Node node-c is a straggler" and f.severity == "moderate"
    ev = f.evidence
    assert ev["host"] == "node-c" and ev["metric"] == "gpu.util" == f.metric
    assert ev["host_means_pct"] == pytest.approx({"node-a": 92.0, "node-b": 88.0, "node-c": 51.0})
    assert ev["others_median_pct"] == pytest.approx(90.0)
    assert ev["gap_pct"] == pytest.approx(100 * (90 - 51) / 90)
    assert "51%" in f.message and "90%" in f.message and "median of the 2 others" in f.message
    assert f.t0 == T0 + 2 and f.t1 == T0 + N - 3  # the training span: first to last step


def test_a_smaller_lag_than_the_setting_is_no_straggler(store: Store) -> None:
    tr = trial(store)
    for host, util in (("node-a", 90.0), ("node-b", 75.0)):  # 17% lower
        put(store, tr, host, "gpu.util", util, "0")
    assert stragglers(store, tr) == []
    (f,) = stragglers(store, tr, straggler_gap_pct=15)
    assert f.evidence["host"] == "node-b" and f.evidence["gap_threshold_pct"] == 15


def test_without_gpus_the_busy_node_is_the_one_the_others_wait_for(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "node-a", "cpu.util", 4.0)  # idle in the all-reduce
    put(store, tr, "node-b", "cpu.util", 45.0)  # still computing
    (f,) = stragglers(store, tr)
    assert f.evidence["host"] == "node-b" and f.metric == "cpu.util"
    assert f.evidence["gap_pct"] == pytest.approx(100 * (45 - 4) / 45)
    assert "the other node" in f.message


def test_nodes_that_all_idle_differ_by_noise_alone(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "node-a", "cpu.util", 0.5)
    put(store, tr, "node-b", "cpu.util", 3.0)  # 83% apart, 2.5 points
    assert stragglers(store, tr) == []
    assert len(stragglers(store, tr, straggler_min_diff_pct=2)) == 1


def test_one_node_or_too_few_samples_is_not_judged(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "node-a", "gpu.util", 90.0, "0")
    put(store, tr, "node-a", "gpu.util", 10.0, "1")  # one node's GPUs: not a node straggler
    put(store, tr, "node-b", "gpu.util", 10.0, "0", n=3)  # fewer than min_samples
    assert stragglers(store, tr) == []
    assert len(stragglers(store, tr, min_samples=2)) == 1
