"""Serving at load: events and scalars in pages (cursors), and store work that runs past its
time limit answering 503 rather than hanging. Every backend, through the real ASGI app."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from pydantic import TypeAdapter

from api_helpers import request
from conftest import PG_URL, _pg_schema_url
from tunescope.server import _schema as schema
from tunescope.server import create_app
from tunescope.server._app import POOL_SIZE, release_store
from tunescope.store import Event, Scalar, open_store

T0 = 1_700_000_000.0
STEPS = 250


@pytest.fixture
def app_and_trial(store_url: str) -> Iterator[tuple[FastAPI, int]]:
    with open_store(store_url) as st:
        run = st.ensure_run("paged", start=T0)
        trial = st.create_trial(run.id, start=T0)
        events = [Event(trial.id, "optimizer_step", T0 + k * 0.5, step=k) for k in range(STEPS)]
        # ties in time (a page may end inside them) and an interval that began before T0 + 10
        events += [Event(trial.id, "mark", T0 + 20.0, name=f"tie-{k}") for k in range(7)]
        events.append(Event(trial.id, "evaluation", T0 + 5, name="eval", duration=10.0))
        st.add_events(events)
        st.add_scalars(
            [Scalar(trial.id, "loss", k, T0 + k, 1.0 / (k + 1)) for k in range(120)]
            + [Scalar(trial.id, "lr", None, T0 + k, 1e-4) for k in range(5)]  # no step
            + [Scalar(trial.id, "acc", 3, T0 + k, k / 10) for k in range(4)]  # one step, 4 t
        )
        st.update_trial(trial.id, state="completed", end=T0 + 200)
    app = create_app(store_url)
    try:
        yield app, trial.id
    finally:
        release_store(app.state.store)


def get(app: FastAPI, path: str, model: Any, **params: Any) -> Any:
    r = request(app, path, params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    TypeAdapter(model).validate_python(body)
    return body


def key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["kind"], e["name"], e["step"], e["t"], e["duration"])


def test_too_many_events_are_binned_with_a_cursor_that_pages_through_them(
    app_and_trial: tuple[FastAPI, int],
) -> None:
    app, trial = app_and_trial
    path = f"/api/trials/{trial}/events"
    window = {"start": T0 + 10, "end": T0 + 150}
    every = get(app, path, schema.EventsOut, limit=10_000, **window)
    assert every["events"] is not None and every["next"] is None
    binned = get(app, path, schema.EventsOut, limit=40, **window)
    assert binned["events"] is None and binned["bins"] and binned["next"]
    seen: list[dict[str, Any]] = []
    cursor, pages = binned["next"], 0
    while cursor is not None:
        page = get(app, path, schema.EventsOut, limit=40, cursor=cursor, **window)
        assert page["bins"] is None and len(page["events"]) <= 40
        assert page["total"] == every["total"]
        seen += page["events"]
        cursor, pages = page["next"], pages + 1
    assert pages == -(-every["total"] // 40)
    assert [key(e) for e in seen] == [key(e) for e in every["events"]]
    assert seen[0]["kind"] == "evaluation", "an interval that began before the window"


def test_a_page_ending_inside_events_of_one_time_loses_none(
    app_and_trial: tuple[FastAPI, int],
) -> None:
    app, trial = app_and_trial
    path = f"/api/trials/{trial}/events"
    first = get(app, path, schema.EventsOut, kinds="mark", limit=1)
    names: list[str] = []
    cursor = first["next"]
    while cursor is not None:
        page = get(app, path, schema.EventsOut, kinds="mark", limit=3, cursor=cursor)
        names += [e["name"] for e in page["events"]]
        cursor = page["next"]
    assert names == [f"tie-{k}" for k in range(7)]


def test_scalars_in_pages_are_the_whole_list(app_and_trial: tuple[FastAPI, int]) -> None:
    app, trial = app_and_trial
    path = f"/api/trials/{trial}/scalars"
    whole = get(app, path, schema.ScalarsOut)
    assert whole["next"] is None and len(whole["scalars"]) == 129
    for name in (None, "loss", "lr", "acc"):
        params = {} if name is None else {"name": name}
        seen: list[dict[str, Any]] = []
        page = get(app, path, schema.ScalarsOut, limit=3, **params)
        while True:
            assert len(page["scalars"]) <= 3 and page["names"] == whole["names"]
            seen += page["scalars"]
            if page["next"] is None:
                break
            page = get(app, path, schema.ScalarsOut, limit=3, cursor=page["next"], **params)
        expected = [s for s in whole["scalars"] if name is None or s["name"] == name]
        assert sorted(map(str, seen)) == sorted(map(str, expected)), name
        assert len(seen) == len({str(s) for s in seen}), "a scalar listed twice"
        by_name = [s["name"] for s in seen]
        assert by_name == sorted(by_name)
    # the last name: four scalars of one step, paged 3 at a time, in time order
    assert [(s["step"], s["t"]) for s in seen] == [(3, T0 + k) for k in range(4)]


def test_bad_cursors_are_422(app_and_trial: tuple[FastAPI, int]) -> None:
    app, trial = app_and_trial
    events = get(app, f"/api/trials/{trial}/events", schema.EventsOut, limit=5)["next"]
    scalars = get(app, f"/api/trials/{trial}/scalars", schema.ScalarsOut, limit=5)["next"]
    for path, cursor in (
        (f"/api/trials/{trial}/scalars", events),  # a cursor of another route
        (f"/api/trials/{trial}/events", scalars),
        (f"/api/trials/{trial}/events", "not-a-cursor"),
        (f"/api/trials/{trial}/events", "eyJrIjoiZXZlbnRzIiwiYWZ0ZXIiOlsiYSIsMV19"),  # t: "a"
    ):
        r = request(app, path, params={"cursor": cursor})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", (path, cursor)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema (the shared server of TUNESCOPE_TEST_POSTGRES)."""
    if PG_URL is None:
        pytest.skip("needs TUNESCOPE_TEST_POSTGRES (a SQLite file in WAL mode never blocks reads)")
    yield from _pg_schema_url()


