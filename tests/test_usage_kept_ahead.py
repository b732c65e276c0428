"""Usage kept ahead of the first query: compaction (``tunescope compact``, a team server's
background compaction) computes and keeps the usage of every ended trial that has none, so the
first ``tunescope usage`` reads it back; what it reads is what computing it afresh gives and the
known truth (tests/usage_truth.py); a trial that gets new data after is computed again; a
pass stops at its budget and the next resumes after it, past trials that cannot be kept.
On SQLite and PostgreSQL; the server's path through the real app."""

from __future__ import annotations

import json
import math
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

sys.path.insert(0, str(Path(__file__).parent))

import usage_truth as ut
from api_helpers import app_over, request
from fault_helpers import wait_for
from store_helpers import damage_chunk
from tunescope.analyze import (
    FindingSettings,
    Usage,
    compact_raw,
    keep_usage_ahead,
    load_settings,
    usage_of,
)
from tunescope.analyze._gpu_catalog import GPU_CATALOG
from tunescope.analyze._usage_kept import usage_digest
from tunescope.cli import main
from tunescope.server._compact import Compactor
from tunescope.store import Batch, PooledStore, Store, TrialEnd, TrialSpec, new_key, open_store

DAY = 86400.0
NOW = ut.DAY0 + 100 * DAY
SINCE, UNTIL = ut.DAY0, ut.DAY0 + 90 * DAY
MINE = [p for p in ut.plan() if p.project == "speech"]
DIGEST = usage_digest(FindingSettings(), GPU_CATALOG)


def _close(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)
    return bool(got == want)


def _usage(store: Any, by: list[str], settings: FindingSettings | None = None) -> Usage:
    return usage_of(store, SINCE, UNTIL, by, now=NOW, projects=["speech"], settings=settings)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def _ended(
    store: Store, t0: float, n: int, *, end: float | None = None, value: float = 50.0
) -> tuple[int, str]:
    """A trial of ``n`` seconds of one GPU at ``value`` % from ``t0``, ended at ``end``
    (default its last sample; None for a running one)."""
    key = new_key()
    store.write(
        Batch(
            key,
            spec=TrialSpec(key=key, run="r", start=t0, interval=1.0, host="h", project="ops"),
            samples=tuple(("gpu.util", "0", None, t0 + i, value) for i in range(1, n + 1)),
            host="h",
            where={"gpus": [{"index": 0, "name": "GPU-X"}]},
            heartbeat=t0 + n,
            end=TrialEnd("completed", t0 + n if end is None else end),
        )
    )
    return store.trial_by_key(key).id, key


def _running(store: Store, t0: float) -> int:
    key = new_key()
    store.write(
        Batch(
            key,
            spec=TrialSpec(key=key, run="r", start=t0, interval=1.0, host="h", project="ops"),
            samples=tuple(("gpu.util", "0", None, t0 + i, 80.0) for i in range(1, 61)),
            host="h",
            heartbeat=t0 + 60,
        )
    )
    return store.trial_by_key(key).id


