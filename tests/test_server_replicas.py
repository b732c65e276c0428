"""`tunescope serve` as replicas behind a proxy, on one PostgreSQL store (docs/scale.md,
"Serving replicas"): two real servers (subprocesses), and one client that sends its requests to
both in turn, as a round-robin proxy would. A token revoked in the store is refused by both
within TOKEN_CACHE_S; the page's session made on one is used and ended on the other; the rate
limit of failed attempts holds for the pair of servers, not for each; two servers compacting the
store at once keep one set of figures and raise nothing. The store's count of failed attempts
on every backend."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import PG_URL, pg_schema
from test_api_auth import fill
from test_cli_compact import _trial
from test_server_auth_bounds import _serve, _stop
from tunescope.analyze import compact_raw, findings_for_trial, to_dict
from tunescope.server._auth import DIGEST_PREFIX, FAILURE_WINDOW_S, MAX_FAILURES, TOKEN_CACHE_S
from tunescope.server._session import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE
from tunescope.store import SQLStore, open_store, token_digest

DAY = 86400.0


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema: the store replicas share is a database server."""
    if PG_URL is None:
        pytest.skip("needs TUNESCOPE_TEST_POSTGRES: replicas share a PostgreSQL store")
    with pg_schema() as url:
        open_store(url).close()
        yield url


class Fleet:
    """Two servers on one store, and a client that sends each request to the next of them
    (the same cookies for both: they share a host name, as behind a proxy)."""

    def __init__(self, bases: list[str]) -> None:
        self.bases = bases
        self.client = httpx.Client(timeout=30)
        self.sent = 0

    def next(self, path: str, method: str = "GET", **kw: Any) -> tuple[int, httpx.Response]:
        """Send to the next server in turn: (which one, its answer)."""
        k = self.sent % len(self.bases)
        self.sent += 1
        return k, self.to(k, path, method, **kw)

    def to(self, k: int, path: str, method: str = "GET", **kw: Any) -> httpx.Response:
        return self.client.request(method, self.bases[k] + path, **kw)


@pytest.fixture
def fleet(pg_url: str, tmp_path: Path) -> Iterator[Fleet]:
    procs, bases, logs = [], [], []
    try:
        for k in range(2):
            logs.append(tmp_path / f"replica{k}.log")
            proc, base = _serve(pg_url, logs[-1])
            procs.append(proc)
            bases.append(base)
        f = Fleet(bases)
        with closing(f.client):
            yield f
    finally:
        for proc in procs:
            _stop(proc)
    for log in logs:
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.postgres
@pytest.mark.slow
def test_a_revoked_token_is_refused_by_every_replica_within_the_cache_bound(
    pg_url: str, fleet: Fleet
) -> None:
    """Both servers have checked the token (each remembers it for TOKEN_CACHE_S); it is
    revoked in the store the two share; the client polls both in turn. Every request sent
    TOKEN_CACHE_S or more after the revocation is refused (whatever the machine's speed: a
    server's check is at most that old when such a request arrives), each server refuses it
    from some point on and never answers it again (401, then 429 once the client's failed
    attempts with it reach the limit: both refuse)."""
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        fill(st, "vision", time.time() - 3600)
        info, token = st.create_token("vision", "read")
        for _ in range(4):  # both servers check it and remember it
            k, r = fleet.next("/api/runs", headers=_bearer(token))
            assert r.status_code == 200, (k, r.text)
        st.revoke_token(info.id)
        revoked = time.monotonic()
    answers: list[tuple[int, float, int]] = []  # (server, sent after the revocation, status)
    refused: dict[int, float] = {}
    while len(refused) < 2:
        sent = time.monotonic() - revoked
        assert sent < 60 + TOKEN_CACHE_S, answers  # a hang guard, far past the bound
        k, r = fleet.next("/api/runs", headers=_bearer(token))
        assert r.status_code in (200, 401, 429), r.text  # 429: refused, then blocked
        answers.append((k, sent, r.status_code))
        if r.status_code != 200:
            refused.setdefault(k, sent)
    late = [a for a in answers if a[2] == 200 and a[1] >= TOKEN_CACHE_S]
    assert not late, f"answered past the bound: {late}"
    again = [a for a in answers if a[2] == 200 and a[1] > refused[a[0]]]
    assert not again, f"answered again after refusing: {again}"
    for k in range(2):
        assert fleet.to(k, "/api/runs", headers=_bearer(token)).status_code in (401, 429)
    print(
        f"revocation: refused by server 0 {refused[0]:.2f} s and server 1 {refused[1]:.2f} s "
        f"after it (bound {TOKEN_CACHE_S:g} s), {len(answers)} requests polled"
    )


@pytest.mark.postgres
@pytest.mark.slow
def test_a_session_made_on_one_replica_is_used_and_ended_on_the_other(
    pg_url: str, fleet: Fleet
) -> None:
    """The cookie holds the token and the CSRF value is an HMAC keyed by it: nothing of a
    session lives in a server, so any replica checks it."""
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        fill(st, "vision", time.time() - 3600)
        token = st.create_token("vision", "write")[1]
    login = fleet.to(0, "/api/session", "POST", json={"token": token})
    assert login.status_code == 200, login.text
    assert fleet.client.cookies.get(SESSION_COOKIE) == token
    csrf = fleet.client.cookies.get(CSRF_COOKIE)
    assert csrf
    who = fleet.to(1, "/api/session")
    assert who.status_code == 200 and who.json()["project"] == "vision"
    assert fleet.to(1, "/api/runs").status_code == 200
    # server 1 checks the CSRF value server 0 signed: refused without it, taken with it
    refused = fleet.to(1, "/api/session", "DELETE")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf"
    out = fleet.to(1, "/api/session", "DELETE", headers={CSRF_HEADER: csrf})
    assert out.status_code == 200, out.text
    assert SESSION_COOKIE not in fleet.client.cookies
    for k in range(2):  # logged out on both
        assert fleet.to(k, "/api/runs").status_code == 401


