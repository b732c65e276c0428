"""The sweep's cost frontier (analyze/_frontier.py, GET /api/runs/{run}/frontier): objective
against GPU-hours and peak GPU memory, the Pareto fronts of completed trials, pruned and failed
trials marked, and the best trial's right-size sentence."""

from __future__ import annotations

import pytest

from api_helpers import app_over, request
from tunescope.analyze import cost_frontier
from tunescope.analyze._frontier import pareto
from tunescope.server._schema import FrontierOut
from tunescope.store import Batch, Store, TrialEnd, TrialSpec, new_key, open_store

T0 = 1_750_000_000.0
GIB = 1024.0**3
H100 = 81559 * 1024.0**2


def _trial(
    st: Store,
    seconds: int,
    objective: float | None,
    state: str,
    mem_gib: float,
    *,
    gpus: int = 1,
    start: float = T0,
) -> int:
    key = new_key()
    spec = TrialSpec(
        key=key,
        run="sweep",
        start=start,
        interval=10.0,
        host="h",
        params={"optuna.direction": "maximize"},
    )
    rows = []
    for g in range(gpus):
        d = str(g)
        for i in range(1, seconds // 10 + 1):
            t = start + 10.0 * i
            rows += [
                ("gpu.util", d, None, t, 95.0),
                ("gpu.mem", d, None, t, mem_gib * GIB * (0.5 if i % 2 else 1.0)),
                ("gpu.mem.total", d, None, t, H100),
            ]
    scalars = () if objective is None else (("eval/objective", 1, start + seconds - 1, objective),)
    return st.write(
        Batch(
            key,
            spec=spec,
            samples=tuple(rows),
            scalars=scalars,
            host="h",
            where={"gpus": [{"index": g, "name": "NVIDIA H100 80GB HBM3"} for g in range(gpus)]},
            end=TrialEnd(state, start + seconds),
        )
    )


def test_pareto_keeps_what_nothing_beats() -> None:
    pts = [(1.0, 5.0), (2.0, 3.0), (3.0, 3.0), (4.0, 1.0), (2.0, 6.0), (1.0, 5.0)]
    assert pareto(pts) == [True, True, False, True, False, True]


def test_the_frontier_of_a_sweep(store: Store) -> None:
    a = _trial(store, 3600, 0.70, "completed", 10)  # 1 GPU-h, 10 GiB
    b = _trial(store, 3600, 0.90, "completed", 60, gpus=2)  # 2 GPU-h, best, 60 GiB
    c = _trial(store, 7200, 0.80, "completed", 20)  # 2 GPU-h, beaten by b on hours
    p = _trial(store, 1800, 0.95, "pruned", 5)  # better objective, but pruned
    f_ = _trial(store, 600, None, "failed", 30)
    run = store.get_trial(a).run_id
    fr = cost_frontier(store, run, now=T0 + 10**6)
    by = {pt.trial.id: pt for pt in fr.points}
    assert fr.direction == "maximize"
    assert by[a].gpu_hours == pytest.approx(1.0) and by[b].gpu_hours == pytest.approx(2.0)
    assert by[c].gpu_hours == pytest.approx(2.0)
    assert by[a].peak_gpu_mem == pytest.approx(10 * GIB)
    assert by[b].peak_gpu_mem == pytest.approx(60 * GIB)
    # hours: a (1 h, 0.70) and b (2 h, 0.90) are on the front; c (2 h, 0.80) is beaten by b
    assert [by[x].on_hours_front for x in (a, b, c, p, f_)] == [True, True, False, False, False]
    # memory: a (10 GiB, 0.70), c (20, 0.80), b (60, 0.90)
    assert [by[x].on_mem_front for x in (a, b, c)] == [True, True, True]
    assert by[f_].objective is None and by[p].objective == 0.95
    assert fr.best is not None and fr.best.id == b
    assert fr.fit is not None and fr.fit.current is not None
    assert fr.fit.current.key == "h100-80gb"
    # 60 GiB with 20% headroom is 72 GiB: nothing cheaper than an A100 80GB holds it
    assert fr.fit.best.key == "a100-80gb"
    said = fr.saying()
    assert said == (
        f"The best trial, {fr.best.name}, would have fit on NVIDIA A100 80GB (2 x), at "
        f"${4.0 * 2:.2f} instead of ${7.0 * 2:.2f} on NVIDIA H100 80GB."
    )


def test_without_objectives_there_is_no_front(store: Store) -> None:
    a = _trial(store, 600, None, "completed", 10)
    fr = cost_frontier(store, store.get_trial(a).run_id, now=T0 + 10**6)
    assert fr.best is None and fr.saying() is None
    assert not any(p.on_hours_front or p.on_mem_front for p in fr.points)


def test_the_route_answers_the_frontier(sqlite_url: str) -> None:
    with open_store(sqlite_url) as st:
        a = _trial(st, 3600, 0.7, "completed", 10)
        _trial(st, 1800, 0.9, "pruned", 5, start=T0 + 4000)
        run = st.get_trial(a).run_id
    with app_over(sqlite_url) as app:
        r = request(app, f"/api/runs/{run}/frontier")
        assert r.status_code == 200, r.text
        body = FrontierOut.model_validate(r.json())
        assert body.best_trial_id == a
        assert [t.state for t in body.trials] == ["completed", "pruned"]
        assert [t.on_hours_front for t in body.trials] == [True, False]
        assert body.saying is not None and "would have fit on" in body.saying
        assert request(app, "/api/runs/nope/frontier").status_code == 404
