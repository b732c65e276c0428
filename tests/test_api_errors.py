"""The one error shape, pinned: every error the API reports is
``{"error": {"status", "code", "message"}}`` with the HTTP status repeated inside."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from api_helpers import app_over, request
from tunescope.errors import StoreUnavailable
from tunescope.store import open_store

T0 = 1_700_000_000.0


def call(app: FastAPI, method: str, url: str, **params: Any) -> httpx.Response:
    return request(app, url, method=method, params=params)


@pytest.fixture
def app(sqlite_url: str) -> Iterator[FastAPI]:
    with open_store(sqlite_url) as store:
        run = store.ensure_run("r", start=T0)
        trial = store.create_trial(run.id, start=T0)
        sid = store.series(trial.id, "gpu.mem", "0").id
        store.append_samples([(sid, T0 + i, 1.0) for i in range(10)])
    with app_over(sqlite_url) as application:
        yield application


def _assert_shape(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    body: dict[str, Any] = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"status", "code", "message"}
    assert body["error"]["status"] == status and body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


def test_unknown_trial_is_404_not_found(app: FastAPI) -> None:
    r = call(app, "GET", "/api/trials/77")
    assert r.json() == {"error": {"status": 404, "code": "not_found", "message": "no trial 77"}}
    _assert_shape(r, 404, "not_found")


def test_unknown_run_is_404_not_found(app: FastAPI) -> None:
    r = call(app, "GET", "/api/runs/nope")
    assert r.json() == {"error": {"status": 404, "code": "not_found", "message": "no run 'nope'"}}


def test_unknown_route_is_404_not_found(app: FastAPI) -> None:
    r = call(app, "GET", "/api/nope")
    assert r.json() == {
        "error": {"status": 404, "code": "not_found", "message": "no route GET /api/nope"}
    }
    assert r.headers["cache-control"] == "no-store"


def test_bad_window_is_422_invalid(app: FastAPI) -> None:
    r = call(app, "GET", "/api/trials/1/series", metric="gpu.mem", start=T0 + 5, end=T0 + 5)
    assert r.json() == {
        "error": {
            "status": 422,
            "code": "invalid",
            "message": f"start ({T0 + 5}) must be before end ({T0 + 5})",
        }
    }


def test_fastapi_validation_errors_take_the_same_shape(app: FastAPI) -> None:
    body = _assert_shape(
        call(app, "GET", "/api/trials/1/series", metric="gpu.mem", points=0), 422, "invalid"
    )
    assert body["error"]["message"].startswith("points: ")
    body = _assert_shape(call(app, "GET", "/api/trials/abc"), 422, "invalid")
    assert body["error"]["message"].startswith("trial: ")
    body = _assert_shape(call(app, "GET", "/api/trials/1/series"), 422, "invalid")
    assert body["error"]["message"] == "metric: Field required"


def test_a_store_that_cannot_be_reached_is_503_with_retry_after(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shape of a store outage (a real one: tests/test_faults_postgres.py)."""

    def away() -> None:
        raise StoreUnavailable("the database is restarting")

    monkeypatch.setattr(app.state.store, "list_projects", away)
    body = _assert_shape(call(app, "GET", "/api/runs"), 503, "store_unavailable")
    assert body["error"]["message"] == "the database is restarting"
    assert call(app, "GET", "/api/runs").headers["retry-after"] == "2"


def test_wrong_method_is_405(app: FastAPI) -> None:
    r = call(app, "DELETE", "/api/runs")
    _assert_shape(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "GET"


def test_openapi_documents_the_error_shape(app: FastAPI) -> None:
    doc = app.openapi()
    op = doc["paths"]["/api/trials/{trial}/series"]["get"]
    for status in ("404", "422"):
        ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorOut")
    body = doc["components"]["schemas"]["ErrorBody"]["properties"]
    assert set(body) == {"status", "code", "message"}
