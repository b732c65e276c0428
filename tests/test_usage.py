"""`tunescope usage` against a generated store of known truth (tests/usage_truth.py: SYNTHETIC
readings, 3 projects, 5 people, 2 GPU models, 40 trials over 90 days): every figure of every
group, to the second, in table, json and csv; and the definitions the figures rest on
(gaps, buckets, idle stretches cut by the window)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import usage_truth as ut
from tunescope.analyze import FindingSettings, usage_of
from tunescope.analyze._text import elapsed
from tunescope.analyze._usage import Points, idle_stretches, read_points
from tunescope.cli import main
from tunescope.store import Batch, Store, TrialEnd, TrialSpec, new_key, open_store

PLAN = ut.plan()
WINDOWS = {
    "all": ("2026-01-05", "2026-04-05", ut.DAY0, ut.DAY0 + 90 * 86400.0),
    "cut": ("2026-02-01T06:00", "2026-03-01", ut.DAY0 + 27.25 * 86400.0, ut.DAY0 + 55 * 86400.0),
}
PRICES = ["--price", "NVIDIA H100 80GB HBM3=2.5", "--price", "a100-80gb=1.5"]
PRICE_OF = {"NVIDIA H100 80GB HBM3": 2.5, "NVIDIA A100-SXM4-80GB": 1.5}
GROUPINGS = [["project"], ["user"], ["run"], ["host"], ["gpu_model"], ["day"], ["week"]]
FIGURES = (
    "gpu_held_s",
    "gpu_busy_s",
    "gpu_idle_s",
    "busy_by",
    "mem_peak_pct",
    "mem_mean_pct",
    "cpu_core_s",
    "cpu_quota_core_s",
    "trials",
    "failed_gpu_s",
    "pruned_gpu_s",
    "failed_pruned_pct",
    "cost_usd",
)


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("usage") / "known.db"
    with open_store(str(path)) as st:
        ut.write(st, PLAN)
    yield str(path)


def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, project: str, *args: str
) -> str:
    monkeypatch.setenv("TUNESCOPE_PROJECT", project)
    capsys.readouterr()
    code = main(["usage", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.err == ""
    return out.out


def _close(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)
    return bool(got == want)


def _mine(project: str) -> list[ut.TrialPlan]:
    return [p for p in PLAN if p.project == project]


def test_the_known_store_is_what_the_issue_asks_for() -> None:
    assert len(PLAN) == 40
    assert {p.project for p in PLAN} == set(ut.PROJECTS)
    assert {p.user for p in PLAN} == set(ut.PEOPLE)
    assert {p.model for p in PLAN} - {None} == set(ut.MODELS)
    assert {p.state for p in PLAN} == {"completed", "failed", "pruned"}
    assert max(p.start for p in PLAN) - min(p.start for p in PLAN) > 80 * 86400
    assert any(ut._idle_minutes(g.busy()) for p in PLAN for g in p.gpus)
    assert all(p.run.startswith("synthetic-") for p in PLAN)


@pytest.mark.parametrize("window", sorted(WINDOWS))
@pytest.mark.parametrize("by", [*GROUPINGS, ["user", "gpu_model"], ["run", "week"]], ids=str)
@pytest.mark.parametrize("project", ut.PROJECTS)
def test_json_is_exact_for_every_group_and_figure(
    known: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    project: str,
    by: list[str],
    window: str,
) -> None:
    since, until, lo, hi = WINDOWS[window]
    args = ["--since", since, "--until", until, "--format", "json", "--store", known, *PRICES]
    for b in by:
        args += ["--by", b]
    rows = json.loads(run_cli(capsys, monkeypatch, project, *args))
    want = ut.truth(_mine(project), by, lo, hi, PRICE_OF)
    assert [tuple(r[b] for b in by) for r in rows] == sorted(
        want, key=lambda k: tuple((v is not None, v or "") for v in k)
    )
    for r in rows:
        truth = want[tuple(r[b] for b in by)]
        assert set(r) == {*by, *FIGURES}
        for f in FIGURES:
            assert _close(r[f], truth[f]), (r, f, truth[f])


@pytest.mark.parametrize("by", [["user", "gpu_model"], ["day"], ["host", "week"]], ids=str)
def test_csv_and_table_say_the_same_to_the_second(
    known: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    by: list[str],
) -> None:
    since, until, lo, hi = WINDOWS["cut"]
    base = ["--since", since, "--until", until, "--store", known, *PRICES]
    for b in by:
        base += ["--by", b]
    want = ut.truth(_mine("vision"), by, lo, hi, PRICE_OF)
    text = run_cli(capsys, monkeypatch, "vision", *base, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == len(want) > 1
    for r in rows:
        truth = want[tuple(r[b] or None for b in by)]
        for f in FIGURES:
            w = truth[f]
            got: Any = r[f]
            if w is None:
                assert got == ""
            elif isinstance(w, str):
                assert got == w
            else:
                assert _close(float(got), float(w)), (f, got, w)
    table = run_cli(capsys, monkeypatch, "vision", *base).splitlines()
    assert table[0].split()[: len(by)] == by
    assert len(table) == 2 + len(want)
    for line in table[2:]:
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        key = tuple(None if c == "-" else c for c in cells[: len(by)])
        if key not in want:  # a key with spaces in it (a GPU model) spans several cells
            n = len(cells) - 13
            key = tuple(
                None if c == "-" else c for c in [*cells[: len(by) - 1], " ".join(cells[:n])]
            )
            cells = [*key, *cells[n:]]
        t = want[key]
        figures = cells[len(by) :]
        assert figures[0] == elapsed(t["gpu_held_s"])
        assert figures[1] == elapsed(t["gpu_busy_s"])
        assert figures[2] == elapsed(t["gpu_idle_s"])
        assert figures[3] == (t["busy_by"] or "-")
        pk, mn = t["mem_peak_pct"], t["mem_mean_pct"]
        assert figures[4] == ("-" if pk is None else f"{pk:.1f}%")
        assert figures[5] == ("-" if mn is None else f"{mn:.1f}%")
        assert figures[6] == elapsed(t["cpu_core_s"])
        assert figures[7] == elapsed(t["cpu_quota_core_s"])
        assert figures[8] == str(t["trials"])
        fp = t["failed_pruned_pct"]
        assert figures[9] == ("-" if fp is None else f"{fp:.1f}%")
        if t["cost_usd"] is None:
            assert figures[10] == "-"
        else:  # to the cent (summed in another order, a half cent may round apart)
            assert abs(float(figures[10][1:]) - t["cost_usd"]) <= 0.005 + 1e-9


def test_a_local_store_answers_for_its_project_only(
    known: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    since, until, _, _ = WINDOWS["all"]
    args = ["--since", since, "--until", until, "--format", "json", "--store", known]
    for project in ut.PROJECTS:
        rows = json.loads(run_cli(capsys, monkeypatch, project, *args, "--by", "project"))
        assert [r["project"] for r in rows] == [project]
        assert rows[0]["trials"] == len(_mine(project))


def test_without_prices_cost_is_unknown_not_zero(
    known: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    since, until, _, _ = WINDOWS["all"]
    args = ["--since", since, "--until", until, "--format", "json", "--store", known]
    rows = json.loads(run_cli(capsys, monkeypatch, "nlp", *args, "--by", "gpu_model"))
    assert rows and all(r["cost_usd"] is None for r in rows)
    one = json.loads(
        run_cli(capsys, monkeypatch, "nlp", *args, "--by", "gpu_model", "--price", "h100-80gb=3")
    )
    cost = {r["gpu_model"]: r["cost_usd"] for r in one}
    assert cost["NVIDIA A100-SXM4-80GB"] is None
    h100 = next(r for r in one if r["gpu_model"] == "NVIDIA H100 80GB HBM3")
    assert _close(cost["NVIDIA H100 80GB HBM3"], h100["gpu_held_s"] / 3600.0 * 3.0)


def test_every_backend_and_the_team_server_give_the_same_figures(any_store_url: str) -> None:
    """The same plan written to each backend answers the same: SQLite, PostgreSQL, and a team
    server (an HTTP store: the project its token sees)."""
    with open_store(any_store_url) as st:
        mine = [dataclasses.replace(p, project=st.project) for p in _mine("speech")]
        ut.write(st, mine)
        u = usage_of(st, ut.DAY0, ut.DAY0 + 90 * 86400.0, ["day"], now=ut.DAY0 + 100 * 86400.0)
    want = ut.truth(mine, ["day"], ut.DAY0, ut.DAY0 + 90 * 86400.0)
    assert len(u.rows) == len(want)
    for r in u.rows:
        d = r.to_dict()
        for f in FIGURES:
            assert _close(d[f], want[(d["day"],)][f]), f


# ------------------------------------------------------------------ the definitions


def _trial(
    st: Store, samples: list[tuple[str, str | None, float, float]], start: float, end: float
) -> int:
    key = new_key()
    spec = TrialSpec(key=key, run="r", start=start, interval=1.0, host="h")
    rows = tuple((m, d, None, t, v) for m, d, t, v in samples)
    return st.write(
        Batch(
            key,
            spec=spec,
            samples=rows,
            host="h",
            where={"gpus": [{"index": 0, "name": "GPU-X"}]},
            end=TrialEnd("completed", end),
        )
    )


def test_a_gap_is_held_but_neither_busy_nor_idle(store: Store) -> None:
    t0 = 1_000_000.0
    # 1 Hz at 100% for 100 s, a 50 s gap, then 100 s at 0%
    util = [("gpu.util", "0", t0 + i, 100.0) for i in range(1, 101)]
    util += [("gpu.util", "0", t0 + 150 + i, 0.0) for i in range(1, 101)]
    _trial(store, util, t0, t0 + 250)
    s = FindingSettings(idle_stretch_min_s=60)
    (row,) = usage_of(store, t0 - 10, t0 + 1000, [], settings=s, now=t0 + 2000).rows
    assert row.gpu_held_s == 250.0
    assert row.gpu_busy_s == pytest.approx(100.0)
    assert row.gpu_idle_s == pytest.approx(100.0)  # the gap is not idle
    assert row.busy_by == "util"


def test_sm_activity_wins_over_utilization_where_gpm_exists(store: Store) -> None:
    t0 = 2_000_000.0
    samples = [("gpu.util", "0", t0 + i, 100.0) for i in range(1, 61)]
    samples += [("gpu.sm_active", "0", t0 + i, 25.0) for i in range(1, 61)]
    _trial(store, samples, t0, t0 + 60)
    (row,) = usage_of(store, t0, t0 + 60, ["gpu_model"], now=t0 + 100).rows
    assert row.keys == {"gpu_model": "GPU-X"}
    assert row.busy_by == "sm_active"
    assert row.gpu_busy_s == pytest.approx(15.0)


def test_a_stretch_counts_whole_where_the_window_cuts_it(store: Store) -> None:
    t0 = 3_000_000.0
    samples = [("gpu.util", "0", t0 + i, 0.0 if i <= 400 else 90.0) for i in range(1, 1001)]
    _trial(store, samples, t0, t0 + 1000)
    (row,) = usage_of(store, t0 + 200, t0 + 1000, [], now=t0 + 2000).rows
    assert row.gpu_held_s == 800.0
    assert row.gpu_idle_s == pytest.approx(200.0)  # 400 s stretch, 200 s of it inside
    short = usage_of(
        store,
        t0 + 200,
        t0 + 1000,
        [],
        now=t0 + 2000,
        settings=FindingSettings(idle_stretch_min_s=500),
    )
    assert short.rows[0].gpu_idle_s == 0.0


def test_idle_stretches_need_no_gap_and_the_length() -> None:
    a = np.array([0.0, 1, 2, 10, 11])
    p = Points(a, a + 1, np.zeros(5), np.array([0.0, 0, 0, 0, 9]))
    assert idle_stretches(p, 0, 100, 5, 2) == [(0.0, 3.0)]
    assert idle_stretches(p, 0, 100, 5, 4) == []
    assert idle_stretches(p, 0.5, 100, 5, 2) == [(0.5, 3.0)]


def test_long_series_read_as_buckets_keep_their_sums(store: Store) -> None:
    """A series longer than MAX_POINTS is read as buckets: busy seconds stay exact."""
    import tunescope.analyze._usage as mod

    t0 = 4_000_000.0
    n = 3000
    vals = [float((i * 7) % 101) for i in range(n)]
    tid = _trial(store, [("gpu.util", "0", t0 + 1 + i, v) for i, v in enumerate(vals)], t0, t0 + n)
    (s,) = store.list_series(tid, "gpu.util")
    raw = read_points(store, s, 1.0)
    saved = mod.MAX_POINTS
    try:
        mod.MAX_POINTS = 300
        coarse = read_points(store, s, 1.0)
    finally:
        mod.MAX_POINTS = saved
    assert raw is not None and coarse is not None and len(coarse.a) < len(raw.a)
    busy = lambda p: float((p.mean * p.overlap(t0, t0 + n)).sum())  # noqa: E731
    assert busy(coarse) == pytest.approx(busy(raw), rel=1e-6)
    assert busy(raw) == pytest.approx(sum(vals))
