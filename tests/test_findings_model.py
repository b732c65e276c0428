"""A finding is one object: each rule of the registry names the settings it uses as typed
references to FindingSettings' own fields, reads no other, and the thresholds that were
literals (the evaluation baseline's 30 s, half the price, the 50% utilization caveat) are
settings that change findings and load from a project's files and environment like the rest."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from serving_helpers import Engine, write_load_run
from tunescope.analyze import GPU_CATALOG, RULES, FindingSettings, findings_for_trial
from tunescope.analyze._data import TrialData
from tunescope.analyze._rules import FINDINGS
from tunescope.analyze._rules._rightsize import ADVICE_SLOWER
from tunescope.analyze._settings import SETTINGS, Setting, load_settings
from tunescope.errors import ConfigError
from tunescope.store import Event, Store, TrialInfo

T0 = 1_700_000_000.0
GIB = 1024.0**3
MIB = 1024.0**2
H100 = 81559 * MIB


def trial(store: Store, name: str = "t", seconds: float = 200.0) -> TrialInfo:
    run = store.ensure_run("model", start=T0)
    tr = store.create_trial(run.id, name, {}, start=T0, interval=1.0)
    store.update_trial(tr.id, state="completed", end=T0 + seconds)
    return store.get_trial(tr.id)


def put(store: Store, tr: TrialInfo, metric: str, values: Any, device: str | None = None) -> None:
    sid = store.series(tr.id, metric, device).id
    store.append_samples([(sid, T0 + 1.0 + k, float(v)) for k, v in enumerate(values)])


def only(store: Store, tr: TrialInfo, rule: str, **settings: float) -> list[Any]:
    return [
        f for f in findings_for_trial(store, tr.id, FindingSettings(**settings)) if f.rule == rule
    ]


def test_rules_name_their_settings_as_typed_references() -> None:
    assert [r.info() for r in FINDINGS] == list(RULES)
    for rule in FINDINGS:
        assert rule.uses, rule.key
        for s in rule.uses:
            assert isinstance(s, Setting)
            assert vars(FindingSettings)[s.name] is s  # the field itself, not a copy
        assert len(set(rule.settings)) == len(rule.uses), rule.key
    assert set(SETTINGS) == {f.name for f in dataclasses.fields(FindingSettings)}


class _Recording(FindingSettings):
    """Settings that note every setting read."""

    def __getattribute__(self, name: str) -> Any:
        if name in SETTINGS:
            object.__getattribute__(self, "__dict__").setdefault("_reads", set()).add(name)
        return object.__getattribute__(self, name)

    def reads(self) -> set[str]:
        got: set[str] = self.__dict__.pop("_reads", set())
        return got


def _busy_trial(store: Store) -> TrialInfo:
    """A trial with data for every rule: batches that wait, a full CPU, memory that grows,
    an evaluation, an idle GPU and a busy one without SM activity."""
    tr = trial(store)
    n = 180
    store.add_events(
        [Event(tr.id, "optimizer_step", T0 + 5 + k, "AdamW", k + 1) for k in range(170)]
        + [Event(tr.id, "evaluation", T0 + 100.5, "eval", None, 5.0)]
        + [Event(tr.id, "data_wait", T0 + 2 + k * 0.5, None, k, 0.2, 0.5) for k in range(300)]
    )
    put(store, tr, "cpu.util", [95.0] * n)
    put(store, tr, "cpu.capacity", [4.0] * n)
    put(store, tr, "cpu.mem", np.linspace(1, 3.9, n) * GIB)
    put(store, tr, "cpu.mem.limit", [4 * GIB] * n)
    put(store, tr, "train.data_wait", [40.0] * n)
    for dev, util in (("0", 2.0), ("1", 95.0)):
        put(store, tr, "gpu.util", [util] * n, dev)
        put(store, tr, "gpu.mem", np.linspace(10, 75, n) * GIB, dev)
        put(store, tr, "gpu.mem.total", [H100] * n, dev)
        put(store, tr, "gpu.power", [100.0] * n, dev)
        put(store, tr, "gpu.power.limit", [700.0] * n, dev)
    put(store, tr, "torch.alloc_retries", [0.0] * 90 + [3.0] * 90, "1")
    return tr


def test_each_rule_reads_only_the_settings_it_names(store: Store) -> None:
    tr = _busy_trial(store)
    # the serving rules judge load levels: the synthetic engine's queueing level, on a GPU
    gpu = {"gpu.dram_active": 80.0, "gpu.tensor_active": 5.0, "gpu.sm_active": 20.0}
    level = store.get_trial(write_load_run(store, engine=Engine(gpu=gpu))[6])
    serving = {r.key for r in FINDINGS if r.__module__.endswith("._rules._serving")}
    assert len(serving) == 5
    s = _Recording()
    s.reads()
    found = set()
    for rule in FINDINGS:
        subject = level if rule.key in serving else tr
        fs = rule.findings(TrialData(store, subject), s, GPU_CATALOG)
        found |= {f.rule for f in fs}
        reads = s.reads()
        assert reads, rule.key  # it ran far enough to read a setting
        assert reads <= set(rule.settings), (rule.key, reads - set(rule.settings))
    # the data reached most rules' judgement, not only their first check
    assert len(found) >= 10, found


# ---------------------------------------------------------------------- the new settings
def _eval_after_a_step(store: Store) -> TrialInfo:
    """CPU memory at 1 GiB, 2 GiB from t=60 s, and 2.3 GiB during an evaluation at 100 s."""
    tr = trial(store, "eval")
    mem = np.full(160, 1 * GIB)
    mem[59:] = 2 * GIB
    mem[99:120] = 2.3 * GIB
    put(store, tr, "cpu.mem", mem)
    store.add_events([Event(tr.id, "evaluation", T0 + 99.5, "eval", None, 60.0)])
    return tr


def test_the_evaluation_baseline_is_at_most_a_setting_long(store: Store) -> None:
    tr = _eval_after_a_step(store)
    (f,) = only(store, tr, "eval_memory_spike")  # 30 s before: all at 2 GiB
    assert f.evidence["per_evaluation"][0]["before_bytes"] == pytest.approx(2 * GIB)
    assert f.evidence["max_added_bytes"] == pytest.approx(0.3 * GIB)
    (g,) = only(store, tr, "eval_memory_spike", eval_spike_baseline_max_s=60.0)
    before = g.evidence["per_evaluation"][0]["before_bytes"]
    assert before == pytest.approx((20 * 1 + 40 * 2) / 60 * GIB, rel=0.03)
    assert g.evidence["max_added_bytes"] == pytest.approx(2.3 * GIB - before)


def _h100_trial(store: Store, util: float) -> TrialInfo:
    tr = trial(store, f"gpu{util:g}", 3600.0)
    put(store, tr, "gpu.mem", [17.6 * GIB] * 60, "0")
    put(store, tr, "gpu.mem.total", [H100] * 60, "0")
    put(store, tr, "gpu.util", [util] * 60, "0")
    return tr


def test_right_size_severity_follows_the_price_share_setting(store: Store) -> None:
    tr = _h100_trial(store, 60.0)  # an L4 ($0.80/h) does for an H100 ($7.00/h)
    (f,) = only(store, tr, "right_size")
    assert f.severity == "moderate"
    (g,) = only(store, tr, "right_size", rightsize_moderate_price_pct=10.0)  # 0.80 > 0.70
    assert g.severity == "low" and g.evidence["recommended"]["key"] == "l4"


def test_right_size_warns_of_a_slower_gpu_from_the_utilization_setting(store: Store) -> None:
    tr = _h100_trial(store, 60.0)
    (f,) = only(store, tr, "right_size")
    assert ADVICE_SLOWER in f.advice and "same run time" in f.message
    (g,) = only(store, tr, "right_size", rightsize_slower_util_pct=70.0)
    assert ADVICE_SLOWER not in g.advice and "same run time" not in g.message
    quiet = _h100_trial(store, 40.0)
    (h,) = only(store, quiet, "right_size", rightsize_slower_util_pct=30.0)
    assert ADVICE_SLOWER in h.advice


def test_new_settings_load_from_the_project_and_the_environment(tmp_path: Path) -> None:
    (tmp_path / "tunescope.toml").write_text(
        "[findings]\neval_spike_baseline_max_s = 45\nrightsize_moderate_price_pct = 25\n",
        encoding="utf-8",
    )
    env = {
        "TUNESCOPE_RIGHTSIZE_SLOWER_UTIL_PCT": "70",
        "TUNESCOPE_RIGHTSIZE_MODERATE_PRICE_PCT": "",
    }
    got = load_settings(tmp_path, env)
    assert got.settings.eval_spike_baseline_max_s == 45
    assert got.settings.rightsize_moderate_price_pct == 25
    assert got.settings.rightsize_slower_util_pct == 70.0
    assert got.source("rightsize_slower_util_pct") == "$TUNESCOPE_RIGHTSIZE_SLOWER_UTIL_PCT"
    assert got.source("eval_spike_baseline_max_s").endswith("tunescope.toml [findings]")
    assert got.to_dict()["rightsize_moderate_price_pct"]["default"] == 50.0
    with pytest.raises(ConfigError, match="rightsize_moderate_price_pct is a percentage"):
        load_settings(tmp_path, {"TUNESCOPE_RIGHTSIZE_MODERATE_PRICE_PCT": "150"})
    with pytest.raises(ConfigError, match="eval_spike_baseline_max_s must be a number"):
        FindingSettings(eval_spike_baseline_max_s=-1.0)


def test_packing_follows_its_memory_and_utilization_settings(store: Store) -> None:
    tr = trial(store, "small", 600.0)
    for dev in ("0", "1"):  # two GPUs: the fuller one decides
        put(store, tr, "gpu.mem", [(12.0 if dev == "1" else 6.0) * GIB] * 60, dev)
        put(store, tr, "gpu.mem.total", [H100] * 60, dev)
        put(store, tr, "gpu.proc_util", [10.0] * 60, dev)
        put(store, tr, "gpu.util", [70.0] * 60, dev)  # others' work on the same GPUs
    (f,) = only(store, tr, "pack_trials")
    assert f.device == "1" and f.evidence["gpus"] == 2
    assert f.evidence["peak_pct"] == pytest.approx(100 * 12 * GIB / H100)
    assert f.evidence["per_gpu"] == 6  # 79.6 GiB / 12 GiB; 100% / 10% would be 10
    assert f.evidence["mig"]["profile"] == "1g.20gb"  # 1g.10gb cannot hold 14.4 GiB
    assert only(store, tr, "pack_trials", pack_mem_pct=15.0) == []  # 12 GiB is 15.1%
    assert only(store, tr, "pack_trials", pack_util_pct=10.0) == []
    (g,) = only(store, tr, "pack_trials", rightsize_headroom_pct=60.0)  # 19.2 GiB still fits
    assert g.evidence["mig"]["profile"] == "1g.20gb"
    (h,) = only(store, tr, "pack_trials", rightsize_headroom_pct=70.0)  # 20.4 GiB does not
    assert h.evidence["mig"]["profile"] == "3g.40gb"


def test_a_second_hosts_series_leave_the_findings_whole(store: Store) -> None:
    """A multi-node trial: another node's series of every metric, device for device, beside
    the trial's own. Rules still read one series per (metric, device), the trial's host's,
    so each finding comes once, as before; the other node's are read by naming it."""
    tr = _busy_trial(store)

    def seen() -> list[tuple[str, str | None, str | None, str]]:
        fs = findings_for_trial(store, tr.id, FindingSettings())
        assert len({f.id for f in fs}) == len(fs)
        return sorted((f.rule, f.metric, f.device, f.severity) for f in fs)

    before = seen()
    assert before
    for s in store.list_series(tr.id):
        sid = store.series(tr.id, s.metric, s.device, host="node-b").id
        store.append_samples([(sid, T0 + 1.0 + k, 50.0) for k in range(180)])
    assert seen() == before
    d = TrialData(store, tr)
    assert d.hosts() == sorted({tr.host, "node-b"})
    assert d.devices("gpu.util") == ["0", "1"] == d.devices("gpu.util", "node-b")
    own = d.trace("gpu.util", "0")
    other = d.trace("gpu.util", "0", host="node-b")
    assert own is not None and other is not None
    assert (own.series.host, own.v.max()) == (tr.host, 2.0)
    assert (other.series.host, other.v.max()) == ("node-b", 50.0)
