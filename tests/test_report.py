"""`tunescope report`: text, JSON, Markdown with PNG charts beside it, HTML with them embedded,
and one-line errors with exit code 2 for bad input. Run the way a user runs it: a subprocess
of the real CLI entry point (with `report` registered on the app if it is not yet)."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import cli as run_cli
from cli_helpers import one_line_error
from store_helpers import damage_chunk
from tunescope.analyze import findings_for_run, to_dict
from tunescope.analyze._charts import EVAL_COLOR, trial_png
from tunescope.analyze._report import build_report
from tunescope.store import CHUNK_SAMPLES, Event, Store, open_store

T0 = 1_700_000_000.0
GIB = 1024.0**3
H100 = 81559 * 1024.0**2


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``tunescope report ARGS``."""
    return run_cli("report", *args, cwd=cwd)


def _put(st: Store, tid: int, metric: str, values: np.ndarray, device: str | None = None) -> None:
    sid = st.series(tid, metric, device).id
    st.append_samples([(sid, T0 + 1 + k, float(v)) for k, v in enumerate(values)])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A run of two trials: <b>slow</b> (input-bound, on an H100 it fills to a fifth, with
    evaluations) and 'plain'."""
    path = str(tmp_path_factory.mktemp("report") / "store.db")
    with open_store(path) as st:
        run = st.ensure_run("sweep", start=T0)
        a = st.create_trial(run.id, "<b>slow</b>", {"lr": 3e-4}, start=T0, interval=1.0)
        b = st.create_trial(run.id, "plain", {"lr": 1e-3}, start=T0, interval=1.0)
        n = 120
        t = np.arange(n)
        _put(st, a.id, "cpu.util", np.full(n, 35.0))
        _put(st, a.id, "cpu.mem", 3 * GIB + 0.2 * GIB * np.sin(t / 7))
        _put(st, a.id, "gpu.util", np.where((t % 40) > 33, 20.0, 45.0), "0")
        _put(st, a.id, "gpu.mem", np.full(n, 15 * GIB), "0")
        _put(st, a.id, "gpu.mem.total", np.full(n, H100), "0")
        st.add_events(
            [
                Event(a.id, "data_wait", T0 + 2 + k * 0.1, None, k, 0.06, 0.1)
                for k in range(1000)
                if (2 + k * 0.1) % 40 < 33.9
            ]
        )  # none in evals
        st.add_events(
            [Event(a.id, "optimizer_step", T0 + 2 + k * 0.5, "AdamW", k + 1) for k in range(230)]
        )
        st.add_events(
            [Event(a.id, "evaluation", T0 + 40 * k + 34, "eval", None, 5.0) for k in range(3)]
        )
        _put(st, b.id, "cpu.util", np.full(60, 90.0))
        _put(st, b.id, "cpu.mem", np.full(60, 1 * GIB))
        st.add_events([Event(b.id, "sampler_gap", T0 + 30, "sampler restarted", None, 2.5)])
        for tid, end in ((a.id, T0 + n), (b.id, T0 + 60)):
            st.update_trial(tid, state="completed", end=end)
    return path


def test_text_report(url: str) -> None:
    p = cli("sweep", "--store", url)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "run 'sweep' (2 trial(s)" in out
    assert "Trial <b>slow</b> [completed]" in out and "Trial plain [completed]" in out
    assert re.search(r"CPU Memory Usage\s+3\.\d\d GiB\s+3\.\d\d GiB", out)
    assert re.search(r"GPU Utilization Percent\s+45%\s+4\d%", out)
    assert "[HIGH] Input-bound: 60% of step time waiting for data  (0:02–" in out
    assert "- Load batches in parallel" in out
    assert "[MODERATE] GPU 0 under-used" in out
    assert "230 optimizer steps, 3 evaluations, 0 checkpoints\n" in out  # slow: no gap
    assert "1 sampler gap(s): no hardware samples for 2.5 s in all" in out  # plain: named
    assert "restarted, at 0:30)" in out
    assert "Findings: none" in out  # plain


def test_json_report_carries_the_findings_and_the_peaks(url: str) -> None:
    p = cli("sweep", "--store", url, "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["run"]["name"] == "sweep" and [t["name"] for t in doc["trials"]] == [
        "<b>slow</b>",
        "plain",
    ]
    slow = doc["trials"][0]
    assert slow["metrics"]["gpu.mem"]["peak"] == pytest.approx(15 * GIB)
    assert slow["metrics"]["gpu.mem"]["unit"] == "GiB"
    assert slow["events"] == {
        "optimizer_steps": 230,
        "evaluations": 3,
        "checkpoints": 0,
        "sampler_gaps": [],
    }
    assert doc["trials"][1]["events"]["sampler_gaps"] == [{"t": T0 + 30, "duration_s": 2.5}]
    with open_store(url) as st:
        expected = to_dict(findings_for_run(st, "sweep"))
    assert slow["findings"] == expected[str(slow["id"])]
    assert {f["rule"] for f in slow["findings"]} >= {"input_bound", "gpu_underused", "right_size"}


def test_a_damaged_chunk_is_one_warning_and_the_report_uses_the_rest(tmp_path: Path) -> None:
    path = str(tmp_path / "damaged.db")
    n = 3 * CHUNK_SAMPLES
    util = np.full(n, 40.0)
    util[CHUNK_SAMPLES + 7] = 97.0  # in the chunk to be damaged
    with open_store(path) as st:
        run = st.ensure_run("hurt", start=T0)
        t = st.create_trial(run.id, "only", start=T0, interval=1.0)
        _put(st, t.id, "gpu.util", util, "0")
        _put(st, t.id, "cpu.util", np.full(n, 50.0))
        st.update_trial(t.id, state="completed", end=T0 + n + 1)
        sid = st.list_series(t.id, "gpu.util")[0].id
    damage_chunk(path, sid, 1)
    warning = (
        "tunescope: warning: series gpu.util on GPU 0 of trial 'only' in run 'hurt': "
        "1 damaged chunk could not be decoded and was skipped; the rest is used"
    )
    p = cli("hurt", "--store", path, "--format", "json")
    assert p.returncode == 0 and p.stderr.splitlines() == [warning], p.stderr
    doc = json.loads(p.stdout)
    (trial,) = doc["trials"]
    # peak and mean come from the chunks' stored summaries, the damaged one's included
    assert trial["metrics"]["gpu.util"]["peak"] == 97.0
    assert trial["metrics"]["cpu.util"]["peak"] == 50.0
    html = cli("hurt", "--store", path, "--format", "html", "--out", str(tmp_path / "r.html"))
    assert html.returncode == 0
    assert html.stderr.splitlines() == ["wrote " + str(tmp_path / "r.html"), warning]


def test_one_trial_and_user_prices(url: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = cli(
        "sweep",
        "--store",
        url,
        "--format",
        "json",
        "--trial",
        "<b>slow</b>",
        "--out",
        str(out),
        "--price",
        "h100-80gb=2.5",
        "--price",
        "l4=0.5",
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    (t,) = doc["trials"]
    (rs,) = [f for f in t["findings"] if f["rule"] == "right_size"]
    assert rs["evidence"]["current"]["price_per_hour"] == 2.5
    assert rs["evidence"]["recommended"]["key"] == "l4"
    assert rs["evidence"]["saving_usd"] == pytest.approx((2.5 - 0.5) * 120 / 3600)


def _png_ok(data: bytes) -> None:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_markdown_report_writes_its_charts_beside_it(url: str, tmp_path: Path) -> None:
    out = tmp_path / "pr" / "perf.md"
    out.parent.mkdir()
    p = cli("sweep", "--store", url, "--format", "md", "--out", str(out))
    assert p.returncode == 0, p.stderr
    md = out.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert links == ["perf-1-b-slow-b.png", "perf-2-plain.png"]
    for name in links:
        _png_ok((out.parent / name).read_bytes())
    assert sorted(x.name for x in out.parent.iterdir()) == sorted([*links, "perf.md"])
    assert "# tunescope report: run `sweep`" in md
    assert "- **HIGH** **Input-bound: 60% of step time waiting for data** (0:02–" in md
    assert "| CPU Utilization Percent | 35% | 35% |" in md


def test_html_report_embeds_its_charts(url: str, tmp_path: Path) -> None:
    out = tmp_path / "perf.html"
    p = cli("sweep", "--store", url, "--format", "html", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert [x.name for x in tmp_path.iterdir()] == ["perf.html"]
    page = out.read_text()
    assert page.startswith("<!doctype html>")
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 2
    for data in imgs:
        _png_ok(base64.b64decode(data))
    assert "&lt;b&gt;slow&lt;/b&gt;" in page and "<b>slow</b>" not in page
    assert '<b class="high">HIGH</b>' in page


def _pixels(png: bytes) -> np.ndarray:
    import matplotlib.image

    return (matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3] * 255).round()


def test_charts_draw_steps_green_and_evaluations_shaded_orange(url: str) -> None:
    with open_store(url) as st:
        rep = build_report(st, "sweep", charts=True)
    chart = rep.trials[0].chart
    assert chart is not None and len(chart.evals) == 3 and len(chart.steps) == 230
    assert [p.key for p in chart.panels] == ["cpu.util", "gpu.util", "cpu.mem", "gpu.mem"]
    bare = type(chart)(chart.panels, [], [], [])
    full, none = _pixels(trial_png(chart, title="a")), _pixels(trial_png(bare, title="a"))
    rgb = np.array([int(EVAL_COLOR[i : i + 2], 16) for i in (1, 3, 5)])
    shade = 255 - 0.15 * (255 - rgb)  # the orange at 15% over white

    def orange(px: np.ndarray) -> int:
        return int((np.abs(px - shade).max(axis=-1) <= 3).sum())

    def green(px: np.ndarray) -> int:
        return int(((px[..., 1] - px[..., 0] > 20) & (px[..., 1] - px[..., 2] > 10)).sum())

    assert orange(full) > 2000 and orange(none) == 0
    assert green(full) > 2000 and green(none) < 100  # the legend's green line


def test_charts_of_many_steps_draw_a_density_strip(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with open_store(path) as st:
        run = st.ensure_run("dense", start=T0)
        tr = st.create_trial(run.id, "t", {}, start=T0)
        _put(st, tr.id, "cpu.mem", np.full(100, GIB))
        st.add_events(
            [Event(tr.id, "optimizer_step", T0 + 1 + k * 0.01, "SGD", k + 1) for k in range(9000)]
        )
        st.update_trial(tr.id, state="completed", end=T0 + 100)
        chart = build_report(st, "dense", charts=True).trials[0].chart
    assert chart is not None and chart.steps == [] and chart.step_bins
    assert sum(n for _, _, n in chart.step_bins) >= 9000
    _png_ok(trial_png(chart, title="dense"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sweep", "--format", "md"], "--format md needs --out PATH, a file"),
        (["sweep", "--format", "md", "--out", "-"], "--format md needs --out PATH"),
        (["sweep", "--fail-on", "critical"], "unknown --fail-on 'critical': use low, moderate"),
        (["sweep", "--format", "pdf"], "unknown --format 'pdf': use text, json, md, html"),
        (["nope"], "no run 'nope'"),
        (["sweep", "--trial", "nope"], "run 'sweep' has no trial 'nope'"),
        (["sweep", "--price", "h100"], "malformed --price 'h100'"),
        (["sweep", "--price", "h1000=2"], "unknown GPU 'h1000'"),
        (["sweep", "--price", "l4=-1"], "price of l4 must be a number"),
        (["sweep", "--out", "/no/such/dir/r.txt"], "directory /no/such/dir does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(url: str, args: list[str], needle: str) -> None:
    one_line_error(cli(*args, "--store", url), needle)


def test_charts_without_matplotlib_is_one_line(url: str, tmp_path: Path) -> None:
    blocked = (
        "import sys\n"
        'sys.modules["matplotlib"] = None\n'
        "from tunescope.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked,
            "report",
            "sweep",
            "--store",
            url,
            "--format",
            "md",
            "--out",
            str(tmp_path / "r.md"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    one_line_error(p, "pip install 'tunescope[report]'")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_store_is_one_line(tmp_path: Path) -> None:
    one_line_error(cli("sweep", "--store", "mysql://db"), "unknown store URL")
