"""HTTP stores beyond the contract suite (which runs on them too): URLs, tokens, projects kept
apart, one request per call, records rebuilt exactly, bad bodies, and the read commands."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI

from api_helpers import app_over, request
from cli_helpers import cli, one_line_error
from fault_helpers import sample_times, settled, wait_for
from http_helpers import Server, free_port, make_certificates, make_token
from store_helpers import damage_chunk
from tunescope.errors import AccessDenied, ConfigError, NotFound, Rejected, StoreUnavailable
from tunescope.server import create_app
from tunescope.server._app import release_store
from tunescope.store import (
    CHUNK_SAMPLES,
    Batch,
    Event,
    Scalar,
    Store,
    TrialEnd,
    TrialInfo,
    TrialSpec,
    classify,
    new_key,
    open_store,
    project_of,
)
from tunescope.store._url import http_target
from tunescope.store.remote._http import HttpStore

T0 = 1_700_000_000.0


def _spec(run: str = "r", project: str = "default") -> TrialSpec:
    return TrialSpec(key=new_key(), run=run, name="t", params={"lr": 0.1 + 0.2}, start=T0,
                     interval=0.5, project=project, host="h")  # fmt: skip


def _batch(spec: TrialSpec, n: int = 10, first: int = 0) -> Batch:
    return Batch(
        spec.key,
        spec=spec,
        samples=tuple(("cpu.util", None, None, T0 + i + 1 / 3, i / 7) for i in range(first, n)),
        events=(("mark", T0 + first + 0.1, f"m{first}", first, 0.1 + 0.2, 1 / 3, {"k": [1, 2]}),),
        scalars=(("loss", first, T0 + first, math.pi * 1e-7),),
        heartbeat=T0 + n,
    )


@pytest.fixture
def project(http_server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A fresh project on the session's server: (its store URL, a write token of it), the
    token in $TUNESCOPE_TOKEN."""
    name = f"p{new_key()[:10]}"
    token = make_token(http_server.db_url, name)
    monkeypatch.setenv("TUNESCOPE_TOKEN", token)
    yield http_server.url(name), token


