"""Rule 9's last items, each against a real `tunescope serve` (real sockets, on SQLite and on
PostgreSQL when the suite has one): the rate limit never blocks a valid token, and
X-Forwarded-For is believed only from --trusted-proxy; errors tell a caller without a token
nothing about the database (a real damaged store); store calls answer another project's ids
exactly as missing ones; batch ids are scoped by project and a changed batch is 409; every
path answers a wrong method with 405 and the document lists the error statuses; the Markdown
report escapes names and params. Checks that look inside the server (what a blocked token
costs the store, a store error injected) use the same app in this process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from markdown_it import MarkdownIt

from api_helpers import app_over, request
from http_helpers import free_port
from test_api_auth import fill
from tunescope.analyze._report import build_report
from tunescope.analyze._report_md import markdown
from tunescope.errors import Conflict
from tunescope.server._auth import MAX_FAILURES
from tunescope.store import Batch, Scalar, TrialSpec, open_store
from tunescope.store.remote.wire import PROJECT_HEADER
from tunescope.store.sql._sql import SQLStore

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Team:
    """Projects vision and nlp over one store, served twice: by a real `tunescope serve`
    (``base``: every call of the tests goes there, over loopback sockets) and by the same app
    in this process (``app``: for the checks that look inside it, through :meth:`local`)."""

    app: FastAPI
    base: str
    url: str
    tokens: dict[str, str]  # vision-write, vision-read, nlp-write
    runs: dict[str, int]
    trials: dict[str, int]
    keys: dict[str, str]  # project -> its trial's key
    series: dict[str, int]

    def _headers(self, token: str | None, kw: dict[str, Any]) -> dict[str, str]:
        headers = dict(kw.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {self.tokens.get(token, token)}"
        return headers

    def call(self, path: str, token: str | None, method: str = "GET", **kw: Any) -> httpx.Response:
        """One request to the real server."""
        headers = self._headers(token, kw)
        with httpx.Client(base_url=self.base, timeout=30) as c:
            return c.request(method, path, headers=headers, **kw)

    def local(self, path: str, token: str | None, method: str = "GET", **kw: Any) -> httpx.Response:
        """One request to the in-process app."""
        return request(self.app, path, method=method, headers=self._headers(token, kw), **kw)

    def store_call(self, token: str, name: str, args: dict[str, Any]) -> httpx.Response:
        return self.call(
            f"/api/v1/store/{name}", token, "POST", content=json.dumps(args).encode(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip

    def ingest(self, token: str, batch: Batch) -> httpx.Response:
        return self.call(
            "/api/v1/ingest", token, "POST", content=batch.to_json(),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip


@pytest.fixture
def team(sql_store_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Team]:
    """A team over a real store (SQLite, and PostgreSQL when the suite has one) holding
    projects vision and nlp, each with a run "sweep" and one trial; served by a real
    `tunescope serve` and by the app in this process."""
    # SQL stores only: the embedded ClickHouse opens its folder in one process at a time, and this
    # test opens the store from a second one (a ClickHouse server would run it)
    runs, trials, keys, series = {}, {}, {}, {}
    with open_store(sql_store_url) as st:
        assert isinstance(st, SQLStore)
        t0 = time.time() - 3600
        for p in ("vision", "nlp"):
            runs[p], trials[p] = fill(st, p, t0)
            keys[p] = st.get_trial(trials[p]).key
            series[p] = st.list_series(trials[p])[0].id
        tokens = {
            "vision-write": st.create_token("vision", "write")[1],
            "vision-read": st.create_token("vision", "read")[1],
            "nlp-write": st.create_token("nlp", "write")[1],
        }
    log = tmp_path / "serve.log"
    proc, base = _serve(sql_store_url, log)
    try:
        with app_over(sql_store_url, auth="tokens") as app:
            yield Team(app, base, sql_store_url, tokens, runs, trials, keys, series)
    finally:
        _stop(proc)
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


# ------------------------------------------------------------------------ the rate limit
def test_a_valid_token_passes_while_a_bad_one_is_blocked_from_the_same_client(
    team: Team,
) -> None:
    for _ in range(MAX_FAILURES):
        assert team.call("/api/runs", "ts_revoked_in_a_spool").status_code == 401
    blocked = team.call("/api/runs", "ts_revoked_in_a_spool")
    assert blocked.status_code == 429 and blocked.json()["error"]["code"] == "too_many_attempts"
    assert int(blocked.headers["retry-after"]) >= 1
    # the same client's valid tokens pass, by header and by login, and a read token reads
    assert team.call("/api/runs", "vision-read").status_code == 200
    good = team.call("/api/session", None, "POST", json={"token": team.tokens["vision-write"]})
    assert good.status_code == 200 and "set-cookie" in good.headers
    # another bad token from that client has a count of its own
    assert team.call("/api/runs", "ts_another_typo").status_code == 401


def test_a_blocked_token_costs_the_store_nothing(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(MAX_FAILURES):
        assert team.local("/api/runs", "ts_revoked_in_a_spool").status_code == 401
    asked: list[str] = []
    store = team.app.state.store
    check, count = store.check_token, store.count_token_failure
    monkeypatch.setattr(store, "check_token", lambda s: asked.append(s) or check(s))
    monkeypatch.setattr(store, "count_token_failure", lambda *a: asked.append("count") or count(*a))
    assert team.local("/api/runs", "ts_revoked_in_a_spool").status_code == 429
    assert asked == []  # neither checked nor counted
    assert team.local("/api/runs", "vision-read").status_code == 200
    assert len(asked) == 1  # a valid token is checked as ever


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)


def _serve(db: str, log: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """A real `tunescope serve` on a free loopback port; (its process, its base URL)."""
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunescope", "serve", "--store", db, "--port", str(port),
             *options],
            stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONWARNINGS="ignore"),
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            httpx.get(f"{base}/api/health", timeout=2)
            return proc, base
        except httpx.TransportError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)


def _attempts(base: str, forwarded_for: list[str | None], token: str) -> list[int]:
    """The statuses of one request per entry, each with that X-Forwarded-For (None: none)."""
    out = []
    with httpx.Client(base_url=base, timeout=10) as c:
        for xff in forwarded_for:
            headers = {"Authorization": f"Bearer {token}"}
            if xff is not None:
                headers["X-Forwarded-For"] = xff
            out.append(c.get("/api/runs", headers=headers).status_code)
    return out


@pytest.mark.slow
def test_forwarded_for_is_believed_only_from_a_trusted_proxy(
    sql_store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Real sockets: the server sees the test's requests come from 127.0.0.1."""
    # SQL stores only: the embedded ClickHouse opens its folder in one process at a time, and this
    # test opens the store from a second one (a ClickHouse server would run it)
    with open_store(sql_store_url) as st:
        assert isinstance(st, SQLStore)
        st.ensure_run("r", project="vision")
        good = st.create_token("vision", "read")[1]
    db = sql_store_url
    spoofed = [f"203.0.113.{k}" for k in range(MAX_FAILURES + 1)]
    proc, base = _serve(db, tmp_path / "plain.log")
    try:  # no --trusted-proxy: every request is 127.0.0.1's, whatever it says
        assert _attempts(base, spoofed, "ts_bad") == [401] * MAX_FAILURES + [429]
        assert _attempts(base, ["198.51.100.1"], good) == [200]
    finally:
        _stop(proc)
    proc, base = _serve(db, tmp_path / "proxied.log", "--trusted-proxy", "127.0.0.1")
    try:  # behind a trusted proxy: the client is the address the proxy appended
        one = "203.0.113.7"
        assert _attempts(base, [one] * MAX_FAILURES, "ts_bad") == [401] * MAX_FAILURES
        assert _attempts(base, [one, "203.0.113.8"], "ts_bad") == [429, 401]
        # a client cannot escape its block by sending a made-up X-Forwarded-For of its own:
        # the proxy appends the real address, the rightmost untrusted one counts
        assert _attempts(base, [f"198.51.100.9, {one}"], "ts_bad") == [429]
        assert _attempts(base, [one], good) == [200]
    finally:
        _stop(proc)
    bad = subprocess.run(
        [sys.executable, "-m", "tunescope", "serve", "--store", db, "--trusted-proxy", "proxy"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "'proxy' is not an IP address or network" in bad.stderr


# ------------------------------------------------------------------------ errors
def test_errors_tell_a_caller_without_a_token_nothing_about_the_database(
    tmp_path: Path,
) -> None:
    """A real fault: the store's tokens table is dropped under the running server, so every
    token check fails with the driver's words; a caller without a valid token learns
    nothing of them (the server's log has them)."""
    db = tmp_path / "secret-team-store.db"
    with open_store(str(db)) as st:
        assert isinstance(st, SQLStore)
        st.ensure_run("r", project="vision")
        st.create_token("vision", "read")
    log = tmp_path / "serve.log"
    proc, base = _serve(str(db), log)
    try:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            conn.execute("DROP TABLE tokens")
            conn.commit()
        with httpx.Client(base_url=base, timeout=30) as c:
            answers = [
                c.get("/api/runs", headers={"Authorization": "Bearer ts_guess"}),
                c.post("/api/session", json={"token": "ts_guess"}),
                c.get("/metrics", headers={"Authorization": "Bearer ts_other"}),
            ]
    finally:
        _stop(proc)
    assert "no such table" in log.read_text()  # the server's log says why
    for r in answers:
        assert r.status_code == 500, r.text
        body = r.json()
        assert list(body) == ["error"] and body["error"]["code"] in ("store_error", "internal")
        assert body["error"]["message"] in (
            "the store failed: the server's log says why",
            "internal error (the server's log says why)",
        )
        for secret in ("secret-team-store", str(tmp_path), "sqlite", "tokens", "no such"):
            assert secret not in r.text.lower(), (secret, r.text)


def test_a_store_error_names_no_url_even_to_a_valid_token(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunescope.errors import StoreError, StoreUnavailable

    url = team.app.state.store.url

    def failing(*a: Any, **k: Any) -> Any:
        raise StoreError(f"could not read {url}: disk I/O error")

    def away(*a: Any, **k: Any) -> Any:
        raise StoreUnavailable(f"no connection to {url}")

    monkeypatch.setattr(team.app.state.store, "list_runs", failing)
    r = team.local("/api/runs", "vision-read")
    assert r.status_code == 500 and url not in r.text and "the store" in r.text
    monkeypatch.setattr(team.app.state.store, "list_runs", away)
    r = team.local("/api/runs", "vision-read")
    assert r.status_code == 503 and url not in r.text and r.headers["retry-after"] == "2"


# ------------------------------------------------------------------------ store calls
def test_store_calls_answer_another_projects_ids_exactly_as_missing_ones(team: Team) -> None:
    nlp_run, nlp_trial, nlp_series = team.runs["nlp"], team.trials["nlp"], team.series["nlp"]
    calls: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
        # (method, args with nlp's id, args with a missing id, nlp's id, missing id)
        ("get_run", {"run": nlp_run}, {"run": 999999}, str(nlp_run), "999999"),
        ("list_trials", {"run_id": nlp_run}, {"run_id": 999999}, str(nlp_run), "999999"),
        ("find_trial", {"run_id": nlp_run, "name": "x"}, {"run_id": 999999, "name": "x"},
         str(nlp_run), "999999"),
        ("get_trial", {"trial_id": nlp_trial}, {"trial_id": 999999}, str(nlp_trial), "999999"),
        ("owner", {"trial": nlp_trial}, {"trial": 999999}, str(nlp_trial), "999999"),
        ("owner", {"series": nlp_series}, {"series": 999999}, str(nlp_series), "999999"),
        ("list_series", {"trial_id": nlp_trial}, {"trial_id": 999999}, str(nlp_trial),
         "999999"),
        ("exit_code", {"trial_id": nlp_trial}, {"trial_id": 999999}, str(nlp_trial), "999999"),
        ("series_extent", {"series_id": nlp_series}, {"series_id": 999999}, str(nlp_series),
         "999999"),
        ("read_samples", {"series_id": nlp_series}, {"series_id": 999999}, str(nlp_series),
         "999999"),
        ("trial_by_key", {"key": team.keys["nlp"]}, {"key": "no-such-key"}, team.keys["nlp"],
         "no-such-key"),
        ("add_scalars",
         {"scalars": [{"trial_id": nlp_trial, "name": "x", "step": 1, "t": 1.0, "value": 1.0}]},
         {"scalars": [{"trial_id": 999999, "name": "x", "step": 1, "t": 1.0, "value": 1.0}]},
         str(nlp_trial), "999999"),
        ("append_samples", {"rows": [[nlp_series, 1.0, 1.0]]}, {"rows": [[999999, 1.0, 1.0]]},
         str(nlp_series), "999999"),
    ]  # fmt: skip
    for name, theirs, missing, their_id, missing_id in calls:
        a = team.store_call("vision-write", name, theirs)
        b = team.store_call("vision-write", name, missing)
        assert a.status_code == b.status_code == 404, (name, a.text, b.text)
        assert a.json() == json.loads(b.text.replace(missing_id, their_id)), (name, a.text)
        assert team.url not in a.text + b.text
    # nothing of vision's token reached nlp's trial
    with open_store(team.url) as st:
        assert [s.name for s in st.scalars(nlp_trial)] == ["loss"] * 5
    # a batch naming nlp's trial key is refused exactly like an unknown key
    theirs = team.ingest("vision-write", Batch(team.keys["nlp"], id="b-x", host="h"))
    missing = team.ingest("vision-write", Batch("no-such-key", id="b-x", host="h"))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == json.loads(missing.text.replace("no-such-key", team.keys["nlp"]))


# ------------------------------------------------------------------------ batch ids
T = time.time() - 60


def _scalar_batch(key: str, batch_id: str, value: float) -> Batch:
    return Batch(key, id=batch_id, host="h", scalars=(("acc", 1, T, value),))


def test_batch_ids_are_scoped_by_project_and_a_changed_resend_is_409(team: Team) -> None:
    vision, nlp = team.keys["vision"], team.keys["nlp"]
    assert team.ingest("vision-write", _scalar_batch(vision, "b-1", 0.5)).status_code == 200
    # the same id in another project is another batch: written, not dropped
    assert team.ingest("nlp-write", _scalar_batch(nlp, "b-1", 0.25)).status_code == 200
    # the same batch again is written once; the same id with other content is a conflict
    again = _scalar_batch(vision, "b-1", 0.5)
    resend = team.ingest("vision-write", again)
    assert resend.status_code == 200 and resend.json() == {"trial": team.trials["vision"]}
    changed = team.ingest("vision-write", _scalar_batch(vision, "b-1", 0.75))
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "conflict"
    assert "b-1" in changed.json()["error"]["message"] and team.url not in changed.text
    with open_store(team.url) as st:
        assert [s.value for s in st.scalars(team.trials["vision"], "acc")] == [0.5]
        assert [s.value for s in st.scalars(team.trials["nlp"], "acc")] == [0.25]
    # a resend carrying the trial's spec (which the first sending lacked) is the same batch
    spec = TrialSpec(key=vision, run="sweep", start=0.0, project="vision")
    with_spec = team.ingest("vision-write", again.with_spec(spec))
    assert with_spec.status_code == 200


def test_a_store_refuses_a_changed_batch_and_keeps_ids_per_project(store_url: str) -> None:
    """The store itself (SQLite and PostgreSQL), under the server and the direct writers."""
    with open_store(store_url) as st:
        keys = {}
        for p in ("vision", "nlp"):
            spec = TrialSpec(key=f"k-{p}", run="r", start=time.time(), project=p)
            st.write(Batch(spec.key, spec=spec, host="h"))
            keys[p] = spec.key
        first = _scalar_batch(keys["vision"], "same", 1.0)
        tid = st.write(first)
        assert st.write(Batch.from_json(first.to_json())) == tid  # a resend from the spool
        with pytest.raises(Conflict, match="'same' was written before with other content"):
            st.write(_scalar_batch(keys["vision"], "same", 2.0))
        other = st.write(_scalar_batch(keys["nlp"], "same", 3.0))
        assert other != tid
        assert [s.value for s in st.scalars(tid, "acc")] == [1.0]
        assert [s.value for s in st.scalars(other, "acc")] == [3.0]
        assert isinstance(st.scalars(tid)[0], Scalar)


def test_a_version_6_databases_batches_migrate_into_their_projects(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches written by version 6 (ids global, no digest) open as the current version:
    each in its trial's project, a resend of one still written once (its content unknown, it
    is taken as the same), and the same id in another project a batch of its own."""
    from contextlib import closing

    from tunescope.store.sql import _sql
    from tunescope.store.sql._schema import SCHEMA_VERSION

    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 6)
    with closing(open_store(store_url)) as old:
        assert isinstance(old, SQLStore) and old.schema_version() == 6
        keys, ids = {}, {}
        with old._tx(write=True) as cur:  # raw SQL: today's trial reads name later columns
            for p in ("vision", "nlp"):
                run_id = old._run_row(cur, "r", 100.0, p, None, None)[0]
                keys[p] = f"key-{p}"
                ids[p] = old._q(
                    cur,
                    "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, "
                    "interval_s, trial_key) VALUES (?, 'a', '{}', 'running', 'h', '[]', 100.0, "
                    "1.0, ?) RETURNING id",
                    (run_id, keys[p]),
                ).fetchone()[0]
            old._q(cur, "INSERT INTO batches (id, trial_id, t) VALUES (?, ?, ?)",
                   ("old-batch", ids["vision"], 100.0))  # fmt: skip
    monkeypatch.undo()
    with open_store(store_url) as st:
        assert st.schema_version() == SCHEMA_VERSION  # type: ignore[attr-defined]
        resend = _scalar_batch(keys["vision"], "old-batch", 1.0)
        assert st.write(resend) == ids["vision"]
        assert st.scalars(ids["vision"], "acc") == []  # written once, by version 6
        assert st.write(_scalar_batch(keys["nlp"], "old-batch", 2.0)) == ids["nlp"]
        assert [s.value for s in st.scalars(ids["nlp"], "acc")] == [2.0]


# ------------------------------------------------------------------------ 405 and the document
def test_every_path_answers_a_wrong_method_with_405_and_lists_its_errors(team: Team) -> None:
    doc = json.loads((ROOT / "web" / "openapi.json").read_text())
    checked = 0
    for path, ops in doc["paths"].items():
        concrete = path.replace("{run}", "1").replace("{trial}", "1")
        concrete = concrete.replace("{method}", "get_trial")
        allowed = {m.upper() for m in ops}
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            if method in allowed:
                continue
            r = team.call(concrete, "vision-write", method)
            assert r.status_code == 405, (method, path, r.status_code)
            assert r.json()["error"]["code"] == "method_not_allowed"
            assert r.headers["allow"] == ", ".join(sorted(allowed))
            checked += 1
        for method, op in ops.items():
            codes = set(op["responses"])
            if path != "/api/health":
                assert {"401", "429", "503"} <= codes, (method, path)
            if method == "post":
                assert {"403", "413", "415", "422"} <= codes, (method, path)
            for code in codes - {"200"}:
                ref = op["responses"][code]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorOut"), (method, path, code)
    assert checked >= 70


def test_the_statuses_the_document_lists_for_bodies_happen(team: Team) -> None:
    body = _scalar_batch(team.keys["vision"], "b-415", 1.0).to_json()
    plain = team.call("/api/v1/ingest", "vision-write", "POST", content=body,
                      headers={"Content-Type": "text/plain"})  # fmt: skip
    assert plain.status_code == 415
    read = team.call("/api/v1/ingest", "vision-read", "POST", content=body,
                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert read.status_code == 403
    json_for_nlp = {"Content-Type": "application/json", PROJECT_HEADER: "nlp"}
    other = team.call("/api/v1/store/list_runs", "vision-read", "POST", content=b"{}",
                      headers=json_for_nlp)  # fmt: skip
    assert other.status_code == 403
    bad = team.call("/api/v1/ingest", "vision-write", "POST", content=b'{"id": 1}',
                    headers={"Content-Type": "application/json"})  # fmt: skip
    assert bad.status_code == 422
    assert team.call("/api/v1/ingest", None, "POST").status_code == 401


def test_a_window_too_far_from_zero_for_its_pad_is_422_not_500(team: Team) -> None:
    """What schemathesis found: a start (or end) so large that adding the window's pad
    rounds to itself made an empty window the store refused with a ValueError (a 500)."""
    trial = team.trials["vision"]
    for path, extra in (
        (f"/api/trials/{trial}/series", {"metric": "cpu.util"}),
        (f"/api/trials/{trial}/events", {}),
    ):
        for params in ({"start": 1e300}, {"end": -1e300}):
            r = team.call(path, "vision-read", params={**extra, **params})
            assert r.status_code == 422, (path, params, r.text)
            message = r.json()["error"]["message"]  # the route's range, or the pad's guard
            assert (
                "out of range" in message
                or "less than or equal" in message
                or ("greater than or equal" in message)
            ), message


# ------------------------------------------------------------------------ the Markdown report
HOSTILE_RUN = "run|`x`<b>bold</b>"
HOSTILE_TRIAL = "t*_[a](http://evil.example)|<script>alert(1)</script>"
HOSTILE_PARAMS = {"a|b": "<img src=x onerror=alert(1)>", "c": "**bold** _it_ ~~s~~ `code`"}


def test_the_markdown_report_escapes_names_and_params(sqlite_url: str) -> None:
    with open_store(sqlite_url) as st:
        run = st.ensure_run(HOSTILE_RUN, start=time.time() - 100)
        trial = st.create_trial(run.id, HOSTILE_TRIAL, HOSTILE_PARAMS, start=time.time() - 100)
        sid = st.series(trial.id, "cpu.util").id
        st.append_samples([(sid, time.time() - 100 + k, 50.0) for k in range(60)])
        st.update_trial(trial.id, state="completed", end=time.time() - 30)
        report = build_report(st, run.id)
    md = markdown(report, ["chart.png"])
    parser = MarkdownIt("commonmark").enable("table")
    html = parser.render(md)
    # no markup of the names' own: no tag, link, emphasis or strike of theirs
    assert not re.search(r"<(script|b)\b", html), html
    assert re.findall(r"<img [^>]*>", html) == [
        f'<img src="chart.png" alt="{_escape_html(HOSTILE_TRIAL)}: the four headline metrics" />'
    ]  # ours, its alt text the trial's name as written
    assert "<a " not in html and "<em>" not in html and "<s>" not in html
    strong = re.findall(r"<strong>(.*?)</strong>", html)
    assert len(strong) == 2 * sum(len(t.findings) for t in report.trials)  # ours only
    # the names read as written, in code spans
    codes = [_unescape(c) for c in re.findall(r"<code>(.*?)</code>", html, re.S)]
    assert HOSTILE_RUN in codes and HOSTILE_TRIAL in codes
    # the params read as written in the trial's sentence
    text = _unescape(re.sub(r"<[^>]+>", "", html))
    for k, v in HOSTILE_PARAMS.items():
        assert f"{k}={v}" in text or f"{k}: {v}" in text or (k in text and v in text), text
    # every table row has its header's cells: no pipe of a name ended a cell
    tokens = parser.parse(md)
    rows: list[int] = []
    for tok in tokens:
        if tok.type == "tr_open":
            rows.append(0)
        elif tok.type in ("th_open", "td_open"):
            rows[-1] += 1
    assert rows and rows[0] == 5 and all(n in (3, 5) for n in rows), rows


def _escape_html(s: str) -> str:
    import html

    return html.escape(s, quote=True).replace("&#x27;", "'")


def _unescape(s: str) -> str:
    import html

    return html.unescape(s)
