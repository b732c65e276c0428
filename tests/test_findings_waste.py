"""The findings on GPU-hours held without computing: ``idle_stretch`` (a held GPU idle for a
stretch, the stretch as span) and ``sweep_waste`` (pruned and failed trials' share of a run's
GPU-hours), on real stores, with their settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import usage_truth as ut
from tunescope.analyze import FindingSettings, findings_for_run, findings_for_trial
from tunescope.store import Batch, Store, TrialEnd, TrialSpec, new_key

T0 = 1_700_000_000.0


def _trial(
    st: Store,
    run: str,
    util: list[float],
    *,
    start: float = T0,
    state: str = "completed",
    sm: list[float] | None = None,
    gpus: int = 1,
) -> int:
    key = new_key()
    spec = TrialSpec(key=key, run=run, start=start, interval=1.0, host="h")
    rows = []
    for g in range(gpus):
        rows += [("gpu.util", str(g), None, start + i + 1, v) for i, v in enumerate(util)]
        if sm is not None:
            rows += [("gpu.sm_active", str(g), None, start + i + 1, v) for i, v in enumerate(sm)]
    return st.write(
        Batch(
            key,
            spec=spec,
            samples=tuple(rows),
            host="h",
            end=TrialEnd(state, start + len(util)),
        )
    )


def _rule(fs: list, key: str) -> list:  # type: ignore[type-arg]
    return [f for f in fs if f.rule == key]


def test_an_idle_stretch_is_found_with_the_stretch_as_span(store: Store) -> None:
    util = [80.0] * 600 + [2.0] * 400 + [80.0] * 600 + [0.0] * 100 + [80.0] * 300
    tid = _trial(store, "r", util)
    (f,) = _rule(findings_for_trial(store, tid), "idle_stretch")
    assert (f.t0, f.t1) == (T0 + 600, T0 + 1000)
    assert f.device == "0" and f.metric == "gpu.util"
    assert f.evidence["stretches"] == 1  # the 100 s dip is too short
    assert f.evidence["idle_s"] == pytest.approx(400.0)
    assert f.severity == "moderate"  # 400 s is over a tenth of 2000 s
    longer = FindingSettings(idle_stretch_min_s=500)
    assert _rule(findings_for_trial(store, tid, longer), "idle_stretch") == []
    lower = FindingSettings(idle_gpu_util_pct=1)
    assert _rule(findings_for_trial(store, tid, lower), "idle_stretch") == []


def test_sm_activity_is_the_busy_measure_where_it_exists(store: Store) -> None:
    util = [90.0] * 1000
    sm = [40.0] * 500 + [3.0] * 500  # kernels run, SMs empty: idle by SM activity
    tid = _trial(store, "r", util, sm=sm)
    (f,) = _rule(findings_for_trial(store, tid), "idle_stretch")
    assert f.metric == "gpu.sm_active" and (f.t0, f.t1) == (T0 + 500, T0 + 1000)


def test_a_gpu_idle_all_run_is_idle_gpu_not_a_stretch(store: Store) -> None:
    tid = _trial(store, "r", [0.0] * 1000)
    rules = {f.rule for f in findings_for_trial(store, tid)}
    assert "idle_gpu" in rules and "idle_stretch" not in rules


def test_sweep_waste_reports_a_run_whose_pruned_trials_held_too_much(store: Store) -> None:
    busy = [90.0] * 100
    first = _trial(store, "sweep", busy * 10)  # 1000 s, completed
    _trial(store, "sweep", busy * 10, start=T0 + 2000)
    for i in range(3):
        _trial(store, "sweep", busy * 6, start=T0 + 4000 + 1000 * i, state="pruned", gpus=2)
    _trial(store, "sweep", busy * 3, start=T0 + 9000, state="failed")
    # held: 2 x 1000 completed, 3 x 600 x 2 pruned = 3600, 300 failed: 3900 / 5900
    by_trial = findings_for_run(store, "sweep")
    (f,) = _rule(by_trial[first], "sweep_waste")
    assert all(not _rule(v, "sweep_waste") for k, v in by_trial.items() if k != first)
    assert f.evidence["held_gpu_s"] == pytest.approx(5900.0)
    assert f.evidence["pruned_gpu_s"] == pytest.approx(3600.0)
    assert f.evidence["failed_gpu_s"] == pytest.approx(300.0)
    assert f.evidence["share_pct"] == pytest.approx(100.0 * 3900 / 5900)
    assert (f.t0, f.t1) == (T0, T0 + 9300)
    assert "grace_period" in " ".join(f.advice)
    high = FindingSettings(sweep_waste_pct=70)
    assert not _rule(findings_for_run(store, "sweep", high)[first], "sweep_waste")
    many = FindingSettings(sweep_waste_min_trials=7)
    assert not _rule(findings_for_run(store, "sweep", many)[first], "sweep_waste")


def test_the_known_store_s_planted_stretches_are_found(store: Store) -> None:
    """Every planted idle stretch of the generated store (long enough) is found on its GPU,
    the longest as the span."""
    plans = [p for p in ut.plan() if p.project == "nlp"][:6]
    for p in plans:
        p.project = store.project
    ut.write(store, plans)
    for p in plans:
        trial = store.find_trial(store.get_run(p.run).id, p.name)
        found = {f.device: f for f in _rule(findings_for_trial(store, trial), "idle_stretch")}
        for g in p.gpus:
            idle = sorted(ut._idle_minutes(g.busy()))
            if not idle or len(idle) == p.minutes:
                assert str(g.index) not in found
                continue
            runs: list[list[int]] = [[idle[0]]]
            for m in idle[1:]:
                (runs[-1].append(m) if m == runs[-1][-1] + 1 else runs.append([m]))
            longest = max(runs, key=len)
            f = found[str(g.index)]
            assert f.t1 - f.t0 == 60.0 * len(longest)
            assert f.evidence["idle_s"] == 60.0 * len(idle)
