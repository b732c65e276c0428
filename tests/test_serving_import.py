"""`tunescope import vllm-bench|guidellm|aiperf FILE...` run as a user runs it: each benchmark
a load level (trial) with its summary as scalars, guidellm's requests as events. The result
files are fixtures written by hand in each tool's documented shape (tests/fixtures/serving/
fixture-*.json, each saying so in its ``_fixture`` key): none of the three runs here
(vLLM does not install; guidellm's and AIPerf's tokenizers need the model hub)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli, one_line_error
from tunescope.analyze import serving_run
from tunescope.store import open_store

FIX = Path(__file__).parent / "fixtures" / "serving"


def levels(db: Path, run: str) -> dict[str, tuple[Any, dict[str, float], list[Any]]]:
    with open_store(str(db)) as st:
        out = {}
        for t in st.list_trials(st.get_run(run).id):
            scalars = {s.name: s.value for s in st.scalars(t.id)}
            out[t.name] = (t, scalars, st.all_events(t.id, kinds=["request"]))
        return out


def test_vllm_bench_results_become_levels(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    p = cli(
        "import",
        "vllm-bench",
        str(FIX / "fixture-vllm-bench-c1.json"),
        str(FIX / "fixture-vllm-bench-r4.json"),
        "--run",
        "v",
        "--store",
        str(db),
    )
    assert p.returncode == 0, p.stderr
    got = levels(db, "v")
    assert set(got) == {"c1", "r4"}
    t, s, events = got["c1"]
    assert t.state == "completed" and events == []
    assert t.params["load.mode"] == "concurrency" and t.params["load.level"] == 1
    assert t.params["load.source"] == "vllm-bench"
    assert t.params["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert (t.end or 0) - t.start == pytest.approx(50.0, abs=1e-3)
    assert s["load.requests_ok"] == 100 and s["load.requests_error"] == 0
    assert s["load.request_throughput"] == 2.0 and s["load.goodput"] == 1.9
    assert s["load.ttft_p50_s"] == pytest.approx(0.038)
    assert s["load.ttft_p99_s"] == pytest.approx(0.060)
    assert s["load.tpot_mean_s"] == pytest.approx(0.0036)
    assert s["load.e2el_p90_s"] == pytest.approx(0.520)
    r, sr, _ = got["r4"]
    assert r.params["load.mode"] == "rate" and r.params["load.level"] == 4.0
    assert r.params["load.burstiness"] == 0.5
    assert sr["load.requests_error"] == 2 and "load.goodput" not in sr
    assert "load.ttft_p90_s" not in sr  # not in the file: absent, never zero


def test_guidellm_benchmarks_and_their_requests(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    f = str(FIX / "fixture-guidellm.json")
    p = cli("import", "guidellm", f, "--run", "g", "--store", str(db))
    assert p.returncode == 0, p.stderr
    got = levels(db, "g")
    assert set(got) == {"c1", "c4"}
    t, s, events = got["c1"]
    assert t.start == 1796100000.0 and t.end == 1796100010.0
    assert s["load.requests_ok"] == 2 and s["load.requests_error"] == 1
    assert s["load.ttft_p90_s"] == pytest.approx(0.060)
    assert s["load.e2el_mean_s"] == 2.5
    assert s["load.itl_p50_s"] == pytest.approx(0.0193)
    assert [(e.step, e.name) for e in events] == [(0, "ok"), (1, "ok"), (2, "error")]
    first = events[0]
    assert first.t == 1796100001.0 and first.duration == 2.0 and first.value == 0.040
    assert first.data["completion_tokens"] == 128 and first.data["t_first"] == 1796100001.04
    assert events[2].data["error"] == "HTTP 503: overloaded" and events[2].value is None
    assert got["c4"][0].params["load.level"] == 4 and got["c4"][2] == []


def test_aiperf_profile_export(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    p = cli("import", "aiperf", str(FIX / "fixture-aiperf.json"), "--run", "a", "--store", str(db))
    assert p.returncode == 0, p.stderr
    t, s, _ = levels(db, "a")["c8"]
    assert t.params["model"] == "Qwen/Qwen3-0.6B" and t.params["load.source"] == "aiperf"
    assert (t.end or 0) - t.start == 60.0
    assert s["load.requests_ok"] == 390 and s["load.requests_error"] == 10
    assert s["load.goodput"] == 6.0 and s["load.output_throughput"] == 832.0
    assert s["load.ttft_p99_s"] == pytest.approx(0.260)
    assert s["load.e2el_p50_s"] == pytest.approx(1.150)


def test_imported_summaries_are_levels_of_the_analysis(tmp_path: Path) -> None:
    """Levels without request events are read from their summary scalars: the serving
    analysis (the Serving tab's data, findings), the report's table and the sizing."""
    db = tmp_path / "s.db"
    for tool, f, run in (
        ("vllm-bench", "fixture-vllm-bench-c1.json", "v"),
        ("aiperf", "fixture-aiperf.json", "a"),
        ("guidellm", "fixture-guidellm.json", "g"),
    ):
        p = cli("import", tool, str(FIX / f), "--run", run, "--store", str(db))
        assert p.returncode == 0, p.stderr
    with open_store(str(db)) as st:
        v = serving_run(st, "v")
        g = serving_run(st, "g")
    assert v is not None and g is not None
    (c1,) = v.levels
    s = c1.stats
    assert (s.requests, s.ok, s.errors, s.duration_s) == (100, 100, 0, 50.0)
    assert (s.ttft.p50, s.ttft.p90, s.ttft.p99) == pytest.approx((0.038, 0.045, 0.060))
    assert s.ttft.mean == pytest.approx(0.040) and s.ttft.n == 100
    assert s.e2el.p99 == pytest.approx(0.560) and s.itl.p50 == pytest.approx(0.0035)
    assert s.request_throughput == 2.0 and s.output_throughput == 256.0
    assert s.goodput == 1.9 and s.good == 95
    # tokens: the tool's throughputs over its duration (the file's totals: 12800 and 51200)
    assert s.completion_tokens == 12_800 and s.prompt_tokens == 51_200
    # guidellm: c1 from its requests (3, one failed), c4 (no requests in the file) from its
    # summary
    by = {lv.trial.name: lv.stats for lv in g.levels}
    assert (by["c1"].requests, by["c1"].ok) == (3, 2)
    _, c4, events = levels(db, "g")["c4"]
    assert events == [] and by["c4"].ok == c4["load.requests_ok"] > 0
    assert by["c4"].ttft.p50 == pytest.approx(c4["load.ttft_p50_s"])

    p = cli("report", "v", "--store", str(db))
    assert p.returncode == 0, p.stderr
    (row,) = [line.split() for line in p.stdout.splitlines() if line.startswith("  c1")]
    assert row[:5] == ["c1", "c1", "100/0", "38/60", "ms"]
    # sizing from the imported AIPerf level: 8 concurrent per replica meet ttft 300 ms
    work = "context=1024,output=128,concurrency=16,ttft=300ms"
    p = cli("report", "a", "--store", str(db), "--workload", work, "--format", "json")
    assert p.returncode == 0, p.stderr
    figs = json.loads(p.stdout)["sizing"]["figures"]
    assert figs["good_load_per_replica"]["value"] == 8
    assert figs["replicas"]["value"] == 2 and figs["replicas"]["trial"] == "c8"
    # under a tighter target (p99 TTFT 260 ms) no level is good
    p = cli("report", "a", "--store", str(db), "--workload", work.replace("300", "200"))
    assert p.returncode == 0, p.stderr
    assert "no level meets the SLO, not even c8" in p.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["vllm-perf", "x.json"], "unknown tool 'vllm-perf'"),
        (["guidellm", str(FIX / "fixture-aiperf.json")], "not a guidellm report"),
        (["aiperf", str(FIX / "fixture-guidellm.json")], "not an AIPerf profile export"),
        (["vllm-bench", str(FIX / "vllm.prom")], "not JSON"),
        (["vllm-bench", "/nonexistent.json"], "cannot be read"),
        # one bad file among good ones: nothing of either is written
        (
            ["vllm-bench", str(FIX / "fixture-vllm-bench-c1.json"), str(FIX / "nim.prom")],
            "not JSON",
        ),
    ],
)
def test_a_bad_file_is_one_line_exit_2_nothing_written(
    tmp_path: Path, args: list[str], says: str
) -> None:
    db = tmp_path / "s.db"
    p = cli("import", *args, "--store", str(db))
    one_line_error(p, says)
    assert not db.exists()
