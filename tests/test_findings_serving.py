"""The findings on load runs (docs/findings.md): latency target missed, queueing, KV-cache
bound, decode memory-bandwidth bound and over-provisioned, each when it fires and when it must
stay silent, on load runs made per SERVING_CONTRACT by the synthetic engine of
tests/serving_helpers.py (labelled synthetic), on every backend."""

from __future__ import annotations

import pytest

from serving_helpers import Engine, write_load_run
from tunescope.analyze import Finding, FindingSettings, findings_for_run
from tunescope.store import Store, open_store

H100 = 81559 * 1024.0**2


def _by_rule(store: Store, run: str = "serve") -> dict[str, dict[str, Finding]]:
    """{rule: {trial name: finding}} of every finding of the run."""
    names = {t.id: t.name for t in store.list_trials(store.get_run(run).id)}
    out: dict[str, dict[str, Finding]] = {}
    for tid, fs in findings_for_run(store, run).items():
        for f in fs:
            out.setdefault(f.rule, {})[names[tid]] = f
    return out


def test_latency_target_missed_at_concurrency_6(store_url: str) -> None:
    with open_store(store_url) as st:
        write_load_run(st)
        found = _by_rule(st)["latency_target_missed"]
        assert list(found) == ["c6"]  # the first level that misses, once per run
        f = found["c6"]
        assert f.title == "Latency target missed at concurrency 6"
        assert f.severity == "moderate" and f.evidence["last_good"] == "c2"
        assert f.evidence["ttft_p99_s"] > 0.5 and "p99 TTFT 1390 ms > 500 ms" in f.message
        goodput = f.evidence["goodput"]
        assert set(goodput) == {"c1", "c2", "c6"} and goodput["c6"] < goodput["c2"]


def test_latency_target_silent_when_met_and_high_when_never_met(store_url: str) -> None:
    with open_store(store_url) as st:
        write_load_run(st, "loose", slo={"ttft_s": 5.0, "tpot_s": 0.05})
        assert "latency_target_missed" not in _by_rule(st, "loose")
        write_load_run(st, "strict", slo={"ttft_s": 0.01})
        f = _by_rule(st, "strict")["latency_target_missed"]
        assert list(f) == ["c1"] and f["c1"].severity == "high"
        write_load_run(st, "none", slo={})
        assert "latency_target_missed" not in _by_rule(st, "none")


def test_queueing_while_compute_is_not_busy(store_url: str) -> None:
    with open_store(store_url) as st:
        write_load_run(st)  # 2 slots; the engine's CPU 40% busy
        found = _by_rule(st).get("queueing", {})
        assert list(found) == ["c6"]  # c1 and c2 never wait: 2 slots hold them
        f = found["c6"]
        assert f.evidence["compute_metric"] == "cpu.util"
        assert f.evidence["compute_pct"] == pytest.approx(40.0)
        assert f.evidence["slots"] == 2 and f.evidence["waiting_max"] == 4
        assert f.evidence["share_pct"] >= 10
        write_load_run(st, "busy", engine=Engine(cpu_util_pct=95.0))
        assert "queueing" not in _by_rule(st, "busy")  # waiting on compute: no slot shortage
        strict = FindingSettings(serve_busy_pct=30.0)  # 40% now counts as busy
        rules = {f.rule for fs in findings_for_run(st, "serve", strict).values() for f in fs}
        assert "latency_target_missed" in rules and "queueing" not in rules


def test_kv_cache_bound_and_queueing_yields_to_it(store_url: str) -> None:
    with open_store(store_url) as st:
        write_load_run(st, engine=Engine(kv_pct_per_request=50.0))  # 2 running: 100%
        rules = _by_rule(st)
        assert set(rules["kv_cache_bound"]) == {"c2", "c6"}  # c1 holds one request: 50%
        f = rules["kv_cache_bound"]["c6"]
        assert f.severity == "moderate" and f.evidence["peak_pct"] == 100.0
        assert f.metric == "serve.kv_use"
        assert "queueing" not in rules  # the full cache says it better


def test_decode_bandwidth_bound(store_url: str) -> None:
    # weights read at 80% of an H100's 3.35 TB/s take 80% of the synthetic 20 ms TPOT
    weights = 0.02 * 0.8 * 3350e9
    gpu = {"gpu.dram_active": 80.0, "gpu.tensor_active": 5.0, "gpu.mem.total": H100}
    model = {"model.weights_bytes": weights, "model.kv_bytes_per_token": 131072}
    with open_store(store_url) as st:
        write_load_run(st, engine=Engine(gpu=gpu, model=model))
        found = _by_rule(st)["decode_bandwidth_bound"]
        assert set(found) == {"c1", "c2", "c6"}
        f = found["c2"]
        assert f.severity == "moderate" and (f.metric, f.device) == ("gpu.dram_active", "0")
        assert f.evidence["bound_share_pct"] == pytest.approx(80.0, rel=1e-3)
        assert f.evidence["gpu_model"] == "NVIDIA H100 80GB"
        write_load_run(st, "math", engine=Engine(gpu={**gpu, "gpu.tensor_active": 40.0}))
        assert "decode_bandwidth_bound" not in _by_rule(st, "math")
        write_load_run(st, "small", engine=Engine(gpu=gpu, model={"model.weights_bytes": 1e9}))
        assert _by_rule(st, "small")["decode_bandwidth_bound"]["c1"].severity == "low"


def test_over_provisioned_at_the_top_level(store_url: str) -> None:
    idle = {"gpu.sm_active": 20.0, "gpu.util": 35.0}
    with open_store(store_url) as st:
        write_load_run(st, levels=(1, 2), engine=Engine(gpu=idle))
        found = _by_rule(st)["over_provisioned"]
        assert list(found) == ["c2"]  # the top level only
        f = found["c2"]
        assert f.severity == "low" and f.evidence["compute_metric"] == "gpu.sm_active"
        assert f.evidence["tpot_share_pct"] == pytest.approx(40.0, rel=1e-3)
        write_load_run(st, "busy", levels=(1, 2), engine=Engine(gpu={"gpu.sm_active": 60.0}))
        assert "over_provisioned" not in _by_rule(st, "busy")
        write_load_run(st, "full", levels=(1, 2), engine=Engine(gpu=idle, kv_pct_per_request=40))
        assert "over_provisioned" not in _by_rule(st, "full")  # KV 80% at c2
        write_load_run(st, "nogpu", levels=(1, 2))
        assert "over_provisioned" not in _by_rule(st, "nogpu")
        write_load_run(st, "queued", engine=Engine(gpu=idle))  # c6 misses the SLO
        assert "over_provisioned" not in _by_rule(st, "queued")
