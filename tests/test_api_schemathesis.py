"""schemathesis over web/openapi.json: every operation of the document, fuzzed with a valid
write token against the real ASGI app (a team server, ``auth="tokens"``) over a real store
holding two projects, answers no 500 and no status the document does not list.

Bounded: :data:`EXAMPLES` examples per operation and mode (valid ones, half of them aimed at
the ids, keys and store arguments that exist, which random ones never hit; and invalid ones),
derandomized; the whole run takes under a minute per backend on this machine.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from test_api_auth import fill
from tunescope.server import create_app, release_store
from tunescope.store import open_store
from tunescope.store.remote.wire import CALLS, REQUIRED
from tunescope.store.sql._sql import SQLStore

schemathesis = pytest.importorskip("schemathesis")  # the dev extra

DOCUMENT = Path(__file__).resolve().parents[1] / "web" / "openapi.json"
EXAMPLES = 25
"""Examples per operation and generation mode (valid, invalid)."""


@pytest.fixture(scope="module", autouse=True)
def _schemathesis_loop() -> None:
    """schemathesis answers ASGI calls through one event-loop thread it keeps for the life of
    the process (its sockets live as long): started here, before the tests, so the leak check
    charges them to no test."""
    from schemathesis.python.asgi import get_client

    with get_client(FastAPI()) as client:
        assert client.request("GET", "http://localhost/").status_code == 404


@pytest.fixture
def server(store_url: str) -> Iterator[tuple[FastAPI, str, dict[str, Any]]]:
    """The team app over ``store_url`` with projects vision and nlp; a vision write token
    and the ids the fuzzer may aim at (vision's, and nlp's, which must look missing)."""
    with open_store(store_url) as store:
        assert isinstance(store, SQLStore)
        t0 = time.time() - 3600
        run, trial = fill(store, "vision", t0)
        other_run, other_trial = fill(store, "nlp", t0)
        token = store.create_token("vision", "write")[1]
        series = store.list_series(trial)[0].id
        keys = [store.get_trial(trial).key, store.get_trial(other_trial).key]
    app = create_app(store_url, auth="tokens", allowed_hosts=["testserver"])
    ids = {
        "run": [run, "sweep", other_run],
        "trial": [trial, other_trial],
        "series": series,
        "key": keys,
    }
    try:
        yield app, token, ids
    finally:
        release_store(app.state.store)


def _arguments(method: str, ids: dict[str, Any], pick: int) -> dict[str, Any]:
    """Arguments of store method ``method`` that reach the store: its required ones, the
    ids among them the fixture's (vision's, or with ``pick`` 1 nlp's)."""
    trials = ids["trial"]
    known: dict[str, Any] = {
        "run_id": ids["run"][0 if pick != 1 else 2],
        "run": ids["run"][pick],
        "trial_id": trials[pick % 2],
        "series_id": ids["series"],
        "start": 0.0,
        "end": 1e10,
        "points": 10,
        "bins": 10,
        "name": "sweep",
        "metric": "cpu.util",
        "key": ids["key"][pick % 2],
        "rows": [],
        "events": [],
        "scalars": [],
        "chunk_ids": [],
    }
    return {
        name: known.get(name, "x")
        for name, (_check, default) in CALLS[method].params.items()
        if default is REQUIRED
    }


def _fuzz(
    cases: Any,
    valid: bool,
    ids: dict[str, Any],
    auth: dict[str, str],
    seen: Counter[tuple[str, str, int]],
    failures: list[str],
) -> None:
    """Send :data:`EXAMPLES` of ``cases`` (``valid``: half of them aimed at what exists),
    counting each answer in ``seen`` and each failed check in ``failures``."""
    from schemathesis import checks

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, aim=st.booleans(), pick=st.integers(0, 2))
    def fuzz(case: Any, aim: bool, pick: int) -> None:
        params = case.path_parameters or {}
        if aim and valid:
            for name in ("run", "trial"):
                if name in params:
                    params[name] = ids[name][pick % len(ids[name])]
            if case.query and "metric" in case.query:
                case.query["metric"] = "cpu.util"
            if "method" in params:
                case.body = _arguments(params["method"], ids, pick)
            elif case.path == "/api/v1/ingest" and isinstance(case.body, dict):
                batch = {"id": f"b{case.body.get('id', '')}"[:40], "host": "h"}
                case.body = {**batch, "trial": ids["key"][pick % 2]}
        response = case.call(headers=auth)
        seen[(case.method, case.path, response.status_code)] += 1
        try:
            case.validate_response(
                response, checks=[checks.not_a_server_error, checks.status_code_conformance]
            )
        except BaseException as exc:  # schemathesis' FailureGroup is an exception group
            failures.append(f"{case.method} {case.path}: {str(exc)[:400]}")

    fuzz()


def test_schemathesis_finds_no_500_and_no_undocumented_status(
    server: tuple[FastAPI, str, dict[str, Any]],
) -> None:
    from schemathesis.generation import GenerationMode

    app, token, ids = server
    schema = schemathesis.openapi.from_path(str(DOCUMENT))
    schema.app = app
    auth = {"Authorization": f"Bearer {token}"}
    seen: Counter[tuple[str, str, int]] = Counter()
    failures: list[str] = []
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 20  # every route of the document

    for op in operations:
        for valid in (True, False):
            mode = GenerationMode.POSITIVE if valid else GenerationMode.NEGATIVE
            try:
                _fuzz(op.as_strategy(generation_mode=mode), valid, ids, auth, seen, failures)
            except Unsatisfiable:
                assert not valid, op  # an operation without parameters has no invalid case

    print("\n".join(f"{m} {p} {s}: {n}" for (m, p, s), n in sorted(seen.items())))
    assert not failures, "\n".join(failures[:20])
    assert not [k for k in seen if k[2] >= 500]
    statuses = {s for _, _, s in seen}
    assert {200, 404, 422} <= statuses  # it reached the routes, not just their refusals
    assert sum(n for (m, p, s), n in seen.items() if s == 200 and "{" in p) > 0
