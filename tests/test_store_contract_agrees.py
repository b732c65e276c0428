"""A store method is declared once, in the contract (``store/_contract.py::Store``); every
backend, the pool, the HTTP store and the server's table of calls agree with it.

The SQLite and PostgreSQL stores implement it, the pool (``store/sql/_pool.py``) and the HTTP
store (``store/remote/_http.py``) pass it on (most of their methods made from the contract's), and
the server serves the calls of ``store/remote/wire.py::CALLS``, whose arguments are read from the
contract's signatures. These tests fail when one of them lacks a contract method or takes
it with another signature (the names, kinds and defaults of its parameters, their types as
``typing.get_type_hints`` reads them), and when the HTTP store sends a call the server does
not serve, or the other way round. They read classes and source only: no store is opened.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from tunescope.store import PooledStore, SQLStore, Store
from tunescope.store.remote._http import HttpStore
from tunescope.store.remote.wire import CALLS, REQUIRED
from tunescope.store.sql._postgres import PostgresStore
from tunescope.store.sql._sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
HTTP_SOURCE = ROOT / "src" / "tunescope" / "store" / "remote" / "_http.py"

BACKENDS: list[type[Store]] = [SQLiteStore, PostgresStore, HttpStore, PooledStore]

CONTRACT = sorted(
    n
    for n, v in vars(Store).items()
    if not n.startswith("__")
    and isinstance(v, (staticmethod, type(Store.close)))
    and (not n.startswith("_") or getattr(v, "__isabstractmethod__", False))
)
"""The contract's methods: its public ones and the primitives backends implement (its
abstract private ones); not its private helpers (``_decode_chunks``, ``_raw_parts``…)."""

NOT_SERVED = {
    "close": "releases the HTTP store's own connection",
    "write": "POST /api/v1/ingest, not a call",
    "derive_state": "a pure function of its arguments",
    "all_events": "Store.all_events: one _fetch_events call",
}
"""Contract methods an HTTP store answers without a call of their own name."""

LOCAL = {"derive_state": "a pure function of its arguments"}
"""Contract methods the pool answers itself rather than on one member."""


_WRITES = {
    "ensure_run",
    "create_trial",
    "update_trial",
    "series",
    "append_samples",
    "compact",
    "add_events",
    "add_scalars",
}
"""The calls that change the store: a read token may not make them."""
_ONCE = {"create_trial", "append_samples", "add_events", "add_scalars"}
"""The calls an HTTP store never sends twice (whether the first landed is unknown when a
reused connection closes before any answer: they would be written twice)."""


def _hints(fn: Any) -> dict[str, Any]:
    return typing.get_type_hints(fn)


def _differences(contract: Any, impl: Any) -> list[str]:
    """How ``impl`` is declared otherwise than ``contract``: its parameters' names, kinds and
    defaults, and the types of its parameters and result."""
    want = inspect.signature(contract).parameters
    got = inspect.signature(impl).parameters
    out = []
    shape = [(p.name, p.kind, p.default) for p in want.values()]
    if [(p.name, p.kind, p.default) for p in got.values()] != shape:
        out.append(f"parameters {list(got.values())} instead of {list(want.values())}")
    hints_want, hints_got = _hints(contract), _hints(impl)
    for key in sorted(set(hints_want) | set(hints_got)):
        if hints_want.get(key) != hints_got.get(key):
            out.append(f"{key}: {hints_got.get(key)} instead of {hints_want.get(key)}")
    return out


def test_the_contract_is_what_these_tests_think_it_is() -> None:
    """The set of methods the other tests walk holds the primitives and derived queries (a
    bug in how it is gathered would pass everything)."""
    assert {"ensure_run", "write", "window", "derive_state", "_chunk_blobs", "close"} <= set(
        CONTRACT
    )
    assert not {"_decode_chunks", "_raw_parts", "__enter__"} & set(CONTRACT)
    assert len(CONTRACT) >= 35


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_every_backend_implements_the_contract_with_its_signatures(backend: type[Store]) -> None:
    """Every contract method is implemented (none left abstract), and every method a backend
    declares over one of the contract's (its hooks too, such as ``_rollup_state``) takes
    the same parameters, of the same types, and returns the same type."""
    assert not getattr(backend, "__abstractmethods__", None), backend.__abstractmethods__
    bad = []
    for name in vars(Store):
        ours = getattr(Store, name)
        if name.startswith("__") or not callable(ours):
            continue
        theirs = getattr(backend, name)
        if theirs is ours:
            continue  # inherited as written once in the contract
        bad += [f"{backend.__name__}.{name}: {d}" for d in _differences(ours, theirs)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("backend", "others"), [(PooledStore, LOCAL), (HttpStore, NOT_SERVED)], ids=["pool", "http"]
)
def test_the_pool_and_the_http_store_pass_on_every_contract_method(
    backend: type[Store], others: dict[str, str]
) -> None:
    """The pool lends one member for every contract method, derived queries included (a
    window on one connection, not one per primitive); the HTTP store sends one call for
    each (a derived query runs on the server), but for those it answers otherwise."""
    own = set(vars(backend))
    missing = [n for n in CONTRACT if n not in own and n not in others]
    assert not missing, f"{backend.__name__} inherits {missing} from Store"
    if backend is HttpStore:
        assert not (set(others) - {"close", "write"}) & own


def test_the_pools_passes_of_sql_stores_own_methods_agree_with_them() -> None:
    """Beyond the contract the pool passes on SQL stores' own methods (tokens, pages,
    retention) for the server: each as SQLStore declares it."""
    extra = [
        n
        for n, v in vars(PooledStore).items()
        if callable(v) and not n.startswith("_") and not hasattr(Store, n)
    ]
    assert {"check_token", "event_page", "drop_raw"} <= set(extra)
    bad = []
    for name in extra:
        assert hasattr(SQLStore, name), f"PooledStore.{name} passes on what SQLStore lacks"
        bad += [
            f"PooledStore.{name}: {d}"
            for d in _differences(getattr(SQLStore, name), getattr(PooledStore, name))
        ]
    assert not bad, "\n".join(bad)


def test_the_server_serves_the_contract_methods_and_no_other() -> None:
    assert set(CALLS) == set(CONTRACT) - set(NOT_SERVED)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_calls_arguments_are_its_contract_methods(name: str) -> None:
    """The server checks and defaults the arguments the contract method takes, by its
    names and defaults, and only ``_chunk_blobs`` takes one more (the series its chunks
    belong to, which the route checks and drops)."""
    call = CALLS[name]
    taken = list(inspect.signature(getattr(Store, name)).parameters.values())[1:]
    extra = {"series_ids": []} if name == "_chunk_blobs" else {}
    want = [(p.name, REQUIRED if p.default is p.empty else p.default) for p in taken]
    want += list(extra.items())
    assert [(k, default) for k, (_check, default) in call.params.items()] == want
    assert call.write == (name in _WRITES), name
    assert call.repeat == (name not in _ONCE), name


def _calls_sent() -> tuple[set[str], list[str]]:
    """The calls the HTTP store's source sends: ``self._get("NAME", …)`` and
    ``_remote(Store.NAME)``; and the ``_get`` calls whose name is not written out."""
    sent: set[str] = set()
    unnamed = []
    tree = ast.parse(HTTP_SOURCE.read_text(encoding="utf-8"))
    (remote,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "_remote"]
    inside = set(map(id, ast.walk(remote)))  # its _get sends the name it was made for
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in inside:
            continue
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr == "_get":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                sent.add(first.value)
            else:
                unnamed.append(f"line {node.lineno}")
        elif isinstance(fn, ast.Name) and fn.id == "_remote":
            (arg,) = node.args
            assert isinstance(arg, ast.Attribute), ast.dump(arg)
            sent.add(arg.attr)
    return sent, unnamed


def test_the_http_store_sends_exactly_the_calls_the_server_serves() -> None:
    sent, unnamed = _calls_sent()
    assert not unnamed, f"_http.py sends calls named at run time: {unnamed}"
    assert "window" in sent and "get_trial" in sent  # the scan sees both ways of sending
    assert sent - set(CALLS) == set(), "the HTTP store sends calls the server does not serve"
    assert set(CALLS) - sent == set(), "the server serves calls no HTTP store sends"


def test_the_api_docs_name_every_call() -> None:
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    calls = doc.split("**Calls.**", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", calls))
    assert set(CALLS) <= named, sorted(set(CALLS) - named)
