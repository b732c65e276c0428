"""The API's answers have exactly the keys of their models (server/_schema), in the models'
order, at every depth: the models are the one description of each JSON shape, from which the
OpenAPI document and the page's types are generated. Every GET route that declares a model is
asked, over a store that gives each shape at least one non-empty answer; and the shapes'
constructors refuse keys a model lacks."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from pydantic import BaseModel, TypeAdapter

from api_helpers import app_over, request
from serving_helpers import write_load_run
from tunescope.analyze import UsageRow
from tunescope.metrics import GIB
from tunescope.server import _schema as schema
from tunescope.store import Batch, Event, Scalar, TrialEnd, TrialSpec, new_key, open_store

T0 = 1_700_000_000.0
H100 = 81559 * 1024.0**2


def _sweep_trial(st: Any, start: float, objective: float, mem_gib: float) -> int:
    """A trial of an Optuna-like sweep on one H100: GPU series, an objective, where it ran."""
    key = new_key()
    spec = TrialSpec(
        key=key, run="sweep", start=start, interval=10.0, host="h",
        params={"optuna.direction": "maximize"},
    )  # fmt: skip
    rows = []
    for i in range(1, 361):
        t = start + 10.0 * i
        rows += [
            ("gpu.util", "0", None, t, 95.0),
            ("gpu.mem", "0", None, t, mem_gib * GIB),
            ("gpu.mem.total", "0", None, t, H100),
        ]
    return st.write(  # type: ignore[no-any-return]
        Batch(
            key,
            spec=spec,
            samples=tuple(rows),
            scalars=(("eval/objective", 1, start + 3599, objective),),
            host="h",
            where={"gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3"}]},
            end=TrialEnd("completed", start + 3600),
        )
    )


@pytest.fixture
def app(sqlite_url: str) -> Iterator[FastAPI]:
    with open_store(sqlite_url) as st:
        run = st.ensure_run("search", start=T0, project="vision", os_user="ana", host="box")
        done = st.create_trial(run.id, params={"lr": 1e-4}, host="node1", pids=[7], start=T0)
        for device in ("0", "1"):
            sid = st.series(done.id, "gpu.mem", device).id
            st.append_samples([(sid, T0 + i, 10 * GIB + i) for i in range(600)])
        sid = st.series(done.id, "cpu.util").id
        st.append_samples([(sid, T0 + i, 40.0) for i in range(600)])
        st.add_events(
            [Event(done.id, "optimizer_step", T0 + 2 * k, step=k) for k in range(300)]
            + [
                Event(done.id, "evaluation", T0 + 100, name="eval", step=50, duration=9.0),
                Event(done.id, "checkpoint", T0 + 110, name="c", step=50,
                      data={"path": "/ckpt/50", "bytes": 1000}),
            ]
        )  # fmt: skip
        st.add_scalars([Scalar(done.id, "loss", k, T0 + k, 1.0 / (k + 1)) for k in range(50)])
        st.update_trial(done.id, state="completed", end=T0 + 600)
        st.ensure_run("empty", start=T0 - 100)
        _sweep_trial(st, T0, 0.7, 10)
        _sweep_trial(st, T0 + 4000, 0.9, 30)
        write_load_run(st, levels=(1, 2))
    with app_over(sqlite_url) as application:
        yield application


def _urls(app: FastAPI) -> dict[str, list[str]]:
    """The URLs asked of each GET route's path (its ids and names found through the API)."""
    runs = request(app, "/api/runs").json()
    trials = [t["id"] for r in runs for t in request(app, f"/api/runs/{r['id']}/trials").json()]
    search = next(r["id"] for r in runs if r["name"] == "search")
    done = request(app, f"/api/runs/{search}/trials").json()[0]["id"]
    at = {"start": T0, "end": T0 + 600}
    return {
        "/api/health": ["/api/health"],
        "/api/session": ["/api/session"],
        "/api/metrics": ["/api/metrics"],
        "/api/projects": ["/api/projects"],
        "/api/runs": ["/api/runs", "/api/runs?project=vision"],
        "/api/usage": [
            f"/api/usage?since={T0 - 10**5}&until={T0 + 10**5}&by=project,run&group=day",
            f"/api/usage?since={T0 - 10**5}&until={T0 + 10**5}&by=gpu_model&price=h100-80gb=2",
        ],
        **{
            f"/api/runs/{{run}}{tail}": [f"/api/runs/{r['id']}{tail}" for r in runs]
            for tail in ("", "/findings", "/serving", "/frontier", "/trials")
        },
        **{
            f"/api/trials/{{trial}}{tail}": [f"/api/trials/{t}{tail}" for t in trials]
            for tail in ("", "/findings", "/metrics", "/checkpoints", "/scalars")
        },
        "/api/trials/{trial}/series": [
            f"/api/trials/{done}/series?metric={m}{q}"
            for m in ("gpu.mem", "cpu.util")
            for q in ("&points=20", f"&start={at['start']}&end={at['end']}", "")
        ],
        "/api/trials/{trial}/events": [
            f"/api/trials/{done}/events",
            f"/api/trials/{done}/events?limit=5",  # binned, with the first page's cursor
        ],
    }


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    return {name: f.annotation for name, f in model.model_fields.items()}


