"""A team server's requests carry a token: who may read what (the auth matrix), on the real
ASGI app over a real SQLite file holding two projects that each have a run named "sweep"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI

from api_helpers import request
from tunescope.server import ApiError, create_app
from tunescope.server._app import release_store
from tunescope.server._auth import MAX_FAILURES, Principal, require_write
from tunescope.store import Event, Scalar, open_store
from tunescope.store.sql._sql import SQLStore

PROJECTS = ("vision", "nlp")


@dataclass
class Team:
    app: FastAPI
    url: str
    tokens: dict[str, str]
    runs: dict[str, int]  # project -> id of its run "sweep"
    trials: dict[str, int]  # project -> id of that run's trial

    def get(self, path: str, token: str | None = None, **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {self.tokens.get(token, token)}"
        return request(self.app, path, headers=headers, **kw)


def fill(st: SQLStore, project: str, t0: float) -> tuple[int, int]:
    """A run "sweep" of ``project`` with one trial holding a bit of everything."""
    run = st.ensure_run("sweep", start=t0, project=project, os_user="ana", host="gpu1")
    trial = st.create_trial(run.id, name=f"{project}-trial", start=t0)
    sid = st.series(trial.id, "cpu.util").id
    st.append_samples([(sid, t0 + k, 10.0 + k) for k in range(20)])
    st.add_events(
        [Event(trial.id, "optimizer_step", t0 + k, step=k) for k in range(5)]
        + [Event(trial.id, "checkpoint", t0 + 6, name="ckpt", data={"path": "/c", "bytes": 1})]
    )
    st.add_scalars([Scalar(trial.id, "loss", k, t0 + k, 1.0 / (k + 1)) for k in range(5)])
    st.update_trial(trial.id, state="completed", end=t0 + 20)
    return run.id, trial.id


@pytest.fixture
def team(store_file: str) -> Iterator[Team]:
    runs, trials = {}, {}
    with open_store(store_file) as st:
        assert isinstance(st, SQLStore)
        t0 = time.time() - 3600
        for i, p in enumerate(PROJECTS):
            runs[p], trials[p] = fill(st, p, t0 + i)
        st.ensure_run("nlp-only", start=t0, project="nlp")
        tokens = {
            "vision-read": st.create_token("vision", "read")[1],
            "vision-write": st.create_token("vision", "write")[1],
            "nlp-read": st.create_token("nlp", "read")[1],
            "expired": st.create_token("vision", "read", expires=time.time() - 1)[1],
        }
        revoked, tokens["revoked"] = st.create_token("vision", "read")
        st.revoke_token(revoked.id)
    app = create_app(store_file, auth="tokens")
    try:
        yield Team(app, store_file, tokens, runs, trials)
    finally:
        release_store(app.state.store)


def protected(team: Team, project: str) -> list[tuple[str, str, dict[str, str]]]:
    """(method, path, params) of every route of the app but the open ones, for ``project``'s
    run and trial: derived from the OpenAPI document, so a new route is covered."""
    out = []
    for path, ops in team.app.openapi()["paths"].items():
        for method in ops:
            m = method.upper()
            if (m, path) in {("GET", "/api/health"), ("POST", "/api/session")}:
                continue
            filled = path.replace("{run}", str(team.runs[project]))
            filled = filled.replace("{trial}", str(team.trials[project]))
            params = {"metric": "cpu.util"} if path.endswith("/series") else {}
            if path == "/api/usage":  # a time range is required
                params = {"since": "0", "until": str(time.time() + 3600)}
            out.append((m, filled, params))
    return out


def test_every_route_but_health_and_login_needs_a_token(team: Team) -> None:
    routes = protected(team, "vision")
    assert len(routes) >= 15
    for method, path, params in routes:
        r = team.get(path, method=method, params=params)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"]["code"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("bad", ["revoked", "expired", "ts_" + "x" * 43, "nonsense"])
def test_revoked_expired_and_unknown_tokens_are_401(team: Team, bad: str) -> None:
    r = team.get("/api/runs", bad)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"


def test_a_token_reads_every_route_of_its_project(team: Team) -> None:
    for method, path, params in protected(team, "vision"):
        if method != "GET":
            continue
        r = team.get(path, "vision-read", params=params)
        assert r.status_code == 200, (path, r.text)


def test_ids_of_another_project_are_404_on_every_route(team: Team) -> None:
    """The nlp run's and trial's ids, asked with a vision token: not found, exactly like an
    id that does not exist (nothing says the run is there)."""
    checked = 0
    for method, path, params in protected(team, "nlp"):
        if not path.startswith("/api/"):
            continue  # /metrics names no id: its project scoping is in test_prometheus.py
        _, api, kind, the_id, *rest = [*path.split("/"), ""]
        if method != "GET" or kind not in ("runs", "trials") or not the_id.isdigit():
            continue
        rest = rest[:-1]
        r = team.get(path, "vision-read", params=params)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
        missing = "/".join(["", api, kind, "999999", *rest])
        unknown = team.get(missing, "vision-read", params=params)
        assert unknown.status_code == 404
        assert r.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
            "999999", the_id
        )
        checked += 1
    assert checked >= 10  # 3 run routes, 7 trial routes


def test_run_names_of_another_project_are_invisible(team: Team) -> None:
    r = team.get("/api/runs/nlp-only", "vision-read")
    assert r.status_code == 404 and r.json()["error"]["message"] == "no run 'nlp-only'"
    assert team.get("/api/runs/nlp-only", "nlp-read").status_code == 200
    assert team.get("/api/runs", "vision-read", params={"project": "nlp"}).status_code == 404
    assert team.get("/api/runs", "vision-read", params={"project": "nope"}).status_code == 404


def test_two_projects_with_the_same_run_name_are_kept_apart(team: Team) -> None:
    for project, other in (("vision", "nlp"), ("nlp", "vision")):
        token = f"{project}-read"
        listed = team.get("/api/runs", token).json()
        assert {(r["name"], r["project"]) for r in listed} >= {("sweep", project)}
        assert all(r["project"] == project for r in listed)
        assert team.runs[other] not in {r["id"] for r in listed}
        run = team.get("/api/runs/sweep", token).json()
        assert run["id"] == team.runs[project] and run["project"] == project
        assert (run["os_user"], run["host"]) == ("ana", "gpu1")
        assert [t["name"] for t in run["trials"]] == [f"{project}-trial"]
        trials = team.get("/api/runs/sweep/trials", token).json()
        assert [t["id"] for t in trials] == [team.trials[project]]
        findings = team.get("/api/runs/sweep/findings", token).json()
        assert list(findings["trials"]) == [str(team.trials[project])]
        assert team.get("/api/projects", token).json() == [{"name": project}]
        assert team.get("/api/runs", token, params={"project": project}).json() == listed


def test_a_local_viewer_sees_every_project(store_file: str, team: Team) -> None:
    app = create_app(store_file)
    try:
        projects = request(app, "/api/projects").json()
        assert projects == [{"name": "default"}, {"name": "nlp"}, {"name": "vision"}]
        both = request(app, "/api/runs").json()
        assert sorted(r["id"] for r in both if r["name"] == "sweep") == sorted(team.runs.values())
        nlp = request(app, "/api/runs", params={"project": "nlp"}).json()
        assert {r["name"] for r in nlp} == {"sweep", "nlp-only"}
        assert request(app, "/api/runs", params={"project": "nope"}).status_code == 404
        for p in PROJECTS:  # any id, whatever its project
            assert request(app, f"/api/trials/{team.trials[p]}").status_code == 200
        assert request(app, "/api/session").json() == {
            "mode": "local",
            "project": None,
            "scope": "write",
        }
        assert request(app, "/api/session", method="POST", json={"token": "x"}).status_code == 404
    finally:
        release_store(app.state.store)


def test_session_says_who_is_asking(team: Team) -> None:
    assert team.get("/api/session", "vision-read").json() == {
        "mode": "tokens",
        "project": "vision",
        "scope": "read",
    }
    assert team.get("/api/session", "vision-write").json()["scope"] == "write"


def test_health_needs_no_token_and_names_no_store(team: Team) -> None:
    r = team.get("/api/health")
    assert r.status_code == 200 and r.json() == {"ok": True}
    assert team.url not in r.text


def test_a_read_token_may_not_record() -> None:
    """The one check every recording route makes (the ingest routes call it): a read token
    is refused with 403 forbidden, a write token passes."""
    with pytest.raises(ApiError) as refused:
        require_write(Principal("vision", "read", 1))
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
    require_write(Principal("vision", "write", 2))


def test_failed_attempts_are_rate_limited(team: Team) -> None:
    for _ in range(MAX_FAILURES):
        assert team.get("/api/runs", "ts_wrong").status_code == 401
    blocked = team.get("/api/runs", "ts_wrong")
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) >= 1
    assert blocked.json()["error"]["code"] == "too_many_attempts"
    assert team.get("/api/runs", "vision-read").status_code == 200  # a valid token passes


def test_failed_logins_count_with_failed_bearer_tokens(team: Team) -> None:
    for i in range(MAX_FAILURES):
        if i % 2:
            r = team.get("/api/session", method="POST", json={"token": "ts_wrong"})
        else:
            r = team.get("/api/runs", "ts_wrong")
        assert r.status_code == 401
    bad = team.get("/api/session", method="POST", json={"token": "ts_wrong"})
    assert bad.status_code == 429 and int(bad.headers["retry-after"]) >= 1
    assert "set-cookie" not in bad.headers
    good = team.get("/api/session", method="POST", json={"token": team.tokens["vision-read"]})
    assert good.status_code == 200 and "set-cookie" in good.headers