@pytest.mark.postgres
def test_store_work_past_the_time_limit_is_503(pg_url: str) -> None:
    """Another connection holds a table the runs list reads locked: the request's
    transaction is cut at the app's time limit (tried once more on a new connection) and it
    answers 503 store_unavailable instead of waiting; once the lock goes, the same request is
    answered, on connections that healed by themselves."""
    import psycopg

    with open_store(pg_url) as st:
        st.ensure_run("locked", start=T0)
    app = create_app(pg_url, timeout=0.5)
    try:
        assert request(app, "/api/runs").status_code == 200
        with psycopg.connect(pg_url) as holder:
            holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
            began = time.monotonic()
            r = request(app, "/api/runs")
            took = time.monotonic() - began
            holder.rollback()
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert r.headers["retry-after"] == "2"
        assert 0.5 <= took < 5.0, took
        assert request(app, "/api/runs").status_code == 200
    finally:
        release_store(app.state.store)


def test_a_request_that_finds_every_connection_busy_is_503(store_file: str) -> None:
    """Every connection of the pool is taken (by requests stuck in the store): the next
    request waits the time limit for one, then answers 503; once one is free it is served."""
    app = create_app(store_file, timeout=0.3)
    pool = app.state.store
    try:
        with contextlib.ExitStack() as held:
            for _ in range(POOL_SIZE):
                held.enter_context(pool._one())
            began = time.monotonic()
            r = request(app, "/api/runs")
            took = time.monotonic() - began
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert "busy" in r.json()["error"]["message"]
        assert 0.3 <= took < 3.0, took
        assert request(app, "/api/runs").status_code == 200
    finally:
        release_store(app.state.store)
