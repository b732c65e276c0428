"""The page's session on a team server: login sets an HttpOnly session cookie and a CSRF
cookie, a cookie authenticates reads, a write by cookie needs its CSRF header, logout clears
both (the real ASGI app, real tokens in a real SQLite file)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from http.cookies import SimpleCookie

import httpx
import pytest
from fastapi import FastAPI

from api_helpers import request
from tunescope.server import create_app
from tunescope.server._app import release_store
from tunescope.server._session import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE
from tunescope.store import open_store
from tunescope.store.sql._sql import SQLStore


@pytest.fixture
def team(store_file: str) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    with open_store(store_file) as st:
        assert isinstance(st, SQLStore)
        st.ensure_run("vision-run", start=time.time(), project="vision")
        st.ensure_run("nlp-run", start=time.time(), project="nlp")
        tokens = {
            "vision": st.create_token("vision", "read")[1],
            "nlp": st.create_token("nlp", "read")[1],
        }
    app = create_app(store_file, auth="tokens")
    try:
        yield app, tokens
    finally:
        release_store(app.state.store)


def cookies_of(r: httpx.Response) -> dict[str, SimpleCookie]:
    """Each Set-Cookie of a response, parsed, by cookie name."""
    out = {}
    for line in r.headers.get_list("set-cookie"):
        c: SimpleCookie = SimpleCookie()
        c.load(line)
        (name,) = c.keys()
        out[name] = c
    return out


def login(app: FastAPI, token: str, scheme: str = "http") -> httpx.Response:
    return request(app, "/api/session", method="POST", json={"token": token}, scheme=scheme)


def session_headers(r: httpx.Response, csrf: bool = True) -> dict[str, str]:
    """The headers the page sends after the login answered ``r``: its cookies, and the CSRF
    cookie's value in X-CSRF-Token."""
    jar = {name: c[name].value for name, c in cookies_of(r).items()}
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())}
    if csrf:
        headers[CSRF_HEADER] = jar[CSRF_COOKIE]
    return headers


def test_login_sets_an_http_only_strict_session_cookie_and_a_csrf_cookie(
    team: tuple[FastAPI, dict[str, str]],
) -> None:
    app, tokens = team
    r = login(app, tokens["vision"])
    assert r.status_code == 200
    assert r.json() == {"mode": "tokens", "project": "vision", "scope": "read"}
    got = cookies_of(r)
    assert set(got) == {SESSION_COOKIE, CSRF_COOKIE}
    session, csrf = got[SESSION_COOKIE][SESSION_COOKIE], got[CSRF_COOKIE][CSRF_COOKIE]
    assert session.value == tokens["vision"]
    assert session["httponly"] is True and csrf["httponly"] == ""  # the page reads csrf
    for c in (session, csrf):
        assert c["samesite"] == "strict" and c["path"] == "/"
        assert c["secure"] == "", "Secure over plain http: the browser would drop it"
        assert c["max-age"] == "" and c["expires"] == "", "a session cookie"
    nonce, _, mac = csrf.value.partition(".")
    assert len(nonce) >= 16 and len(mac) == 64
    assert login(app, tokens["vision"]).headers["set-cookie"] != r.headers["set-cookie"]


def test_cookies_are_secure_over_https(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    r = login(app, tokens["vision"], scheme="https")
    assert r.status_code == 200
    for name, c in cookies_of(r).items():
        assert c[name]["secure"] is True, name
    out = request(app, "/api/session", method="DELETE", headers=session_headers(r), scheme="https")
    assert out.status_code == 200
    for name, c in cookies_of(out).items():
        assert c[name]["secure"] is True, name


def test_a_session_cookie_reads_its_project_only(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    headers = session_headers(login(app, tokens["nlp"]), csrf=False)
    r = request(app, "/api/runs", headers=headers)
    assert r.status_code == 200 and [x["name"] for x in r.json()] == ["nlp-run"]
    assert request(app, "/api/session", headers=headers).json()["project"] == "nlp"
    assert request(app, "/api/runs/vision-run", headers=headers).status_code == 404


def test_a_bearer_header_wins_over_the_cookie(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    headers = session_headers(login(app, tokens["nlp"]), csrf=False)
    headers["Authorization"] = f"Bearer {tokens['vision']}"
    assert request(app, "/api/session", headers=headers).json()["project"] == "vision"


def test_a_write_by_cookie_needs_the_csrf_header(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    vision, nlp = login(app, tokens["vision"]), login(app, tokens["nlp"])
    bare = session_headers(vision, csrf=False)
    wrong = dict(bare, **{CSRF_HEADER: "x." + "0" * 64})
    # the CSRF value of another session, sent as both cookie and header (a planted cookie)
    planted_value = session_headers(nlp)[CSRF_HEADER]
    planted = {
        "Cookie": f"{SESSION_COOKIE}={tokens['vision']}; {CSRF_COOKIE}={planted_value}",
        CSRF_HEADER: planted_value,
    }
    for headers in (bare, wrong, planted):
        r = request(app, "/api/session", method="DELETE", headers=headers)
        assert r.status_code == 403 and r.json()["error"]["code"] == "csrf", headers
        assert "set-cookie" not in r.headers
    r = request(app, "/api/session", method="DELETE", headers=session_headers(vision))
    assert r.status_code == 200 and r.json() == {"ok": True}
    cleared = cookies_of(r)
    assert set(cleared) == {SESSION_COOKIE, CSRF_COOKIE}
    for name, c in cleared.items():
        assert c[name].value == "" and c[name]["max-age"] == "0" and c[name]["path"] == "/"


def test_a_read_by_cookie_needs_no_csrf_header(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    headers = session_headers(login(app, tokens["vision"]), csrf=False)
    assert request(app, "/api/runs", headers=headers).status_code == 200


def test_bad_logins(team: tuple[FastAPI, dict[str, str]]) -> None:
    app, tokens = team
    wrong = login(app, "ts_" + "y" * 43)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
    assert "set-cookie" not in wrong.headers
    form = request(
        app,
        "/api/session",
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 422 and form.json()["error"]["code"] == "invalid"
    for body in ({}, {"token": 3}, {"token": " "}, ["ts_x"]):
        r = request(app, "/api/session", method="POST", json=body)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", body
    other_site = request(
        app,
        "/api/session",
        method="POST",
        json={"token": tokens["vision"]},
        headers={"Origin": "https://evil.example"},
    )
    assert other_site.status_code == 403 and other_site.json()["error"]["code"] == "csrf"
    assert "set-cookie" not in other_site.headers
    same_site = request(
        app,
        "/api/session",
        method="POST",
        json={"token": tokens["vision"]},
        headers={"Origin": "http://localhost"},
    )
    assert same_site.status_code == 200


def test_a_revoked_token_ends_its_session(
    team: tuple[FastAPI, dict[str, str]], store_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server remembers a good token a few seconds (TOKEN_CACHE_S), so a revocation takes
    effect once that time is past."""
    from tunescope.server import _auth

    monkeypatch.setattr(_auth, "TOKEN_CACHE_S", 3600.0)
    app, tokens = team
    headers = session_headers(login(app, tokens["vision"]), csrf=False)
    assert request(app, "/api/runs", headers=headers).status_code == 200
    with open_store(store_file) as st:
        assert isinstance(st, SQLStore)
        st.revoke_token(next(t.id for t in st.list_tokens("vision")))
    assert request(app, "/api/runs", headers=headers).status_code == 200  # still remembered
    monkeypatch.setattr(_auth, "TOKEN_CACHE_S", 0.0)  # ... until the time is past
    r = request(app, "/api/runs", headers=headers)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