def test_compact_keeps_every_ended_trials_usage_for_the_first_query(
    store_url: str, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    """``tunescope compact`` (its raw samples all older than --keep-raw: dropped first) keeps
    the usage of every ended trial; the first query computes none, and answers what a fresh
    computation and the counted truth give, figure for figure; a running trial keeps none."""
    settings = load_settings().settings  # what the CLI's compact and usage read
    digest = usage_digest(settings, GPU_CATALOG)
    with open_store(store_url) as st:
        ut.write(st, MINE)
        running = _running(st, ut.DAY0 + 3 * DAY)
        assert len(st.unkept_usage(digest)) == len(MINE)  # type: ignore[attr-defined]

    dry = _cli(capsys, "compact", "--keep-raw", "30d", "--dry-run", "--store", store_url)
    assert dry.startswith("would drop ") and "usage" not in dry
    with open_store(store_url) as st:
        assert len(st.unkept_usage(digest)) == len(MINE)  # type: ignore[attr-defined]

    out = _cli(capsys, "compact", "--keep-raw", "30d", "--store", store_url).splitlines()
    assert out[0].startswith("dropped ") and not out[0].startswith("dropped 0 ")
    assert out[1].startswith(f"kept the usage figures of {len(MINE)} ended trials (")
    with closing(open_store(store_url, create=False)) as st:
        assert st.unkept_usage(digest) == []  # type: ignore[attr-defined]
        assert st.kept_usage([running], digest)[running][1] is None  # type: ignore[attr-defined]
        for by in (["day"], ["user", "run"], ["gpu_model", "week"]):
            first = ut.Counting(st)
            got = _usage(first, by, settings)
            assert first.computed == []  # every trial read back
            want = _usage(ut.Counting(st, fresh=True), by, settings)
            assert got.rows == want.rows and got.trials == want.trials
            truth = ut.truth(MINE, by, SINCE, UNTIL)
            assert len(got.rows) == len(truth)
            for r in got.rows:
                d, w = r.to_dict(), truth[tuple(r.keys[b] for b in by)]
                for f in ("gpu_held_s", "gpu_busy_s", "gpu_idle_s", "cpu_core_s", "trials"):
                    assert _close(d[f], w[f]), (by, r.keys, f)
    again = _cli(capsys, "compact", "--keep-raw", "30d", "--store", store_url).splitlines()
    assert again[1].startswith("kept the usage figures of 0 ended trials (")


def test_a_trial_with_new_data_after_it_was_kept_is_computed_again(
    store_url: str, request: pytest.FixtureRequest
) -> None:
    """A batch lands after compaction kept a trial's usage: the next query computes it (the
    late samples counted), and the next compaction keeps the new figures, which the query
    after reads back."""
    t0 = 5_000_000.0
    with closing(open_store(store_url)) as st:
        tid, key = _ended(st, t0, 100, end=t0 + 200, value=100.0)  # then 100 s unknown
        done = compact_raw(st, 30 * DAY, now=t0)  # no raw is old enough to drop
        assert done.raw.chunks == 0 and done.usage is not None
        assert (done.usage.computed, done.usage.kept, done.usage.done) == (1, 1, True)
        gen = st.kept_usage([tid], DIGEST)[tid][0]  # type: ignore[attr-defined]
        late = tuple(("gpu.util", "0", None, t0 + i, 50.0) for i in range(101, 201))
        st.write(Batch(key, samples=late, host="h"))
        assert st.unkept_usage(DIGEST) == [(tid, gen + 1)]  # type: ignore[attr-defined]

        def one(store: Any) -> dict[str, Any]:
            (row,) = usage_of(store, t0, t0 + 300, [], now=t0 + 1000, projects=["ops"]).rows
            return row.to_dict()

        query = ut.Counting(st, fresh=True)  # the query after the batch, keeping nothing
        after = one(query)
        assert query.computed == [tid] and after["gpu_busy_s"] == pytest.approx(150.0)
        usage = compact_raw(st, 30 * DAY, now=t0).usage
        assert usage is not None and (usage.computed, usage.kept) == (1, 1)
        read = ut.Counting(st)
        assert one(read) == after and read.computed == []
        usage = compact_raw(st, 30 * DAY, now=t0).usage
        assert usage is not None and (usage.computed, usage.kept, usage.done) == (0, 0, True)


def test_a_pass_stops_at_its_budget_and_the_next_resumes_past_what_cannot_be_kept(
    sqlite_url: str,
) -> None:
    """With no time to spare, each pass computes one trial and says where to resume; a
    damaged trial (computed, never kept) and one that held nothing do not hold the passes up;
    a pass from the start again computes only what could not be kept."""
    t0 = 6_000_000.0
    with closing(open_store(sqlite_url)) as st:
        damaged, _ = _ended(st, t0, 1200)
        good = [_ended(st, t0 + k * 2000, 600)[0] for k in range(1, 4)]
        empty, _ = _ended(st, t0, 0, end=t0)  # ended as it began: held nothing
        running = _running(st, t0)
        st.compact()
        (series,) = st.list_series(damaged, "gpu.util")
    damage_chunk(sqlite_url, series.id, 0)
    with closing(open_store(sqlite_url, create=False)) as st:
        listed = [t for t, _ in st.unkept_usage(DIGEST)]  # type: ignore[attr-defined]
        assert listed == [damaged, *good, empty] and running not in listed
        passes, after = [], 0
        while len(passes) < 10:
            u = keep_usage_ahead(st, budget_s=0.0, after=after, now=t0 + DAY)
            passes.append(u)
            if u.done:
                break
            after = u.after
        assert [(u.computed, u.kept, u.done) for u in passes] == [
            (1, 0, False),
            (1, 1, False),
            (1, 1, False),
            (1, 1, False),
            (0, 0, True),
        ]
        assert [u.after for u in passes] == [damaged, *good, 0]
        left = [t for t, _ in st.unkept_usage(DIGEST)]  # type: ignore[attr-defined]
        assert left == [damaged, empty]
        whole = keep_usage_ahead(st, now=t0 + DAY)  # no budget: one pass over all
        assert (whole.computed, whole.kept, whole.done, whole.after) == (1, 0, True, 0)


def test_a_servers_compactor_keeps_usage_in_passes_that_resume(sqlite_url: str) -> None:
    """The server's thread: one compaction, then passes of one trial each (no time to
    spare) that resume where the last stopped, until every ended trial's usage is kept."""
    t0 = 7_000_000.0
    with closing(PooledStore(lambda: open_store(sqlite_url), size=2)) as pool:
        ids = [_ended(pool, t0 + k * 1000, 600)[0] for k in range(4)]
        c = Compactor(
            pool,
            30 * DAY,
            FindingSettings(),
            every=3600.0,
            first_after=0.0,
            usage_pass_s=0.0,
            usage_pause_s=0.0,
        )
        try:
            assert wait_for(lambda: c.usage_kept == len(ids), timeout=60.0)
        finally:
            c.stop()
        assert c.runs == 1 and c.usage_passes >= len(ids)
        assert pool.unkept_usage(DIGEST) == []


@pytest.mark.parametrize("keep_raw", [30 * DAY, None], ids=["keep-raw", "all-raw"])
def test_serve_keeps_usage_ahead_and_the_page_reads_it(
    sqlite_url: str, keep_raw: float | None
) -> None:
    """``serve`` (the real app, its lifespan), with ``--keep-raw`` (the background compaction)
    or without (passes of their own): the usage of every ended trial is kept ahead; GET
    /api/usage answers from it what a fresh computation gives and the counted truth."""
    with open_store(sqlite_url) as st:
        ut.write(st, MINE)
    params = {"since": SINCE, "until": UNTIL, "by": "user,day", "project": "speech"}
    with (
        app_over(
            sqlite_url, keep_raw=keep_raw, compact_first_after=0.0, settings=FindingSettings()
        ) as app,
        TestClient(app),
    ):
        assert wait_for(lambda: app.state.compactor.usage_kept == len(MINE), timeout=120.0)
        assert (app.state.compactor.runs > 0) == (keep_raw is not None)  # dropped raw or not
        got = request(app, "/api/usage", params=params)
    assert got.status_code == 200
    with closing(open_store(sqlite_url, create=False)) as st:
        assert st.unkept_usage(DIGEST) == []  # type: ignore[attr-defined]
        want = _usage(ut.Counting(st, fresh=True), ["user", "day"])
    rows = got.json()["rows"]
    figures = [{k: v for k, v in r.to_dict().items() if k not in r.keys} for r in want.rows]
    sent = [{"keys": r.keys, **f} for r, f in zip(want.rows, figures, strict=True)]
    assert rows == json.loads(json.dumps(sent))
    truth = ut.truth(MINE, ["user", "day"], SINCE, UNTIL)
    assert len(rows) == len(truth)
    for r in rows:
        w = truth[(r["keys"]["user"], r["keys"]["day"])]
        assert _close(r["gpu_busy_s"], w["gpu_busy_s"])
        assert _close(r["gpu_idle_s"], w["gpu_idle_s"])
