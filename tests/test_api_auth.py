"""A team server's requests carry a token: who may read what (the auth matrix)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from api_helpers import request
from tunescope.server import create_app
from tunescope.server._app import release_store
from tunescope.server._auth import MAX_FAILURES
from tunescope.store import open_store
from tunescope.store._sql import SQLStore


@pytest.fixture
def team(store_file: str) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    with open_store(store_file) as st:
        assert isinstance(st, SQLStore)
        st.ensure_run("sweep", project="vision")
        st.ensure_run("sweep", project="nlp")
        tokens = {
            "vision-read": st.create_token("vision", "read")[1],
            "nlp-read": st.create_token("nlp", "read")[1],
        }
        revoked, tokens["revoked"] = st.create_token("vision", "read")
        st.revoke_token(revoked.id)
    app = create_app(store_file, auth="tokens")
    try:
        yield app, tokens
    finally:
        release_store(app.state.store)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_no_token_and_bad_tokens_are_401(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    r = request(app, "/api/runs")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    for bad in (tokens["revoked"], "ts_" + "x" * 43, "nonsense"):
        r = request(app, "/api/runs", headers=_auth(bad))
        assert r.status_code == 401, bad


def test_a_token_sees_its_project_only(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    r = request(app, "/api/runs", headers=_auth(tokens["vision-read"]))
    assert r.status_code == 200
    assert [x["name"] for x in r.json()] == ["sweep"]


def test_failed_attempts_are_rate_limited(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    for _ in range(MAX_FAILURES):
        assert request(app, "/api/runs", headers=_auth("ts_wrong")).status_code == 401
    blocked = request(app, "/api/runs", headers=_auth(tokens["vision-read"]))
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1
    assert blocked.json()["error"]["code"] == "too_many_attempts"
