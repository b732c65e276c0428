"""Each finding rule on store data written here, sample by sample, with realistic values: when
it fires, with which severity and span, and when it must stay silent. Runs on every backend."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from tunescope.analyze import (
    GPU_CATALOG,
    RULES,
    Finding,
    FindingSettings,
    findings_for_run,
    findings_for_trial,
    gpu_catalog,
    match_gpu,
    to_dict,
)
from tunescope.errors import ConfigError, NotFound
from tunescope.store import Event, Store, TrialInfo

T0 = 1_700_000_000.0
GIB = 1024.0**3
MIB = 1024.0**2
H100 = 81559 * MIB


def trial(store: Store, name: str = "t", seconds: float = 120.0) -> TrialInfo:
    run = store.ensure_run("rules", start=T0)
    tr = store.create_trial(run.id, name, {"lr": 1e-4}, start=T0, interval=1.0)
    store.update_trial(tr.id, state="completed", end=T0 + seconds)
    return store.get_trial(tr.id)


def put(
    store: Store,
    tr: TrialInfo,
    metric: str,
    values: Sequence[float] | np.ndarray,
    device: str | None = None,
    *,
    start: float = 1.0,
    step: float = 1.0,
    note: str | None = None,
) -> None:
    sid = store.series(tr.id, metric, device, note=note).id
    store.append_samples([(sid, T0 + start + k * step, float(v)) for k, v in enumerate(values)])


def steps(store: Store, tr: TrialInfo, first: float, last: float, every: float = 1.0) -> None:
    n = round((last - first) / every) + 1
    store.add_events(
        [Event(tr.id, "optimizer_step", T0 + first + k * every, "AdamW", k + 1) for k in range(n)]
    )


def evals(store: Store, tr: TrialInfo, spans: Sequence[tuple[float, float]]) -> None:
    store.add_events([Event(tr.id, "evaluation", T0 + a, "eval", None, b - a) for a, b in spans])


def only(
    fs: list[Finding], rule: str, device: str | None = None, metric: str | None = None
) -> list[Finding]:
    return [
        f
        for f in fs
        if f.rule == rule
        and (device is None or f.device == device)
        and (metric is None or f.metric == metric)
    ]


def waits(
    store: Store, tr: TrialInfo, n: int, wait: float, step: float, start: float = 2.0
) -> None:
    store.add_events(
        [Event(tr.id, "data_wait", T0 + start + k * step, None, k, wait, step) for k in range(n)]
    )


# ---------------------------------------------------------------------- input-bound
@pytest.mark.parametrize(
    ("wait", "severity"), [(0.080, "high"), (0.010, "moderate"), (0.002, None)]
)
def test_input_bound_severity_follows_the_wait_share(
    store: Store, wait: float, severity: str | None
) -> None:
    tr = trial(store)
    waits(store, tr, 100, wait, 0.1)
    got = only(findings_for_trial(store, tr.id), "input_bound")
    if severity is None:
        assert got == []
        return
    (f,) = got
    assert f.severity == severity
    assert f.evidence["share_pct"] == pytest.approx(100 * wait / 0.1, rel=1e-3)
    assert f.evidence["batches"] == 100
    assert f.t0 == pytest.approx(T0 + 2.0) and f.t1 == pytest.approx(T0 + 2.0 + 10.0)
    assert f.metric == "train.data_wait" and f.device is None
    assert any("num_workers" in a for a in f.advice)
    assert any("pin_memory" in a for a in f.advice)
    assert any("offline" in a for a in f.advice)


def test_input_bound_leaves_evaluation_time_out_of_step_time(store: Store) -> None:
    tr = trial(store)
    # 40 batches of 10 ms wait / 100 ms step (10%), one of which spans a 30 s evaluation.
    rows = [Event(tr.id, "data_wait", T0 + 2 + k * 0.1, None, k, 0.01, 0.1) for k in range(20)]
    rows.append(Event(tr.id, "data_wait", T0 + 4.0, None, 20, 0.01, 30.1))
    rows += [
        Event(tr.id, "data_wait", T0 + 34.1 + k * 0.1, None, 21 + k, 0.01, 0.1) for k in range(19)
    ]
    store.add_events(rows)
    evals(store, tr, [(4.05, 34.05)])
    (f,) = only(findings_for_trial(store, tr.id), "input_bound")
    assert f.evidence["share_pct"] == pytest.approx(10.0, rel=1e-3)


def test_input_bound_needs_enough_batches(store: Store) -> None:
    tr = trial(store)
    waits(store, tr, 10, 0.09, 0.1)
    assert only(findings_for_trial(store, tr.id), "input_bound") == []
    settings = FindingSettings(input_min_batches=5)
    assert only(findings_for_trial(store, tr.id, settings), "input_bound")


def test_input_bound_from_the_series_when_there_are_no_events(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "train.data_wait", [2.0] * 10 + [35.0] * 20 + [2.0] * 10)
    (f,) = only(findings_for_trial(store, tr.id), "input_bound")
    assert f.severity == "moderate"  # mean 18.5%
    assert f.evidence["source"] == "train.data_wait series"
    assert f.t0 == pytest.approx(T0 + 10.0) and f.t1 == pytest.approx(T0 + 30.0)


def test_thresholds_are_settings(store: Store) -> None:
    tr = trial(store)
    waits(store, tr, 100, 0.03, 0.1)  # 30%
    (f,) = only(findings_for_trial(store, tr.id), "input_bound")
    assert f.severity == "high"
    (g,) = only(
        findings_for_trial(store, tr.id, FindingSettings(input_wait_high_pct=40)), "input_bound"
    )
    assert g.severity == "moderate"
    assert not only(
        findings_for_trial(
            store, tr.id, FindingSettings(input_wait_moderate_pct=35, input_wait_high_pct=40)
        ),
        "input_bound",
    )


# ---------------------------------------------------------------------- near OOM
def test_near_oom_cpu_against_the_limit_with_its_span(store: Store) -> None:
    tr = trial(store)
    limit = 4 * GIB
    mem = [1.0 * GIB] * 20 + [3.8 * GIB] * 10 + [1.5 * GIB] * 20  # 95% from t=21 to t=30
    put(store, tr, "cpu.mem", mem)
    put(store, tr, "cpu.mem.limit", [limit] * len(mem))
    (f,) = only(findings_for_trial(store, tr.id), "near_oom_cpu")
    assert f.severity == "high"
    assert f.evidence["peak_pct"] == pytest.approx(95.0, rel=1e-4)
    assert f.evidence["limit_bytes"] == pytest.approx(limit)
    assert f.t0 == pytest.approx(T0 + 21) and f.t1 == pytest.approx(T0 + 30)
    assert f.metric == "cpu.mem"


def test_no_near_oom_cpu_at_85_percent(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "cpu.mem", [3.4 * GIB] * 30)
    put(store, tr, "cpu.mem.limit", [4 * GIB] * 30)
    assert only(findings_for_trial(store, tr.id), "near_oom_cpu") == []


def test_near_oom_gpu_by_peak_and_by_allocator_retries(store: Store) -> None:
    tr = trial(store)
    for dev, peak in (("0", 0.95), ("1", 0.70)):
        put(store, tr, "gpu.mem", [0.5 * H100] * 10 + [peak * H100] * 10 + [0.5 * H100] * 10, dev)
        put(store, tr, "gpu.mem.total", [H100] * 30, dev)
        put(store, tr, "gpu.util", [90.0] * 30, dev)
    put(store, tr, "torch.alloc_retries", [0.0] * 25 + [3.0] * 5, "1")
    fs = findings_for_trial(store, tr.id)
    (a,) = only(fs, "near_oom_gpu", "0")
    assert a.severity == "high" and a.metric == "gpu.mem"
    assert a.evidence["peak_pct"] == pytest.approx(95.0, rel=1e-4)
    assert a.t0 == pytest.approx(T0 + 11) and a.t1 == pytest.approx(T0 + 20)
    (b,) = only(fs, "near_oom_gpu", "1")
    assert b.evidence["alloc_retries"] == 3.0 and "retry" in b.message
    assert b.t0 == pytest.approx(T0 + 26)
    assert any("expandable_segments" in x for x in b.advice)


def test_no_near_oom_gpu_at_80_percent_without_retries(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "gpu.mem", [0.8 * H100] * 30, "0")
    put(store, tr, "gpu.mem.total", [H100] * 30, "0")
    put(store, tr, "torch.alloc_retries", [0.0] * 30, "0")
    assert only(findings_for_trial(store, tr.id), "near_oom_gpu") == []


# ---------------------------------------------------------------------- GPU use
def test_underused_leaves_evaluations_out(store: Store) -> None:
    tr = trial(store)
    # training at 70%, long evaluations at 5%: all samples average 42%, training 70%.
    util = [70.0] * 20 + [5.0] * 20 + [70.0] * 20 + [5.0] * 20 + [70.0] * 20
    put(store, tr, "gpu.util", util, "0")
    steps(store, tr, 1, 100)
    evals(store, tr, [(20.5, 40.5), (60.5, 80.5)])
    assert only(findings_for_trial(store, tr.id), "gpu_underused") == []
    tr2 = trial(store, "low")
    put(store, tr2, "gpu.util", [30.0] * 100, "0")
    steps(store, tr2, 5, 95)
    (f,) = only(findings_for_trial(store, tr2.id), "gpu_underused")
    assert f.severity == "moderate" and f.metric == "gpu.util" and f.device == "0"
    assert f.evidence["util_mean_pct"] == pytest.approx(30.0)
    assert f.t0 == pytest.approx(T0 + 5) and f.t1 == pytest.approx(T0 + 96)


def test_underused_by_sm_activity_where_gpm_reports_it(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "gpu.util", [65.0] * 60, "0")
    put(store, tr, "gpu.sm_active", [35.0] * 60, "0")
    (f,) = only(findings_for_trial(store, tr.id), "gpu_underused")
    assert f.metric == "gpu.sm_active" and f.evidence["sm_active_mean_pct"] == 35.0
    assert only(findings_for_trial(store, tr.id), "busy_not_working") == []


def test_busy_but_not_working_by_sm_activity(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "gpu.util", [96.0] * 60, "0")
    put(store, tr, "gpu.sm_active", [28.0] * 60, "0")
    fs = findings_for_trial(store, tr.id)
    (f,) = only(fs, "busy_not_working")
    assert f.severity == "moderate" and f.metric == "gpu.sm_active"
    assert f.evidence["signal"] == "gpu.sm_active" and "weak_signal" not in f.evidence
    assert only(fs, "gpu_underused") == []  # the specific finding, not both


def test_busy_but_not_working_by_power_is_labelled_weaker(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "gpu.util", [95.0] * 60, "0")
    put(store, tr, "gpu.power", [110.0] * 60, "0")
    put(store, tr, "gpu.power.limit", [400.0] * 60, "0")
    (f,) = only(findings_for_trial(store, tr.id), "busy_not_working")
    assert f.severity == "low" and f.metric == "gpu.power"
    assert f.evidence["weak_signal"] is True and f.evidence["power_pct"] == pytest.approx(27.5)
    assert "weaker signal" in f.title and "cannot confirm" in f.message
    tr2 = trial(store, "full-power")
    put(store, tr2, "gpu.util", [95.0] * 60, "0")
    put(store, tr2, "gpu.power", [370.0] * 60, "0")
    put(store, tr2, "gpu.power.limit", [400.0] * 60, "0")
    assert only(findings_for_trial(store, tr2.id), "busy_not_working") == []


def test_idle_gpu_is_reported_on_its_own(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "gpu.util", [97.0] * 60, "0")
    put(store, tr, "gpu.util", [0.0] * 55 + [40.0] * 5, "1")
    put(store, tr, "gpu.mem", [600 * MIB] * 60, "1")
    fs = findings_for_trial(store, tr.id)
    (f,) = only(fs, "idle_gpu")
    assert f.device == "1" and f.severity == "moderate"
    assert f.evidence["idle_share_pct"] == pytest.approx(100 * 55 / 60)
    assert f.t0 == pytest.approx(T0 + 1) and f.t1 == pytest.approx(T0 + 60)
    assert only(fs, "gpu_underused") == []  # not twice for the idle GPU


def test_cpu_bound_while_the_gpu_waits(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "cpu.util", [98.0] * 40 + [50.0] * 20)
    put(store, tr, "cpu.capacity", [4.0] * 60)
    put(store, tr, "gpu.util", [3.0] * 40 + [90.0] * 20, "0")
    (f,) = only(findings_for_trial(store, tr.id), "cpu_bound")
    assert f.severity == "high" and f.evidence["signal"] == "gpu.util"
    assert f.evidence["share_pct"] == pytest.approx(100 * 40 / 60)
    assert f.t0 == pytest.approx(T0 + 1) and f.t1 == pytest.approx(T0 + 40)
    assert f.evidence["cpu_capacity_cores"] == 4.0
    tr2 = trial(store, "gpu-busy")
    put(store, tr2, "cpu.util", [98.0] * 60)
    put(store, tr2, "gpu.util", [95.0] * 60, "0")
    assert only(findings_for_trial(store, tr2.id), "cpu_bound") == []


def test_cpu_bound_over_a_gap_in_the_gpu_series(store: Store) -> None:
    """Where the GPU series has no sample (a damaged chunk skipped, a stalled sampler) the GPU
    is not known to wait: those seconds do not count, and nothing warns."""
    tr = trial(store)
    put(store, tr, "cpu.util", [98.0] * 60)
    put(store, tr, "gpu.util", [3.0] * 20, "0")
    put(store, tr, "gpu.util", [5.0] * 20, "0", start=41.0)
    (f,) = only(findings_for_trial(store, tr.id), "cpu_bound")
    # a GPU sample also stands for the CPU sample a second away: 21 and 40 count
    assert f.evidence["share_pct"] == pytest.approx(100 * 42 / 60)
    assert f.evidence["gpu_util_mean_pct"] == pytest.approx(4.0)


def test_cpu_bound_without_a_gpu_uses_the_data_wait(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "cpu.util", [99.0] * 60)
    put(store, tr, "train.data_wait", [80.0] * 60, start=1.2)
    (f,) = only(findings_for_trial(store, tr.id), "cpu_bound")
    assert f.severity == "moderate" and f.evidence["signal"] == "train.data_wait"
    tr2 = trial(store, "compute")  # the CPU is the compute device here: that is no finding
    put(store, tr2, "cpu.util", [99.0] * 60)
    put(store, tr2, "train.data_wait", [1.0] * 60, start=1.2)
    assert only(findings_for_trial(store, tr2.id), "cpu_bound") == []


# ---------------------------------------------------------------------- memory over time
def test_memory_growth_through_training(store: Store) -> None:
    tr = trial(store)
    mem = 2 * GIB + np.arange(100) * 20 * MIB
    put(store, tr, "cpu.mem", mem)
    put(store, tr, "cpu.mem.limit", [64 * GIB] * 100)
    steps(store, tr, 3, 98)
    (f,) = only(findings_for_trial(store, tr.id), "memory_growth")
    assert f.metric == "cpu.mem" and f.severity == "moderate"
    assert f.t0 == pytest.approx(T0 + 3) and f.t1 == pytest.approx(T0 + 98)
    assert f.evidence["dip_bytes"] == 0.0
    assert f.evidence["bytes_per_step"] == pytest.approx(20 * MIB, rel=0.15)
    assert f.evidence["minutes_to_limit"] > 0


def test_no_memory_growth_for_a_warm_up_that_levels_off(store: Store) -> None:
    tr = trial(store)
    t = np.arange(120)
    put(store, tr, "gpu.mem", 18 * GIB + 56 * GIB * (1 - np.exp(-t / 6.0)), "0")
    put(store, tr, "gpu.util", [95.0] * 120, "0")
    saw = 2 * GIB + (t % 10) * 100 * MIB  # allocate and free: a sawtooth, no trend
    put(store, tr, "cpu.mem", saw)
    assert only(findings_for_trial(store, tr.id), "memory_growth") == []


def test_gpu_memory_growth_per_device(store: Store) -> None:
    tr = trial(store)
    put(store, tr, "gpu.mem", 10 * GIB + np.arange(80) * 100 * MIB, "1")
    put(store, tr, "gpu.mem", [10 * GIB] * 80, "0")
    (f,) = only(findings_for_trial(store, tr.id), "memory_growth")
    assert f.device == "1" and f.metric == "gpu.mem"


def test_evaluation_spikes_and_which_one_is_worst(store: Store) -> None:
    tr = trial(store)
    mem = np.full(100, 4 * GIB)
    mem[30:35] = 4.5 * GIB  # first evaluation: +0.5 GiB
    mem[70:75] = 5.5 * GIB  # second: +1.5 GiB
    put(store, tr, "cpu.mem", mem)
    evals(store, tr, [(30.5, 35.2), (70.5, 75.2)])
    (f,) = only(findings_for_trial(store, tr.id), "eval_memory_spike")
    assert f.severity == "moderate" and f.evidence["sets_peak"] is True
    assert f.evidence["evaluations"] == 2
    assert f.evidence["max_added_bytes"] == pytest.approx(1.5 * GIB)
    assert f.evidence["mean_added_bytes"] == pytest.approx(1.0 * GIB)
    assert f.evidence["adds_to_peak_bytes"] == pytest.approx(1.5 * GIB)
    assert [r["above_training_peak_bytes"] for r in f.evidence["per_evaluation"]] == [
        pytest.approx(0.5 * GIB),
        pytest.approx(1.5 * GIB),
    ]
    assert [r["added_bytes"] for r in f.evidence["per_evaluation"]] == [
        pytest.approx(0.5 * GIB),
        pytest.approx(1.5 * GIB),
    ]
    assert f.t0 == pytest.approx(T0 + 70.5) and f.t1 == pytest.approx(T0 + 75.2)


def test_no_evaluation_spike_when_evaluation_adds_little(store: Store) -> None:
    tr = trial(store)
    mem = np.full(100, 4 * GIB)
    mem[30:35] = 4 * GIB + 20 * MIB
    put(store, tr, "cpu.mem", mem)
    evals(store, tr, [(30.5, 35.2)])
    assert only(findings_for_trial(store, tr.id), "eval_memory_spike") == []


# ---------------------------------------------------------------------- right-size
def _gpu_trial(
    store: Store,
    name: str,
    peak: float,
    util: float,
    gpus: int = 1,
    total: float = H100,
    seconds: float = 3600.0,
) -> TrialInfo:
    tr = trial(store, name, seconds)
    for dev in range(gpus):
        put(store, tr, "gpu.mem", [peak] * 60, str(dev))
        put(store, tr, "gpu.mem.total", [total] * 60, str(dev))
        put(store, tr, "gpu.util", [util] * 60, str(dev))
    return tr


def test_right_size_to_the_cheapest_gpu_that_holds_the_peak(store: Store) -> None:
    tr = _gpu_trial(store, "small", 17.6 * GIB, 60.0, gpus=2)
    (f,) = only(findings_for_trial(store, tr.id), "right_size")
    ev = f.evidence
    assert ev["needed_bytes"] == pytest.approx(17.6 * GIB * 1.2)
    assert ev["current"]["key"] == "h100-80gb"
    assert ev["recommended"]["key"] == "l4" and ev["recommended"]["kind"] == "gpu"
    assert ev["gpus"] == 2 and ev["duration_h"] == pytest.approx(1.0)
    assert ev["saving_usd"] == pytest.approx((7.00 - 0.80) * 2 * 1.0)
    assert f.severity == "moderate" and "same run time" in f.message


def test_right_size_to_a_mig_slice_when_utilization_stays_low(store: Store) -> None:
    tr = _gpu_trial(store, "quiet", 30 * GIB, 8.0)
    (f,) = only(findings_for_trial(store, tr.id), "right_size")
    rec = f.evidence["recommended"]
    assert rec["kind"] == "mig" and rec["memory_bytes"] >= 36 * GIB
    assert rec["price_per_hour"] < 1.90  # cheaper than the smallest full GPU that holds it
    busy = _gpu_trial(store, "busy", 30 * GIB, 60.0)
    (g,) = only(findings_for_trial(store, busy.id), "right_size")
    assert g.evidence["recommended"]["key"] == "l40s"


def test_right_size_stays_silent_when_the_gpu_fits(store: Store) -> None:
    tr = _gpu_trial(store, "fits", 70 * GIB, 95.0)
    assert only(findings_for_trial(store, tr.id), "right_size") == []


def test_right_size_with_user_prices(store: Store) -> None:
    tr = _gpu_trial(store, "priced", 17.6 * GIB, 60.0)
    cat = gpu_catalog({"h100-80gb": 2.49, "l4": 0.39})
    (f,) = only(findings_for_trial(store, tr.id, catalog=cat), "right_size")
    assert f.evidence["saving_usd"] == pytest.approx(2.49 - 0.39)
    with pytest.raises(ConfigError, match="unknown GPU 'h1000'"):
        gpu_catalog({"h1000": 1.0})
    with pytest.raises(ConfigError, match="must be a number"):
        gpu_catalog({"l4": -1.0})


def test_gpu_matching_by_memory() -> None:
    assert match_gpu(81559 * MIB) is not None and match_gpu(81559 * MIB).key == "h100-80gb"  # type: ignore[union-attr]
    assert match_gpu(81920 * MIB).key == "a100-80gb"  # type: ignore[union-attr]
    assert match_gpu(143771 * MIB).key == "h200"  # type: ignore[union-attr]
    assert match_gpu(12 * GIB) is None
    assert {g.key for g in GPU_CATALOG} >= {"t4", "l4", "a100-80gb", "h100-80gb", "h200"}


# ---------------------------------------------------------------------- the record
def test_findings_for_run_and_to_dict_are_json(store: Store) -> None:
    a = trial(store, "a")
    waits(store, a, 50, 0.05, 0.1)
    b = trial(store, "b")
    got = findings_for_run(store, "rules")
    assert list(got) == [a.id, b.id] and got[b.id] == []
    (f,) = got[a.id]
    doc = json.loads(json.dumps(to_dict(got)))
    (d,) = doc[str(a.id)]
    assert set(d) == {
        "id",
        "rule",
        "trial_id",
        "severity",
        "title",
        "message",
        "evidence",
        "t0",
        "t1",
        "metric",
        "device",
        "advice",
    }
    assert d["id"] == f.id and d["rule"] == "input_bound" and d["severity"] == "high"
    assert d["advice"] == list(f.advice) and d["t0"] == f.t0
    assert to_dict(f) == f.to_dict() and to_dict([f]) == [f.to_dict()]
    assert findings_for_run(store, a.run_id) == got
    with pytest.raises(NotFound):
        findings_for_run(store, "no-such-run")


def test_non_finite_evidence_becomes_null(store: Store) -> None:
    tr = trial(store)
    mem = np.full(100, 4 * GIB)
    mem[30:35] = 6 * GIB
    put(store, tr, "cpu.mem", mem)
    evals(store, tr, [(0.0, 200.0)])  # every sample is inside: nothing before it
    evals(store, tr, [(30.5, 35.2)])
    text = json.dumps(to_dict(findings_for_trial(store, tr.id)), allow_nan=False)
    assert "NaN" not in text


def test_findings_are_ordered_by_severity(store: Store) -> None:
    tr = trial(store)
    waits(store, tr, 100, 0.01, 0.1)  # moderate
    put(store, tr, "cpu.mem", [3.9 * GIB] * 30)
    put(store, tr, "cpu.mem.limit", [4 * GIB] * 30)  # high
    fs = findings_for_trial(store, tr.id)
    assert [f.rule for f in fs] == ["near_oom_cpu", "input_bound"]


def test_every_rule_is_registered_once() -> None:
    keys = [r.key for r in RULES]
    assert len(keys) == len(set(keys)) == 20
    names = {f for r in RULES for f in r.settings}
    import dataclasses

    assert names <= {f.name for f in dataclasses.fields(FindingSettings)}


@pytest.mark.parametrize(
    "bad",
    [
        {"input_wait_high_pct": -1.0},
        {"input_wait_high_pct": math.nan},
        {"gpu_mem_near_oom_pct": 120.0},
        {"input_wait_moderate_pct": 30.0},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        FindingSettings(**bad)


def test_data_wait_share_matches_the_input_bound_finding(sqlite_url: str) -> None:
    """The share `tunescope trials` prints is the one the input-bound finding reports:
    waits over step time, with an evaluation between batches taken out of step time."""
    from tunescope.analyze import data_wait_share
    from tunescope.store import Event, open_store

    with open_store(sqlite_url) as st:
        t0 = 1_700_000_000.0
        trial = st.create_trial(st.ensure_run("share", start=t0).id, start=t0)
        waits = [
            Event(trial.id, "data_wait", t0 + i, step=i, duration=0.25, value=1.0)
            for i in range(40)
        ]
        # a 0.5 s evaluation inside the last batch's step time is not step time
        st.add_events([*waits, Event(trial.id, "evaluation", t0 + 39.4, duration=0.5)])
        st.update_trial(trial.id, state="completed", end=t0 + 41)
        info = st.get_trial(trial.id)
        share = data_wait_share(st, info)
        assert share is not None
        assert share == pytest.approx(100 * 40 * 0.25 / (40 * 1.0 - 0.5))
        (f,) = [f for f in findings_for_trial(st, info) if f.rule == "input_bound"]
        assert f.evidence["share_pct"] == pytest.approx(share)
