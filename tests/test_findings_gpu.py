"""GPU findings on replayed NVML readings: the real sampler (host probe, GPU probe, replay
backend) records the builtin fixtures, and variants of them, into a real store; the rules then
read what it wrote. A fake clock steps through the frames, so no test waits for them.

The fixtures are synthesized (see tunescope/collect/replay/README.md); training events are
written as the SDK writes them, on the fixtures' phases."""

from __future__ import annotations

import copy
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from collect_helpers import StoreSink
from tunescope.analyze import Finding, findings_for_trial
from tunescope.collect import ReplayBackend, Sampler, load_replay
from tunescope.store import Event, Store, TrialInfo

GIB = 1024.0**3


@pytest.fixture
def root() -> Iterator[int]:
    """A live process that plays the trial's root (the replay maps the recorded trial pids
    onto it)."""
    p = subprocess.Popen(["sleep", "300"])
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def fixture(name: str) -> dict[str, Any]:
    return copy.deepcopy(load_replay(name)[1])


def record(
    store: Store,
    doc: dict[str, Any],
    root: int,
    name: str,
    events: Callable[[int, float], list[Event]] | None = None,
    trial: str | None = None,
) -> TrialInfo:
    """Sample every frame of ``doc`` once (at 0.5 s into it) into a new trial; ``trial``:
    which of the recording's ``trials`` it is (a shared GPU)."""
    base = time.time() - 3600.0
    run = store.ensure_run("replay", start=base)
    tr = store.create_trial(run.id, name, {}, start=base, interval=1.0)
    clock = [0.0]
    backend = ReplayBackend(doc, root_pid=root, clock=lambda: clock[0], trial=trial)
    sampler = Sampler(
        StoreSink(store),
        tr.key,
        root,
        1.0,
        gpu=backend,
        wall=lambda: base + clock[0],
        mono=lambda: clock[0],
    )
    n = len(doc["frames"])
    for k in range(n):
        clock[0] = doc["frames"][k]["t"] + 0.5
        sampler.sample()
    sampler.flush()
    if events is not None:
        store.add_events(events(tr.id, base))
    store.update_trial(tr.id, state="completed", end=base + n)
    return store.get_trial(tr.id)


def steps_between(
    first: float, last: float, skip: Callable[[float], bool] = lambda t: False
) -> Callable[[int, float], list[Event]]:
    def make(trial_id: int, base: float) -> list[Event]:
        out, k, t = [], 0, first
        while t <= last:
            if not skip(t):
                k += 1
                out.append(Event(trial_id, "optimizer_step", base + t, "AdamW", k))
            t += 0.5
        return out

    return make


def h200_events(trial_id: int, base: float) -> list[Event]:
    """Steps from t=4 s, an evaluation at phase 34-39 s of every 40 s (as in the fixture)."""
    in_eval = lambda t: 34 <= t % 40 < 39  # noqa: E731
    out = steps_between(4, 120, in_eval)(trial_id, base)
    out += [Event(trial_id, "evaluation", base + 40 * k + 34, "eval", None, 5.0) for k in range(3)]
    return out