@pytest.mark.postgres
@pytest.mark.slow
def test_the_rate_limit_holds_for_the_fleet_not_for_each_replica(pg_url: str, fleet: Fleet) -> None:
    """A client alternating between two servers with a revoked token: the store counts its
    failures for both, so the pair is blocked after MAX_FAILURES + 1 failures reached the
    store (the limit, and one more on the server that had not yet seen the count), not after
    2 x MAX_FAILURES; a blocked server asks the store nothing; a valid token from the same
    client passes on both."""
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        fill(st, "vision", time.time() - 3600)
        bad_info, bad = st.create_token("vision", "write")
        good = st.create_token("vision", "read")[1]
        st.revoke_token(bad_info.id)
    statuses = [fleet.next("/api/runs", headers=_bearer(bad))[1].status_code for _ in range(16)]
    assert statuses == [401] * (MAX_FAILURES + 1) + [429] * (15 - MAX_FAILURES)
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        with st._tx() as cur:
            counted = st._q(cur, "SELECT key FROM token_failures").fetchall()
    key = f"127.0.0.1 {token_digest(bad)[:DIGEST_PREFIX]}"  # the client and the token
    assert [r[0] for r in counted] == [key] * (MAX_FAILURES + 1)  # none after the block
    blocked = fleet.to(0, "/api/runs", headers=_bearer(bad))
    wait = int(blocked.headers["retry-after"])
    assert 1 <= wait <= FAILURE_WINDOW_S
    for k in range(2):
        assert fleet.to(k, "/api/runs", headers=_bearer(good)).status_code == 200


@pytest.mark.postgres
def test_a_trials_first_kept_findings_stay(pg_url: str) -> None:
    """Two servers compacting at once may both compute a trial's findings: the first kept
    (computed before its raw samples went) are the ones answered."""
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        _, tid = fill(st, "vision", time.time() - 3600)
        assert st.keep_findings(tid, '["first"]', 1.0) is True
        assert st.keep_findings(tid, '["second"]', 2.0) is False
        assert st.kept_findings(tid) == '["first"]'


@pytest.mark.postgres
@pytest.mark.slow
def test_two_replicas_compacting_at_once_keep_one_set_of_figures(pg_url: str) -> None:
    """The background upkeep of two servers (compact_raw: findings kept, raw dropped, usage
    kept) on the same store at the same moment, each on its own connection: neither raises,
    each trial keeps one row of findings (those of its whole raw samples) and of usage, and
    every old raw chunk is dropped once."""
    now = time.time()
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        trials = []
        for k in range(4):
            ids = _trial(st, f"old{k}", now - 40 * DAY + k * 7200, 1800)
            trials.append(st._series_info(ids["gpu.util"]).trial_id)
        found = {tid: to_dict(findings_for_trial(st, tid)) for tid in trials}
        with st._tx() as cur:
            chunks = st._q(cur, "SELECT COUNT(*) FROM chunks").fetchone()[0]
        assert chunks > 0
    start = threading.Barrier(2)
    errors: list[BaseException] = []
    reports: list[Any] = []

    def upkeep() -> None:
        try:
            with open_store(pg_url) as mine:
                start.wait(30)
                reports.append(compact_raw(mine, 30 * DAY))
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=upkeep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    assert len(reports) == 2
    assert sum(r.raw.chunks for r in reports) == chunks  # each dropped once
    with open_store(pg_url) as st:
        assert isinstance(st, SQLStore)
        with st._tx() as cur:
            rows = st._q(cur, "SELECT trial_id, COUNT(*) FROM kept_findings GROUP BY trial_id")
            assert dict(rows.fetchall()) == dict.fromkeys(trials, 1)
            rows = st._q(cur, "SELECT trial_id, COUNT(*) FROM kept_usage GROUP BY trial_id")
            assert dict(rows.fetchall()) == dict.fromkeys(trials, 1)
            assert st._q(cur, "SELECT COUNT(*) FROM chunks").fetchone()[0] == 0
        for tid in trials:
            assert to_dict(findings_for_trial(st, tid)) == found[tid]


def test_the_store_counts_a_keys_failures_within_the_window_and_forgets_older_ones(
    store_url: str,
) -> None:
    """Every backend (ClickHouse keeps it in its SQL metadata): a key's failures within the
    window are counted, another key's apart; a failure older than the window, any key's, is
    neither counted nor kept."""
    with open_store(store_url) as st:
        assert isinstance(st, SQLStore)
        with st._tx(write=True) as cur:
            st._q(cur, "INSERT INTO token_failures (key, t) VALUES ('old', ?)", (time.time() - 61,))
        before = time.time()
        first = st.count_token_failure("a", 60.0)
        assert len(first) == 1 and before <= first[0] <= time.time()
        assert len(st.count_token_failure("b", 60.0)) == 1
        second = st.count_token_failure("a", 60.0)
        assert len(second) == 2 and second[0] == first[0] <= second[1]
        assert st.count_token_failure("old", 60.0)[:-1] == []  # the old one was not counted
        with st._tx() as cur:
            keys = sorted(r[0] for r in st._q(cur, "SELECT key FROM token_failures"))
        assert keys == ["a", "a", "b", "old"]
