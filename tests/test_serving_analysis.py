"""The serving analysis: level_stats's definitions (those of ``vllm bench serve``), a load
run's levels, and sizing for a workload (``tunescope report --workload``), on a load run made
per SERVING_CONTRACT by the synthetic engine of tests/serving_helpers.py, on every backend."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli, one_line_error
from serving_helpers import Engine, write_load_run
from tunescope.analyze import (
    Slo,
    build_report,
    level_stats,
    parse_slo,
    parse_workload,
    render_report,
    serving_run,
    size_workload,
)
from tunescope.errors import ConfigError
from tunescope.store import Event, open_store

WORKLOAD = "context=128,output=32,concurrency=6,ttft=500ms,tpot=50ms"


def _req(
    t: float, e2el: float, ttft: float | None, out: int, itl: list[float], ok: bool = True
) -> Event:
    tpot = (e2el - ttft) / (out - 1) if ttft is not None and out > 1 else None
    data = {"ttft": ttft, "tpot": tpot, "itl": itl, "prompt_tokens": 10, "completion_tokens": out}
    return Event(1, "request", t, "ok" if ok else "error", 0, e2el, ttft, data)


def test_level_stats_follows_vllm_bench_serve() -> None:
    events = [
        _req(0.0, 1.0, 0.1, 10, [0.1] * 9),
        _req(0.5, 2.5, 0.3, 12, [0.2] * 11),
        _req(1.0, 0.2, 0.2, 1, []),  # one token: no TPOT, counts TPOT 0 for goodput
        _req(1.5, 0.5, None, 0, [], ok=False),  # an error: counted, not in the latencies
        Event(1, "mark", 0.2, "other kinds are ignored"),
    ]
    s = level_stats(events, Slo(ttft_s=0.25, tpot_s=0.15))
    assert (s.requests, s.ok, s.errors) == (4, 3, 1)
    assert s.duration_s == pytest.approx(3.0)  # first sent (0.0) to last done (0.5 + 2.5)
    assert s.ttft.p50 == pytest.approx(0.2) and s.ttft.n == 3
    assert s.ttft.p99 == pytest.approx(float(np.percentile([0.1, 0.3, 0.2], 99)))
    assert s.tpot.n == 2 and s.tpot.mean == pytest.approx((0.1 + 0.2) / 2)
    assert s.itl.n == 20 and s.itl.mean == pytest.approx((9 * 0.1 + 11 * 0.2) / 20)
    assert s.e2el.p50 == pytest.approx(1.0)
    assert s.completion_tokens == 23 and s.prompt_tokens == 30
    assert s.request_throughput == pytest.approx(3 / 3.0)
    assert s.output_throughput == pytest.approx(23 / 3.0)
    assert s.total_token_throughput == pytest.approx(53 / 3.0)
    # good: the first (ttft 0.1, tpot 0.1) and the one-token request (ttft 0.2, tpot 0)
    assert s.good == 2 and s.goodput == pytest.approx(2 / 3.0)
    assert level_stats(events).goodput is None  # no SLO: no goodput
    empty = level_stats([])
    assert empty.requests == 0 and empty.ttft.p99 is None and empty.request_throughput is None


def test_slo_and_workload_parsing() -> None:
    assert parse_slo("ttft=500ms,tpot=50ms,e2el=10s") == Slo(0.5, 0.05, 10.0)
    w = parse_workload(
        "context=4096,output=256,concurrency=64,ttft=500ms,tpot=50ms,memory=80GiB,power=700W"
    )
    assert (w.context, w.output, w.concurrency, w.rate) == (4096, 256, 64, None)
    assert w.memory == 80 * 1024**3 and w.power == 700 and w.slo == Slo(0.5, 0.05)
    assert parse_workload("context=10,output=2,rate=2.5").mode == "rate"
    for bad, said in [
        ("context=10,output=2", "one of concurrency= or rate="),
        ("context=10,output=2,rate=1,concurrency=2", "not both"),
        ("output=2,rate=1", "needs context="),
        ("context=10,output=20,rate=1", "exceeds context"),
        ("context=10.5,output=2,rate=1", "whole number"),
        ("context=10,output=2,rate=-1", "rate"),
        ("context=10,output=2,rate=1,ttft=0ms", "ttft"),
        ("context=10,output=2,rate=1,rate=2", "given twice"),
    ]:
        with pytest.raises(ConfigError, match=said):
            parse_workload(bad)


def test_levels_are_sorted_and_queueing_raises_ttft(store_url: str) -> None:
    with open_store(store_url) as st:
        ids = write_load_run(st, levels=(6, 1, 2))  # written out of order
        sr = serving_run(st, "serve")
        assert sr is not None
        assert [lv.level for lv in sr.levels] == [1.0, 2.0, 6.0]
        assert [lv.trial.id for lv in sr.levels] == [ids[1], ids[2], ids[6]]
        c2, c6 = sr.levels[1].stats, sr.levels[2].stats
        # two slots: at 6 clients four wait a whole service (0.67 s) or two
        assert c6.ttft.p50 is not None and c2.ttft.p50 is not None
        assert c6.ttft.p50 >= 2 * c2.ttft.p50
        assert c2.meets(sr.slo) and not c6.meets(sr.slo)
        missed = sr.first_missed()
        assert missed is not None and missed.trial.name == "c6"
        assert c6.goodput is not None and c6.request_throughput is not None
        assert c6.goodput < c6.request_throughput  # those that waited miss the TTFT target
        assert serving_run(st, st.ensure_run("plain").id) is None


def test_sizing_for_concurrency_6_is_three_replicas_of_two_slots(store_url: str) -> None:
    with open_store(store_url) as st:
        write_load_run(st)
        sr = serving_run(st, "serve")
        assert sr is not None
        sz = size_workload(st, sr, parse_workload(WORKLOAD + ",memory=16GiB,power=300W"))
        per = sz.figure("good_load_per_replica")
        assert (per.value, per.basis, per.trial) == (2.0, "measured", "c2")
        assert sz.figure("replicas").value == 3.0
        assert sz.figure("slots_per_replica").value == 2.0
        # weights 2 GiB + 128 KiB/token x 128 tokens x 2 in flight
        mem = sz.figure("memory_per_replica")
        assert mem.value == pytest.approx(2 * 1024**3 + 131072 * 128 * 2)
        assert mem.basis == "extrapolated"
        assert sz.figure("gpu").value == "t4"  # the smallest of the catalog: 16 GB holds 2.4
        assert sz.figure("power_total").value == 3 * 300.0
        assert sz.figure("power_total").basis == "given"
        cost = sz.figure("usd_per_million_output_tokens")
        c2 = sr.levels[1].stats
        assert c2.output_throughput is not None and isinstance(cost.value, float)
        assert cost.value == pytest.approx(0.35 / (c2.output_throughput * 3600) * 1e6)


def test_sizing_marks_other_shapes_and_modes_extrapolated(store_url: str) -> None:
    with open_store(store_url) as st:
        write_load_run(st)
        sr = serving_run(st, "serve")
        assert sr is not None
        other = size_workload(st, sr, parse_workload("context=4096,output=256,concurrency=6"))
        per = other.figure("good_load_per_replica")
        assert per.basis == "extrapolated" and "output 32 tokens measured, 256 asked" in per.note
        rate = size_workload(st, sr, parse_workload("context=128,output=32,rate=9"))
        per = rate.figure("good_load_per_replica")
        c2 = sr.levels[1].stats
        assert per.value == c2.request_throughput and per.basis == "extrapolated"
        assert c2.request_throughput is not None
        assert rate.figure("replicas").value == math.ceil(9 / c2.request_throughput)
        strict = size_workload(st, sr, parse_workload("context=128,output=32,rate=9,ttft=1ms"))
        none = strict.figure("good_load_per_replica")
        assert none.value is None and "not even c1" in none.note
        w = parse_workload("context=128,output=32,rate=9,ttft=1s")
        bare = write_load_run(st, "bare", engine=Engine(model={}), slo={})
        assert bare
        sr2 = serving_run(st, "bare")
        assert sr2 is not None and not sr2.slo.given()
        with pytest.raises(ConfigError, match="no SLO"):  # neither the workload nor the run
            size_workload(st, sr2, parse_workload("context=128,output=32,rate=9"))
        memory = size_workload(st, sr2, w).figure("memory_per_replica")
        assert memory.value is None and "weights=" in memory.note


def test_report_json_and_text_carry_levels_and_sizing(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with open_store(str(db)) as st:
        write_load_run(st)
        rep = build_report(st, "serve", workload=parse_workload(WORKLOAD))
    doc = json.loads(render_report(rep, "json")[0])
    assert [lv["trial"] for lv in doc["serving"]["levels"]] == ["c1", "c2", "c6"]
    assert doc["sizing"]["figures"]["replicas"]["value"] == 3
    assert doc["sizing"]["figures"]["good_load_per_replica"]["trial"] == "c2"
    text = render_report(rep, "text")[0]
    assert "Serving: 3 load level(s)" in text and "replicas: 3 (extrapolated, c2)" in text
    with open_store(str(db)) as st:
        drawn = build_report(st, "serve", workload=parse_workload(WORKLOAD), charts=True)
    md, pngs = render_report(drawn, "md")
    assert len(pngs) == 4 and "```text\nServing: 3 load level(s)" in md
    block = md.split("```text\n", 1)[1].split("\n```\n", 1)[0]
    assert "  replicas: 3 (extrapolated, c2)" in block.splitlines()
    page = render_report(drawn, "html")[0]
    assert "<pre>Serving: 3 load level(s)" in page and "replicas: 3 (extrapolated, c2)" in page
    # the CLI: the same answer, and a malformed workload exits 2 before anything is written
    report = ("report", "serve", "--store", str(db))
    out = tmp_path / "r.json"
    ok = cli(*report, "--format", "json", "--out", str(out), "--workload", WORKLOAD)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())["sizing"]["figures"]["replicas"]["value"] == 3
    out.unlink()
    bad = cli(*report, "--out", str(out), "--workload", "context=128,output=32,concurrency=six")
    one_line_error(bad, "--workload concurrency")
    assert not out.exists()