def by_rule(fs: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in fs:
        out.setdefault(f.rule, []).append(f)
    return out


GPU_RULES = {"near_oom_gpu", "gpu_underused", "busy_not_working", "idle_gpu"}


def test_busy_gpu_with_low_sm_activity(db: Store, root: int) -> None:
    """GPU-Util ~95% while GPM SM activity ~30%: busy but not working, on GPU 0 only (GPU 1
    runs another user's job and is not the trial's)."""
    tr = record(db, fixture("busy_low_sm"), root, "busy", steps_between(3, 90))
    assert {s.device for s in db.list_series(tr.id, "gpu.util")} == {"0"}
    got = by_rule(findings_for_trial(db, tr.id))
    (f,) = got["busy_not_working"]
    assert f.device == "0" and f.severity == "moderate" and f.metric == "gpu.sm_active"
    assert f.evidence["util_mean_pct"] == pytest.approx(95, abs=2)
    assert f.evidence["sm_active_mean_pct"] == pytest.approx(30, abs=2)
    assert tr.start + 2 <= f.t0 <= tr.start + 5 and f.t1 >= tr.start + 85  # type: ignore[operator]
    assert "gpu_underused" not in got and "idle_gpu" not in got and "near_oom_gpu" not in got
    (r,) = got["right_size"]  # 17.6 GiB on an 80 GB H100
    assert r.evidence["current"]["key"] == "h100-80gb"
    assert r.evidence["recommended"]["memory_bytes"] >= 1.2 * r.evidence["peak_bytes"]
    assert r.evidence["saving_usd"] > 0


def test_healthy_h200_training_has_no_gpu_finding(db: Store, root: int) -> None:
    """98% utilization and 71% SM activity while training; evaluations (72%, SM 38%) are
    left out; memory warms up then levels off; 53% of the memory is used."""
    tr = record(db, fixture("h200_sft"), root, "h200", h200_events)
    fs = findings_for_trial(db, tr.id)
    assert {f.rule for f in fs} & (GPU_RULES | {"memory_growth", "right_size"}) == set(), fs
    assert {s.device for s in db.list_series(tr.id, "gpu.sm_active")} == {"0", "1"}


def test_evaluations_make_the_difference_for_under_use(db: Store, root: int) -> None:
    """Evaluations twice as long as in the fixture at 10% utilization: counted in, the mean
    drops under 50%; left out, training is busy."""
    doc = fixture("h200_sft")
    for fr in doc["frames"]:
        if 8 <= fr["t"] % 40 < 39 and fr["t"] >= 8:
            for d in fr["devices"]:
                d["util"], d["gpm"] = 10, {"sm": 4.0, "tensor": 1.0, "dram": 3.0}
    in_eval = lambda t: 8 <= t % 40 < 39  # noqa: E731

    def events(trial_id: int, base: float) -> list[Event]:
        out = steps_between(4, 120, in_eval)(trial_id, base)
        return out + [
            Event(trial_id, "evaluation", base + 40 * k + 8, "eval", None, 31.0) for k in range(3)
        ]

    tr = record(db, doc, root, "long-evals", events)
    assert [f for f in findings_for_trial(db, tr.id) if f.rule == "gpu_underused"] == []
    bare = record(db, doc, root, "no-events")  # no events: every sample counts
    got = [f for f in findings_for_trial(db, bare.id) if f.rule == "gpu_underused"]
    assert {f.device for f in got} == {"0", "1"}


def test_no_gpm_low_power_is_the_weaker_signal(db: Store, root: int) -> None:
    doc = fixture("a100_no_gpm")
    tr_full = record(db, doc, root, "a100")  # 93% utilization at ~370 of 400 W: fine
    assert {f.rule for f in findings_for_trial(db, tr_full.id)} & GPU_RULES == set()
    assert all(
        (s.note or "").startswith("device-wide") for s in db.list_series(tr_full.id, "gpu.mem")
    )
    for fr in doc["frames"]:
        for d in fr["devices"]:
            d["power_mw"] = int(d["power_mw"] * 0.3)  # ~110 W of 400 W
    tr = record(db, doc, root, "a100-low-power", steps_between(4, 90))
    got = [f for f in findings_for_trial(db, tr.id) if f.rule == "busy_not_working"]
    assert {f.device for f in got} == {"0", "1"}
    for f in got:
        assert f.severity == "low" and f.metric == "gpu.power"
        assert f.evidence["weak_signal"] is True and f.evidence["power_pct"] < 40
        assert "weaker signal" in f.title


def test_near_oom_on_the_gpu(db: Store, root: int) -> None:
    doc = fixture("h200_sft")
    total = doc["devices"][0]["memory_total"]
    for fr in doc["frames"]:
        if fr["t"] >= 60:
            for d in fr["devices"]:
                d["processes"][0][1] = int(0.96 * total)
                d["mem_used"] = int(0.96 * total) + 430 * 1024**2
    tr = record(db, doc, root, "full", h200_events)
    got = [f for f in findings_for_trial(db, tr.id) if f.rule == "near_oom_gpu"]
    assert {f.device for f in got} == {"0", "1"}
    for f in got:
        assert f.severity == "high" and f.evidence["peak_pct"] >= 96
        assert f.t0 == pytest.approx(tr.start + 60.5, abs=0.01)
        assert f.t1 == pytest.approx(tr.start + 120.5, abs=0.01)


def test_allocator_retries_are_near_oom(db: Store, root: int) -> None:
    """torch.alloc_retries comes from the SDK (torch.cuda.memory_stats), written here as its
    flusher writes it, beside the replayed GPU."""
    tr = record(db, fixture("h200_sft"), root, "retries", h200_events)
    sid = db.series(tr.id, "torch.alloc_retries", "1").id
    db.append_samples([(sid, tr.start + k + 0.7, 0.0 if k < 70 else 2.0) for k in range(4, 120)])
    (f,) = [f for f in findings_for_trial(db, tr.id) if f.rule == "near_oom_gpu"]
    assert f.device == "1" and f.evidence["alloc_retries"] == 2.0
    assert f.t0 == pytest.approx(tr.start + 70.7, abs=0.01)


def test_idle_gpu_the_trial_holds(db: Store, root: int) -> None:
    doc = fixture("h200_sft")
    for fr in doc["frames"]:
        d = fr["devices"][1]  # rank 1 holds GPU 1 with a CUDA context, but never computes
        d["util"], d["gpm"], d["power_mw"] = 0, {"sm": 0.0, "tensor": 0.0, "dram": 0.0}, 70_000
        d["processes"][0][1] = 612 * 1024**2
    tr = record(db, doc, root, "idle", h200_events)
    got = by_rule(findings_for_trial(db, tr.id))
    (f,) = got["idle_gpu"]
    assert f.device == "1" and f.evidence["idle_share_pct"] == 100.0
    assert f.evidence["mem_peak_bytes"] == pytest.approx(612 * 1024**2)
    assert all(x.device != "1" for x in got.get("gpu_underused", []))


def test_gpu_memory_that_keeps_growing(db: Store, root: int) -> None:
    doc = fixture("h200_sft")
    for fr in doc["frames"]:
        for d in fr["devices"]:
            grow = int(max(0.0, fr["t"] - 10) * 0.25 * GIB)  # +0.25 GiB a second
            d["processes"][0][1] += grow
            d["mem_used"] += grow
    tr = record(db, doc, root, "leak", h200_events)
    got = [f for f in findings_for_trial(db, tr.id) if f.rule == "memory_growth"]
    assert {f.device for f in got} == {"0", "1"}
    for f in got:
        assert f.metric == "gpu.mem"
        assert f.evidence["slope_bytes_per_min"] == pytest.approx(15 * GIB, rel=0.1)
        assert f.t0 == pytest.approx(tr.start + 4) and f.t1 == pytest.approx(tr.start + 120)


# ---------------------------------------------------------------------- packing
def test_a_small_trial_on_a_shared_gpu_could_be_packed(db: Store, root: int) -> None:
    """Two trials share one H100: a uses ~18% of its time and 14 GiB, b ~45%. Each judged by
    its own processes' utilization (gpu.proc_util): a could run five to a GPU, or on a
    2g.20gb slice (a 1g slice has 1/7 of the SMs, under a's 95th percentile); b could not."""
    steps = steps_between(4, 90)
    a = record(db, fixture("shared_h100"), root, "a", steps, trial="a")
    (f,) = by_rule(findings_for_trial(db, a.id))["pack_trials"]
    assert f.severity == "moderate" and f.device == "0" and f.metric == "gpu.proc_util"
    ev = f.evidence
    assert ev["signal"] == "gpu.proc_util" and ev["gpus"] == 1
    assert ev["util_mean_pct"] == pytest.approx(18, abs=1.5)
    assert ev["peak_bytes"] == pytest.approx(612 * 1024**2 + 13.4 * GIB, rel=0.01)
    assert ev["per_gpu"] == 5  # 100% / 18% and 79.6 GiB / 14 GiB
    assert ev["gpu_model"] == "NVIDIA H100 80GB"
    assert ev["mig"]["profile"] == "2g.20gb" and ev["mig"]["kind"] == "mig"
    assert ev["mig"]["memory_bytes"] >= 1.2 * ev["peak_bytes"]
    assert "2g.20gb" in f.message and "5 such trials" in f.message
    assert f.t0 == pytest.approx(a.start + 4) and f.t1 == pytest.approx(a.start + 90)
    b = record(db, fixture("shared_h100"), root, "b", steps, trial="b")
    assert "pack_trials" not in by_rule(findings_for_trial(db, b.id))


def test_without_per_process_utilization_the_device_decides(db: Store, root: int) -> None:
    """The same trial a where the driver reports no per-process utilization: the device's
    utilization counts b's work too (~65%), so nothing can be said about packing a."""
    doc = fixture("shared_h100")
    for fr in doc["frames"]:
        fr["devices"][0]["process_util"] = None
    a = record(db, doc, root, "a", steps_between(4, 90), trial="a")
    assert db.list_series(a.id, "gpu.proc_util") == []
    assert "pack_trials" not in by_rule(findings_for_trial(db, a.id))
    quiet = fixture("shared_h100")  # b never runs: the device is a's alone
    for fr in quiet["frames"]:
        d = fr["devices"][0]
        mine = d["process_util"][0][1]
        d["util"], d["process_util"] = round(mine), None
    a2 = record(db, quiet, root, "a-alone", steps_between(4, 90), trial="a")
    (f,) = by_rule(findings_for_trial(db, a2.id))["pack_trials"]
    assert f.evidence["signal"] == "gpu.util" and f.metric == "gpu.util"
    assert "the trial's own share unknown" in f.message


def test_a_trial_on_a_mig_slice_is_not_told_to_pack(db: Store, root: int) -> None:
    tr = record(db, fixture("mig_h100"), root, "mig", steps_between(3, 60))
    assert {s.device for s in db.list_series(tr.id, "gpu.mem")} == {"0/mig1"}
    assert "pack_trials" not in by_rule(findings_for_trial(db, tr.id))