def _check(value: Any, kind: Any, seen: set[str], where: str) -> None:
    """``value`` (parsed JSON) has the keys of ``kind`` (an annotation) in its order, at every
    depth that a model describes; ``seen`` collects the models met with a value."""
    origin = typing.get_origin(kind)
    if value is None:
        return
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        assert len(options) == 1, f"{where}: no shape is a union of two"
        _check(value, options[0], seen, where)
    elif origin is list:
        for i, v in enumerate(value):
            _check(v, typing.get_args(kind)[0], seen, f"{where}[{i}]")
    elif origin is dict:
        for k, v in value.items():
            _check(v, typing.get_args(kind)[1], seen, f"{where}.{k}")
    elif isinstance(kind, type) and issubclass(kind, BaseModel):
        fields = _fields(kind)
        sent = list(value)
        # a field with a default may be left out (HealthOut.store, for a team server)
        listed = [k for k in fields if k in value]
        assert sent == listed, f"{where}: sent {sent}, {kind.__name__} lists {list(fields)}"
        missing = [k for k, f in kind.model_fields.items() if f.is_required() and k not in value]
        assert not missing, f"{where}: {kind.__name__}'s {missing} missing"
        seen.add(kind.__name__)
        for k in sent:
            _check(value[k], fields[k], seen, f"{where}.{k}")


def _models(kind: Any, out: set[str]) -> set[str]:
    """The names of the models ``kind`` is built of."""
    for arg in typing.get_args(kind):
        _models(arg, out)
    if isinstance(kind, type) and issubclass(kind, BaseModel) and kind.__name__ not in out:
        out.add(kind.__name__)
        for f in _fields(kind).values():
            _models(f, out)
    return out


def _answers(app: FastAPI) -> dict[str, Any]:
    """Each GET path of the app's OpenAPI document that answers JSON -> the model of its answer
    (``list[Model]`` for an array)."""
    out: dict[str, Any] = {}
    for path, ops in app.openapi()["paths"].items():
        content = ops.get("get", {}).get("responses", {}).get("200", {}).get("content", {})
        doc = content.get("application/json", {}).get("schema")
        if doc is None:
            continue  # /metrics: Prometheus text
        ref = doc.get("items", doc)["$ref"].rsplit("/", 1)[1]
        model = getattr(schema, ref)
        out[path] = list[model] if doc.get("type") == "array" else model  # type: ignore[valid-type]
    return out


def test_every_answer_has_its_models_keys_in_their_order(app: FastAPI) -> None:
    urls, answers = _urls(app), _answers(app)
    assert set(answers) == set(urls), "a GET route this test does not ask"
    seen: set[str] = set()
    needed: set[str] = set()
    for path, model in answers.items():
        _models(model, needed)
        for url in urls[path]:
            r = request(app, url)
            assert r.status_code == 200, (url, r.text)
            body = r.json()
            TypeAdapter(model).validate_python(body)
            _check(body, model, seen, url)
    # every shape was met with a value, so each was checked at least once
    assert needed - seen == set()


def test_errors_have_the_error_model_keys(app: FastAPI) -> None:
    seen: set[str] = set()
    for url in ("/api/trials/999", "/api/runs/nope", "/api/trials/1/series?metric=x.y&points=0"):
        r = request(app, url)
        assert r.status_code in (404, 422)
        _check(r.json(), schema.ErrorOut, seen, url)
    assert seen == {"ErrorOut", "ErrorBody"}


def test_the_constructors_refuse_keys_the_model_lacks() -> None:
    with pytest.raises(TypeError, match=r"ProjectOut: unknown \['nam'\], missing \['name'\]"):
        schema.ProjectOut.make(nam="x")
    with pytest.raises(TypeError, match=r"missing \['ok'\]"):
        schema.HealthOut.make(store="x")
    with pytest.raises(TypeError, match=r"unknown \['extra'\]"):
        schema.ProjectOut.make(name="x", extra=1)
    scalar = Scalar(1, "loss", 3, T0, 0.5)
    with pytest.raises(TypeError, match=r"ScalarOut: unknown \['val'\]"):
        schema.ScalarOut.of(scalar, val=1.0)
    # the keys in the model's order, whatever order they are given in
    assert list(schema.HealthOut.make(store="s", ok=True)) == ["ok", "store"]
    assert schema.HealthOut.make(ok=True) == {"ok": True}  # a default left out is not sent
    assert schema.ScalarOut.of(scalar) == {"name": "loss", "step": 3, "t": T0, "value": 0.5}
    assert schema.ScalarOut.of(scalar, value=None)["value"] is None
    assert schema.ScalarOut.of_each([scalar, scalar]) == [schema.ScalarOut.of(scalar)] * 2


def test_a_usage_row_is_sent_with_the_fields_of_the_analysis_row() -> None:
    """UsageRowOut is UsageRow (analyze) with its grouping's values under ``keys``: the two
    cannot drift apart."""
    assert list(schema.UsageRowOut.model_fields) == [f.name for f in dataclasses.fields(UsageRow)]
