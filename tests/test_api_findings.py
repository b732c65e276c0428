"""The findings routes and the findings counts of the run routes, against the real app and a
real SQLite file filled through the store API: a trial that waits for its batches half of
every step (highly input-bound), one whose loader keeps up (no finding), a running trial that
becomes input-bound while the server runs, and the cache in front of the analysis."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import TypeAdapter

from api_helpers import app_over
from http_helpers import run_async
from tunescope import analyze
from tunescope.analyze import findings_for_trial
from tunescope.server import _queries
from tunescope.server import _schema as schema
from tunescope.store import Event, Store, open_store

# The finished trials' times: a fixed second in the past. The running trial is placed
# relative to the clock read by the ``data`` fixture (``Data.now``).
T0 = 1_700_000_000.0
STEP_S = 0.2  # request to request
BATCHES = 120
COUNTS_NONE = {"high": 0, "moderate": 0, "low": 0}


def call(app: FastAPI, url: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get(url)

    return run_async(go())


def ok(app: FastAPI, url: str, model: Any) -> Any:
    r = call(app, url)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    TypeAdapter(model).validate_python(body, strict=False)
    return body


def batches(store: Store, trial: int, start: float, wait_share: float, n: int = BATCHES) -> None:
    """``n`` batches as trial.watch() records them: a data_wait event per batch whose duration
    is the wait in next() and whose value is the step time (request to next request); and the
    trial's CPU utilization at 1 Hz, low (the loop waits, the CPU idles)."""
    store.add_events(
        Event(trial, "data_wait", start + k * STEP_S, duration=wait_share * STEP_S, value=STEP_S)
        for k in range(n)
    )
    sid = store.series(trial, "cpu.util").id
    seconds = math.ceil(n * STEP_S)
    store.append_samples((sid, start + s, 30.0) for s in range(seconds + 1))


@dataclass
class Data:
    url: str
    run: int
    slow: int  # completed, waits 50% of every step
    fast: int  # completed, waits 1%
    live: int  # running, no batch yet
    quiet_run: int
    now: float  # the wall clock when the data was written


@pytest.fixture
def data(sqlite_url: str) -> Data:
    now = time.time()
    with open_store(sqlite_url) as store:
        run = store.ensure_run("sweep", start=T0)
        slow = store.create_trial(run.id, "slow-loader", {"workers": 0}, start=T0)
        batches(store, slow.id, T0 + 5, 0.5)
        store.update_trial(slow.id, state="completed", end=T0 + 40, heartbeat=T0 + 40)
        fast = store.create_trial(run.id, "fast-loader", {"workers": 8}, start=T0 + 50)
        batches(store, fast.id, T0 + 55, 0.01)
        store.update_trial(fast.id, state="completed", end=T0 + 90, heartbeat=T0 + 90)
        live = store.create_trial(run.id, "live", start=now - 60)
        store.update_trial(live.id, heartbeat=now)
        quiet = store.ensure_run("quiet", start=T0 - 7200)
        q = store.create_trial(quiet.id, "only", start=T0 - 7200)
        batches(store, q.id, T0 - 7190, 0.0)
        store.update_trial(q.id, state="completed", end=T0 - 7100)
        return Data(sqlite_url, run.id, slow.id, fast.id, live.id, quiet.id, now)