# ---------------------------------------------------------------------- URLs
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8765", "must name one project"),
        ("http://127.0.0.1:8765/", "must name one project"),
        ("http://127.0.0.1:8765/a/b", "must name one project"),
        ("http://:8765/p", "names no server"),
        ("http://127.0.0.1:0/p", "port 0 is not 1 to 65535"),
        ("http://127.0.0.1:99999/p", "bad store URL"),
        ("http://127.0.0.1/p?token=x", "query or fragment"),
        ("https://ana:s3cret@example.org/p", "put the token in $TUNESCOPE_TOKEN"),
    ],
)
def test_bad_http_urls_are_one_line_config_errors(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    message = str(caught.value)
    assert why in message and "\n" not in message and "s3cret" not in message


def test_an_http_url_names_server_and_project_and_opening_sends_nothing() -> None:
    assert http_target("https://ts.example.org/vision/") == (True, "ts.example.org", 443, "vision")
    assert http_target("http://[::1]:8000/nlp") == (False, "::1", 8000, "nlp")
    assert project_of("HTTPS://ts.example.org/vision") == "vision"
    st = open_store(f"http://127.0.0.1:{free_port()}/vision", project="other")
    assert isinstance(st, HttpStore)
    assert st.project == project_of(st.url) == "vision"  # the URL's project, not the argument
    assert (st.requests, st.connections) == (0, 0)  # nothing sent until the first call
    st.close()


def test_a_server_that_is_not_there_is_unavailable_and_writers_keep() -> None:
    with (
        open_store(f"http://127.0.0.1:{free_port()}/p") as st,
        pytest.raises(StoreUnavailable, match="cannot reach") as caught,
    ):
        st.write(_batch(_spec()))
    assert classify(caught.value) == "retry" and "\n" not in str(caught.value)


def test_https_trusts_a_private_ca_named_in_the_environment(
    tmp_path: Path, store_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, cert, key = make_certificates(tmp_path)
    server = Server(store_file, tmp_path / "server.log", tls=(cert, key)).start()
    try:
        monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(store_file, "tls"))
        url = server.url("tls")
        with open_store(url) as st, pytest.raises(AccessDenied) as caught:
            st.list_runs()  # the system's CAs do not know ours
        message = str(caught.value)
        assert "cannot verify the certificate of https://" in message and "\n" not in message
        assert "$TUNESCOPE_CA_BUNDLE" in message
        monkeypatch.setenv("TUNESCOPE_CA_BUNDLE", str(ca))
        with open_store(url) as st:
            tid = st.write(_batch(_spec("secure")))
            assert st.get_trial(tid).name == "t" and [r.name for r in st.list_runs()] == ["secure"]
            assert isinstance(st, HttpStore) and (st.requests, st.connections) == (3, 1)
        monkeypatch.setenv("TUNESCOPE_CA_BUNDLE", str(tmp_path / "nothing.pem"))
        with pytest.raises(ConfigError, match="TUNESCOPE_CA_BUNDLE"):
            open_store(url)
    finally:
        server.stop()


# ---------------------------------------------------------------------- tokens and projects
def test_a_missing_or_wrong_token_is_one_line_naming_the_variable(
    http_server: Server, project: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _token = project
    monkeypatch.delenv("TUNESCOPE_TOKEN")
    with open_store(url) as st, pytest.raises(AccessDenied) as caught:
        st.list_runs()
    assert "needs a token: set $TUNESCOPE_TOKEN" in str(caught.value)
    wrong = "ts_" + "w" * 43
    monkeypatch.setenv("TUNESCOPE_TOKEN", wrong)
    with open_store(url) as st, pytest.raises(AccessDenied) as caught:
        st.write(_batch(_spec()))
    message = str(caught.value)
    assert "refused the token in $TUNESCOPE_TOKEN" in message and "\n" not in message
    assert wrong not in message and "w" * 10 not in message
    assert classify(caught.value) == "refused"  # writers keep it in the spool, unsent


def test_a_read_token_reads_and_cannot_write(
    http_server: Server, project: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _token = project
    name = url.rsplit("/", 1)[1]
    with open_store(url) as st:
        tid = st.write(_batch(_spec("written")))
    monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(http_server.db_url, name, "read"))
    with open_store(url) as st:
        assert [r.name for r in st.list_runs()] == ["written"]
        assert st.get_trial(tid).name == "t"
        for write in (
            lambda: st.write(_batch(_spec("refused"))),
            lambda: st.ensure_run("refused"),
            lambda: st.add_scalars([Scalar(tid, "x", 1, T0, 1.0)]),
        ):
            with pytest.raises(AccessDenied, match="read only"):
                write()
        assert [r.name for r in st.list_runs()] == ["written"] and st.scalar_names(tid) == ["loss"]


def test_a_token_of_another_project_is_refused(
    http_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(http_server.db_url, "tok-a"))
    with open_store(http_server.url("tok-b")) as st, pytest.raises(AccessDenied) as caught:
        st.list_runs()
    assert "this token is for project 'tok-a', not 'tok-b'" in str(caught.value)


def test_another_projects_ids_are_not_found(
    http_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = f"a{new_key()[:8]}", f"b{new_key()[:8]}"
    monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(http_server.db_url, a))
    spec = _spec("theirs")
    with open_store(http_server.url(a)) as theirs:
        tid = theirs.write(_batch(spec))
        trial = theirs.get_trial(tid)
        sid = theirs.list_series(tid)[0].id
        packed = theirs.series(tid, "gpu.util", "0")
        n = CHUNK_SAMPLES + 44  # one chunk and some pending
        theirs.append_samples([(packed.id, T0 + i, 1.0) for i in range(n)])
        cid = theirs._chunk_summaries(packed.id, -math.inf, math.inf)[0][0]
    monkeypatch.setenv("TUNESCOPE_TOKEN", make_token(http_server.db_url, b))
    with open_store(http_server.url(b)) as mine:
        mine.ensure_run("mine")
        assert mine.list_projects() == [b]
        for call in (
            lambda: mine.get_trial(tid),
            lambda: mine.get_run(trial.run_id),
            lambda: mine.list_trials(trial.run_id),
            lambda: mine.create_trial(trial.run_id),
            lambda: mine.trial_by_key(spec.key),
            lambda: mine.owner(trial=tid),
            lambda: mine.owner(series=sid),
            lambda: mine.list_series(tid),
            lambda: mine.read_samples(sid),
            lambda: mine.window(sid, T0, T0 + 10, 5),
            lambda: mine.events(tid, T0, T0 + 10),
            lambda: mine.scalars(tid),
            lambda: mine.update_trial(tid, state="failed"),
            lambda: mine.append_samples([(sid, T0 + 99, 1.0)]),
            lambda: mine.add_events([Event(tid, "mark", T0, "x")]),
            lambda: mine._chunk_blobs([cid]),
            lambda: mine.write(Batch(spec.key, end=TrialEnd("failed", T0 + 5))),
        ):
            with pytest.raises(NotFound):
                call()
        assert not mine.update_trial(tid, state="failed", only_if_running=True)
        with pytest.raises(AccessDenied, match="not"):
            mine.list_runs(project=a)
        # a batch whose spec names another project records into the token's
        other = _spec("moved", project=a)
        mine.write(_batch(other))
        assert mine.trial_by_key(other.key).name == "t"
        assert [r.name for r in mine.list_runs()] == ["mine", "moved"]
    with open_store(http_server.db_url) as db:  # nothing of theirs changed
        assert db.get_trial(tid).end is None  # never ended
        assert len(db.read_samples(sid)[0]) == 10 and db.count_events(tid) == 1
        assert [r.name for r in db.list_runs(project=a)] == ["theirs"]


# ---------------------------------------------------------------------- requests and records
def test_one_request_per_batch_and_per_query_on_one_connection(project: tuple[str, str]) -> None:
    url, _token = project
    spec = _spec()
    with open_store(url) as st:
        assert isinstance(st, HttpStore)
        tid = st.write(_batch(spec, 10))
        for k in range(1, 20):
            st.write(_batch(spec, 10 * (k + 1), 10 * k).with_spec(None))
        assert (st.requests, st.connections) == (20, 1)
        sid = st.list_series(tid)[0].id
        before = st.requests
        w = st.window(sid, T0, T0 + 200, 50)
        ev = st.events(tid, T0, T0 + 200)
        t, _v = st.read_samples(sid)
        assert st.requests - before == 3 and st.connections == 1
    assert w.buckets is not None and sum(b.n for b in w.buckets) == len(t) == 200
    assert ev.total == 20


def test_records_and_floats_come_back_exactly(
    http_server: Server, project: tuple[str, str]
) -> None:
    url, _token = project
    spec = _spec()
    with open_store(url) as st:
        tid = st.write(_batch(spec, 600))
        st.add_events([Event(tid, "evaluation", T0 + 1 / 7, "eval", 3, 2 / 3, None, None)])
        via_http = _everything(st, tid)
    with open_store(http_server.db_url) as db:
        direct = _everything(db, tid)
    assert via_http == direct
    trial = via_http["trial"]
    assert isinstance(trial, TrialInfo)
    assert trial.params == {"lr": 0.1 + 0.2} and trial.pids == () and trial.start == T0
    _t, v = via_http["samples"]
    assert v == [float(np.float32(i / 7)) for i in range(600)]


def _everything(st: Store, tid: int) -> dict[str, object]:
    trial = st.get_trial(tid)
    (series,) = st.list_series(tid)
    t, v = st.read_samples(series.id)
    summaries = st._chunk_summaries(series.id, -math.inf, math.inf)
    return {
        "trial": trial,
        "run": st.get_run(trial.run_id),
        "series": series,
        "samples": (t.tolist(), v.tolist()),
        "summaries": summaries,
        "blobs": st._chunk_blobs([r[0] for r in summaries]),
        "pending": [a.tolist() for a in st._pending(series.id, -math.inf, math.inf)],
        "extent": st.series_extent(series.id),
        "raw": st.window(series.id, T0 + 10, T0 + 20, 100),
        "buckets": st.window(series.id, T0, T0 + 600, 7),
        "events": st.events(tid, T0, T0 + 600),
        "bins": st.events(tid, T0, T0 + 600, limit=1),
        "scalars": st.scalars(tid),
        "by_key": st.trial_by_key(trial.key),
    }


def test_the_server_packs_a_trials_series_when_its_end_lands(project: tuple[str, str]) -> None:
    url, _token = project
    spec = _spec()
    with open_store(url) as st:
        tid = st.write(_batch(spec, 30))
        st.write(Batch(spec.key, samples=(("gpu.mem", "0", None, T0, 5.0),)))
        sids = [s.id for s in st.list_series(tid)]
        before = [st.read_samples(sid) for sid in sids]

        def pending() -> int:
            return sum(len(st._pending(sid, -math.inf, math.inf)[0]) for sid in sids)

        assert pending() == 31 and all(not st._chunk_summaries(sid, 0, 2 * T0) for sid in sids)
        st.write(Batch(spec.key, end=TrialEnd("completed", T0 + 30)))
        assert wait_for(lambda: pending() == 0, 30)
        assert [len(st._chunk_summaries(sid, 0, 2 * T0)) for sid in sids] == [1, 1]
        after = [st.read_samples(sid) for sid in sids]
    for (t0, v0), (t1, v1) in zip(before, after, strict=True):
        assert t0.tolist() == t1.tolist() and v0.tolist() == v1.tolist()


def test_damage_on_the_server_is_skipped_and_flagged_through_http(
    http_server: Server, project: tuple[str, str]
) -> None:
    url, _token = project
    n = 4 * CHUNK_SAMPLES
    with open_store(url) as st:
        tid = st.create_trial(st.ensure_run("r", start=T0).id, start=T0).id
        bad, good = (st.series(tid, "gpu.util", d).id for d in ("0", "1"))
        for sid in (bad, good):
            st.append_samples((sid, T0 + k, float(k % 50)) for k in range(n))
        damage_chunk(http_server.db_url, bad, 2)
        assert len(st.read_samples(bad)[0]) == n - CHUNK_SAMPLES  # the damaged chunk left out
        assert st.window(bad, T0, T0 + n, 2000).corrupt_chunks == 1
        assert len(st.read_samples(good)[0]) == n
        assert [(s.id, k) for s, k in st.corrupt_series()] == [(bad, 1)]
    with open_store(url) as other:
        assert other.corrupt_series() == []  # it read nothing
        other.read_samples(good)
        assert other.corrupt_series() == []


# ---------------------------------------------------------------------- bodies
@pytest.fixture
def team(store_file: str) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    app = create_app(store_file, auth="tokens")
    tokens = {s: make_token(store_file, "p", s) for s in ("read", "write")}
    try:
        yield app, tokens
    finally:
        release_store(app.state.store)


def _post(
    app: FastAPI, path: str, token: str, body: bytes, **headers: str
) -> tuple[int, dict[str, object]]:
    sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers}
    r = request(app, path, method="POST", headers=sent, content=body)
    return r.status_code, r.json()


def test_bad_bodies_are_refused_in_the_one_shape_and_write_nothing(
    team: tuple[FastAPI, dict[str, str]],
) -> None:
    app, tokens = team
    good = _batch(_spec()).to_json()
    cases = [
        ("/api/v1/ingest", b"{not json", {}, 422, "invalid", "not JSON"),
        ("/api/v1/ingest", b"\x1f\x8b nonsense", {"Content-Encoding": "gzip"}, 422, "invalid", ""),
        (
            "/api/v1/ingest",
            gzip.compress(good)[:-9],
            {"Content-Encoding": "gzip"},
            422,
            "invalid",
            "cut short",
        ),
        ("/api/v1/ingest", good, {"Content-Type": "text/plain"}, 415, "unsupported", ""),
        ("/api/v1/ingest", good, {"Content-Encoding": "br"}, 415, "unsupported", ""),
        (
            "/api/v1/ingest",
            good.replace(b'"samples":[["cpu.util",null,null,', b'"samples":[["cpu.util",1,null,'),
            {},
            422,
            "invalid",
            "samples[0].device",
        ),
        ("/api/v1/store/nope", b"{}", {}, 404, "not_found", "no store method 'nope'"),
        ("/api/v1/store/get_trial", b'{"trial_id":"x"}', {}, 422, "invalid", "trial_id"),
        ("/api/v1/store/get_trial", b'{"trial":1}', {}, 422, "invalid", "unknown argument"),
        ("/api/v1/store/list_runs", b"[]", {}, 422, "invalid", "must be an object"),
        ("/api/v1/store/compact", b"{}", {}, 403, "forbidden", "needs a series_id"),
    ]
    for path, body, headers, status, code, words in cases:
        got, answer = _post(app, path, tokens["write"], body, **headers)
        err = answer["error"]
        assert isinstance(err, dict) and set(err) == {"status", "code", "message"}, answer
        assert got == err["status"] == status, (path, body[:40], answer)
        assert code in str(err["code"]) and words in str(err["message"]), (path, answer)
    got, answer = _post(app, "/api/v1/ingest", tokens["read"], good)
    assert got == 403 and answer["error"]["code"] == "forbidden"  # type: ignore[index]
    got, answer = _post(app, "/api/v1/store/list_runs", tokens["read"], b"{}")
    assert got == 200 and answer == {"result": []}  # nothing was written
    got, answer = _post(
        app, "/api/v1/ingest", tokens["write"], gzip.compress(good), **{"Content-Encoding": "gzip"}
    )
    assert got == 200 and isinstance(answer["trial"], int)
    got, answer = _post(app, "/api/v1/store/list_runs", tokens["read"], b"{}")
    assert [r["name"] for r in answer["result"]] == ["r"]  # type: ignore[attr-defined]


def test_the_local_viewer_takes_json_only_and_records_into_the_named_project(
    store_file: str,
) -> None:
    """`tunescope ui` has no tokens: a page of another site could post a form to it, which
    cannot carry application/json without a CORS preflight, so it is refused."""
    app = create_app(store_file)
    try:
        good = _batch(_spec()).to_json()
        form = {"Content-Type": "text/plain"}
        r = request(app, "/api/v1/ingest", method="POST", content=good, headers=form)
        assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
        sdk = {"Content-Type": "application/json", "Tunescope-Project": "viewer"}
        r = request(app, "/api/v1/ingest", method="POST", content=good, headers=sdk)
        assert r.status_code == 200
    finally:
        release_store(app.state.store)
    with open_store(store_file) as st:
        assert [r.name for r in st.list_runs(project="viewer")] == ["r"]
        assert st.list_runs() == []


# ---------------------------------------------------------------------- the values taken
# Store calls and batches are checked by one set of rules (store/_checks.py): a number the
# store keeps is finite (only a read's bounds may be infinite, never NaN), an integer is what
# the databases' 64-bit integers hold, a boolean is neither.
@pytest.fixture
def served(store_url: str) -> Iterator[tuple[FastAPI, str]]:
    """The team app over an empty store of each backend, and a write token of project p."""
    token = make_token(store_url, "p")
    with app_over(store_url, auth="tokens") as app:
        yield app, token


def _refused(answer: dict[str, Any], what: str) -> bool:
    err = answer["error"]
    assert isinstance(err, dict)
    return err["code"] == "invalid" and f"{what} must be" in str(err["message"])


def test_ids_are_64_bit_integers_and_never_booleans(served: tuple[FastAPI, str]) -> None:
    app, token = served
    for value, status in [
        (-(2**63), 404),  # checked, then looked for: there is none
        (2**63 - 1, 404),
        (-(2**63) - 1, 422),
        (2**63, 422),
        (True, 422),
        (1.0, 422),
        ("1", 422),
    ]:
        body = json.dumps({"trial_id": value}).encode()
        got, answer = _post(app, "/api/v1/store/get_trial", token, body)
        assert got == status, (value, answer)
        if status == 422:
            assert _refused(answer, "trial_id"), (value, answer)
        else:
            assert answer["error"]["code"] == "not_found", (value, answer)  # type: ignore[index]


def test_a_batchs_integers_take_the_same_rule(served: tuple[FastAPI, str], store_url: str) -> None:
    app, token = served
    for step, status in [(-(2**63) - 1, 422), (2**63, 422), (True, 422), (-(2**63), 200)]:
        spec = _spec()
        event = ("mark", T0, "m", step, None, None, None)
        body = Batch(spec.key, spec=spec, events=(event,)).to_json()
        got, answer = _post(app, "/api/v1/ingest", token, body)
        if status == 422:
            assert got == 422 and _refused(answer, "events[0].step"), (step, answer)
            continue
        assert got == 200, answer  # kept as given on every backend (schema 11: BIGINT)
        with open_store(store_url) as st:
            assert [e.step for e in st.all_events(int(answer["trial"]))] == [step]  # type: ignore[call-overload]


def test_a_number_a_store_keeps_is_finite_and_only_a_reads_bounds_are_open(
    served: tuple[FastAPI, str], store_url: str
) -> None:
    app, token = served
    got, answer = _post(app, "/api/v1/ingest", token, _batch(_spec(project="p")).to_json())
    assert got == 200, answer
    tid = int(answer["trial"])  # type: ignore[call-overload]
    with open_store(store_url) as st:
        before = st.get_trial(tid)
        sid = st.list_series(tid)[0].id
        samples = [a.tolist() for a in st.read_samples(sid)]
        events = st.all_events(tid)

    def call(name: str, args: dict[str, Any]) -> tuple[int, dict[str, object]]:
        return _post(app, f"/api/v1/store/{name}", token, json.dumps(args).encode())

    nan, inf = math.nan, math.inf
    event = {"trial_id": tid, "kind": "mark", "t": T0, "name": None, "step": None,
             "duration": None, "value": None, "data": None}  # fmt: skip
    scalar = {"trial_id": tid, "name": "loss", "step": 1, "t": T0, "value": 1.0}
    for name, args, what in [
        ("update_trial", {"trial_id": tid, "heartbeat": nan}, "heartbeat"),
        ("update_trial", {"trial_id": tid, "end": inf}, "end"),
        ("update_trial", {"trial_id": tid, "heartbeat": True}, "heartbeat"),
        ("create_trial", {"run_id": before.run_id, "interval": inf}, "interval"),
        ("ensure_run", {"name": "other", "start": -inf}, "start"),
        ("append_samples", {"rows": [[sid, T0 + 99, nan]]}, "rows[0].value"),
        ("append_samples", {"rows": [[sid, inf, 1.0]]}, "rows[0].t"),
        ("add_events", {"events": [{**event, "t": nan}]}, "events[0].t"),
        ("add_events", {"events": [{**event, "value": -inf}]}, "events[0].value"),
        ("add_scalars", {"scalars": [{**scalar, "value": nan}]}, "scalars[0].value"),
        ("add_scalars", {"scalars": [{**scalar, "step": -(2**63) - 1}]}, "scalars[0].step"),
        ("read_samples", {"series_id": sid, "start": nan}, "start"),
        ("window", {"series_id": sid, "start": T0, "end": nan, "points": 10}, "end"),
        ("count_events", {"trial_id": tid, "end": nan}, "end"),
    ]:
        got, answer = call(name, args)
        assert got == 422 and _refused(answer, what), (name, args, answer)
    with open_store(store_url) as st:  # nothing of them reached the store
        assert st.get_trial(tid) == before
        assert [a.tolist() for a in st.read_samples(sid)] == samples
        assert st.all_events(tid) == events and st.scalar_names(tid) == ["loss"]
        assert [r.name for r in st.list_runs(project="p")] == ["r"]
        assert len(st.list_trials(before.run_id)) == 1
    # a read's bounds may be open: -Infinity and Infinity
    got, answer = call("read_samples", {"series_id": sid, "start": -inf, "end": inf})
    assert got == 200 and answer["result"] == samples, answer
    got, answer = call("count_events", {"trial_id": tid, "start": -inf})
    assert got == 200 and answer["result"] == len(events), answer


def test_an_http_store_refuses_and_skips_the_values_a_sql_store_does(
    project: tuple[str, str],
) -> None:
    """The server refuses a sample or scalar that is not finite; an HTTP store does as a SQL
    store does with them: raises Rejected for the sample, skips the scalar (sending neither)."""
    url, _token = project
    with open_store(url) as st:
        assert isinstance(st, HttpStore)
        tid = st.write(_batch(_spec(), 3))
        sid = st.list_series(tid)[0].id
        sent = st.requests
        with pytest.raises(Rejected, match="finite"):
            st.append_samples([(sid, T0 + 50, 1.0), (sid, T0 + 51, math.nan)])
        assert st.add_scalars([Scalar(tid, "nan", 1, T0, math.nan)]) == 0
        assert st.requests == sent
        assert (
            st.add_scalars([Scalar(tid, "acc", 1, T0, 0.5), Scalar(tid, "x", 2, T0, math.inf)]) == 1
        )
        assert st.scalar_names(tid) == ["acc", "loss"]
        assert len(st.read_samples(sid)[0]) == 3


# ---------------------------------------------------------------------- read commands
NO_STORE = ("TUNESCOPE_STORE",)
"""The CLI's store is the one its --store names, never one from the environment tests run in."""


def test_read_commands_work_over_http_and_never_show_the_token(
    http_server: Server, project: tuple[str, str]
) -> None:
    url, token = project
    name = url.rsplit("/", 1)[1]
    spec = _spec("sweep")
    with open_store(url) as st:
        st.write(_batch(spec, 30))
        st.write(Batch(spec.key, end=TrialEnd("completed", T0 + 30, exit_code=0)))
    reader = make_token(http_server.db_url, name, "read")
    as_reader = {"TUNESCOPE_TOKEN": reader}
    runs = cli("runs", "--store", url, env=as_reader, drop=NO_STORE)
    assert runs.returncode == 0, runs.stderr
    assert "sweep" in runs.stdout and "completed" in runs.stdout
    trials = cli("trials", "sweep", "--store", url, env=as_reader, drop=NO_STORE)
    assert trials.returncode == 0, trials.stderr
    assert trials.stdout.splitlines()[2].split()[:2] == ["t", "completed"]
    export = cli("export", "sweep", "--store", url, env=as_reader, drop=NO_STORE)
    assert export.returncode == 0, export.stderr
    rows = list(csv.DictReader(io.StringIO(export.stdout)))
    assert len(rows) == 30 and {r["metric"] for r in rows} == {"cpu.util"}
    assert [float(r["t"]) for r in rows] == [round(T0 + i + 1 / 3, 3) for i in range(30)]
    events = cli("export", "sweep", "--what", "events", "--format", "json", "--store", url,
                 env=as_reader, drop=NO_STORE)  # fmt: skip
    assert events.returncode == 0 and len(json.loads(events.stdout)["events"]) == 1
    report = cli("report", "sweep", "--store", url, env=as_reader, drop=NO_STORE)
    assert report.returncode == 0 and "Trial t [completed]" in report.stdout, report.stderr
    wrong = "ts_" + "z" * 43
    refused = cli("runs", "--store", url, env={"TUNESCOPE_TOKEN": wrong}, drop=NO_STORE)
    one_line_error(refused, "$TUNESCOPE_TOKEN")
    for p in (runs, trials, export, events, report, refused):
        for secret in (token, reader, wrong):
            assert secret not in p.stdout + p.stderr


def test_tunescope_run_records_through_http(project: tuple[str, str]) -> None:
    """`tunescope run` and its sampler record a command's trial through the server: its
    params, samples and exit code."""
    url, token = project
    code = "import time; time.sleep(2); raise SystemExit(3)"
    p = cli("run", "--run", "cmd", "--trial", "t", "--param", "lr=0.1", "--interval", "0.2",
            "--store", url, "--", sys.executable, "-c", code,
            env={"TUNESCOPE_TOKEN": token}, drop=NO_STORE)  # fmt: skip
    assert p.returncode == 3, p.stderr
    assert token not in p.stdout + p.stderr
    with open_store(url) as st:
        (trial,) = st.list_trials(st.get_run("cmd").id)
        assert settled(url, trial.key).state == "failed"  # its sampler done writing
        assert st.exit_code(trial.id) == 3 and trial.params == {"lr": 0.1}
        assert len(sample_times(st, trial.id, "cpu.procs")) >= 5