@pytest.fixture
def app(data: Data) -> Iterator[FastAPI]:
    with app_over(data.url) as application:
        yield application


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The trial ids the server analysed, in order (the cache's calls to the analysis)."""
    seen: list[int] = []

    def counting(store: Store, trial: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(trial.id)
        return findings_for_trial(store, trial, *args, **kwargs)

    monkeypatch.setattr(_queries, "findings_for_trial", counting)
    return seen


def test_an_input_bound_trial_has_one_high_finding_in_the_exact_shape(
    app: FastAPI, data: Data
) -> None:
    body = ok(app, f"/api/trials/{data.slow}/findings", list[schema.FindingOut])
    (f,) = body
    assert list(f) == [
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
    ]
    assert f["id"] == f"{data.slow}:input_bound:train.data_wait:-"
    assert (f["rule"], f["trial_id"], f["severity"]) == ("input_bound", data.slow, "high")
    assert f["title"] == "Input-bound: 50% of step time waiting for data"
    assert "50% of its step time" in f["message"] and f"({BATCHES} batches" in f["message"]
    assert f["evidence"]["share_pct"] == pytest.approx(50.0)
    assert f["evidence"]["batches"] == BATCHES
    assert f["evidence"]["mean_wait_ms"] == pytest.approx(100.0)
    assert f["evidence"]["cpu_util_mean_pct"] == pytest.approx(30.0)
    # the span runs from the first batch that waited to the end of the last one's step
    assert f["t0"] == pytest.approx(T0 + 5, abs=1e-3)
    assert f["t1"] == pytest.approx(T0 + 5 + BATCHES * STEP_S, abs=1e-3)
    assert (f["metric"], f["device"]) == ("train.data_wait", None)
    (rule,) = (r for r in analyze.RULES if r.key == "input_bound")
    assert f["advice"] == list(rule.advice) and len(f["advice"]) == 4
    # exactly what the analysis gives, as JSON
    with open_store(data.url) as store:
        assert body == analyze.to_dict(findings_for_trial(store, data.slow))


def test_a_trial_whose_loader_keeps_up_has_none(app: FastAPI, data: Data) -> None:
    assert ok(app, f"/api/trials/{data.fast}/findings", list[schema.FindingOut]) == []
    assert ok(app, f"/api/trials/{data.live}/findings", list[schema.FindingOut]) == []


def test_run_findings_by_trial_with_counts(app: FastAPI, data: Data) -> None:
    by_name = ok(app, "/api/runs/sweep/findings", schema.RunFindingsOut)
    by_id = ok(app, f"/api/runs/{data.run}/findings", schema.RunFindingsOut)
    assert by_name == by_id
    assert list(by_name) == ["trials", "counts"]
    # every trial, in creation order, keyed by its id as a string
    assert list(by_name["trials"]) == [str(data.slow), str(data.fast), str(data.live)]
    slow = ok(app, f"/api/trials/{data.slow}/findings", list[schema.FindingOut])
    assert by_name["trials"] == {str(data.slow): slow, str(data.fast): [], str(data.live): []}
    assert by_name["counts"] == {"high": 1, "moderate": 0, "low": 0}
    quiet = ok(app, "/api/runs/quiet/findings", schema.RunFindingsOut)
    assert quiet == {"trials": {str(next(iter(quiet["trials"]))): []}, "counts": COUNTS_NONE}


def test_runs_list_and_run_carry_the_counts(app: FastAPI, data: Data) -> None:
    runs = ok(app, "/api/runs", list[schema.RunOut])
    assert [(r["name"], r["findings"]) for r in runs] == [
        ("sweep", {"high": 1, "moderate": 0, "low": 0}),
        ("quiet", COUNTS_NONE),
    ]
    detail = ok(app, "/api/runs/sweep", schema.RunDetailOut)
    assert detail["findings"] == {"high": 1, "moderate": 0, "low": 0}
    assert ok(app, "/api/runs/quiet", schema.RunDetailOut)["findings"] == COUNTS_NONE


def test_unknown_run_or_trial_is_a_404(app: FastAPI) -> None:
    for url in (
        "/api/runs/nope/findings",
        "/api/runs/987654/findings",
        "/api/trials/987654/findings",
    ):
        r = call(app, url)
        assert r.status_code == 404, url
        assert r.json()["error"]["code"] == "not_found"
    assert call(app, "/api/trials/-1/findings").status_code == 422


def test_finished_trials_are_analysed_once(app: FastAPI, data: Data, analyses: list[int]) -> None:
    for _ in range(3):
        ok(app, "/api/runs", list[schema.RunOut])
        ok(app, "/api/runs/quiet/findings", schema.RunFindingsOut)
        ok(app, f"/api/trials/{data.slow}/findings", list[schema.FindingOut])
    finished = [t for t in analyses if t != data.live]
    assert sorted(finished) == sorted(set(finished)), "a finished trial was analysed twice"
    assert analyses.count(data.live) == 1, "an unchanged running trial is not analysed again"


def test_a_running_trial_is_analysed_again_when_it_got_data(
    app: FastAPI, data: Data, analyses: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"/api/trials/{data.live}/findings"
    assert ok(app, url, list[schema.FindingOut]) == []
    assert ok(app, "/api/runs/sweep", schema.RunDetailOut)["findings"]["high"] == 1
    # the trial's loop starts waiting for its batches; its writer refreshes the heartbeat
    with open_store(data.url) as store:
        batches(store, data.live, data.now - 50, 0.5)
        store.update_trial(data.live, heartbeat=time.time())
    # within FINDINGS_REFRESH_S of the last analysis the last result stands
    assert ok(app, url, list[schema.FindingOut]) == []
    assert analyses.count(data.live) == 1, "analysed once, before the new data"
    # ... and once that has passed (here: at once), the next request analyses it again
    monkeypatch.setattr(_queries, "FINDINGS_REFRESH_S", 0.0)
    (f,) = ok(app, url, list[schema.FindingOut])
    assert (f["rule"], f["severity"]) == ("input_bound", "high")
    assert analyses.count(data.live) == 2
    run = ok(app, "/api/runs/sweep/findings", schema.RunFindingsOut)
    assert run["trials"][str(data.live)] == [f]
    assert run["counts"] == {"high": 2, "moderate": 0, "low": 0}
    assert analyses.count(data.live) == 2, "nothing changed since: the result is reused"
    runs = ok(app, "/api/runs", list[schema.RunOut])
    assert runs[0]["findings"] == {"high": 2, "moderate": 0, "low": 0}


def test_a_trial_that_ends_is_analysed_again_at_once(
    app: FastAPI, data: Data, analyses: list[int]
) -> None:
    url = f"/api/trials/{data.live}/findings"
    assert ok(app, url, list[schema.FindingOut]) == []
    with open_store(data.url) as store:
        batches(store, data.live, data.now - 50, 0.5)
        store.update_trial(data.live, state="completed", end=time.time())
    (f,) = ok(app, url, list[schema.FindingOut])
    assert f["rule"] == "input_bound"
    assert analyses.count(data.live) == 2


def test_the_runs_list_leaves_counts_null_past_its_budget(
    app: FastAPI, data: Data, analyses: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_queries, "RUNS_LIST_BUDGET_S", 0.0)
    runs = ok(app, "/api/runs", list[schema.RunOut])
    assert [r["findings"] for r in runs] == [None, None]
    assert analyses == []
    # the run page (or its findings) computes them; the list shows them from then on
    ok(app, "/api/runs/quiet", schema.RunDetailOut)
    runs = ok(app, "/api/runs", list[schema.RunOut])
    assert [r["findings"] for r in runs] == [None, COUNTS_NONE]
    ok(app, "/api/runs/sweep/findings", schema.RunFindingsOut)
    runs = ok(app, "/api/runs", list[schema.RunOut])
    assert [r["findings"] for r in runs] == [{"high": 1, "moderate": 0, "low": 0}, COUNTS_NONE]
