"""Every query route of docs/api.md against the real app and a real SQLite file, filled
through the real store API."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from pydantic import TypeAdapter

from api_helpers import app_over, request
from http_helpers import run_async
from store_helpers import damage_chunk
from tunescope.metrics import CATALOG, GIB
from tunescope.server import _schema as schema
from tunescope.server._queries import ScalarCurves, thin_scalars
from tunescope.store import CHUNK_SAMPLES, Batch, Event, Scalar, Store, open_store

# The finished trials' times: a fixed second in the past. The running and the lost trial
# are placed relative to the clock read by the ``data`` fixture (``Data.now``).
T0 = 1_700_000_000.0
N = 5000  # samples per series of the finished trial, 1 Hz
SPIKE_AT = 2345
SPIKE = 70 * GIB
STEP_EVERY = 2.0
EVAL_EVERY, EVAL_LEN = 1000.0, 60.0


def call(app: FastAPI, url: str, **params: Any) -> httpx.Response:
    """One GET through the app in-process (no socket)."""
    return request(app, url, params=params)


def ok(app: FastAPI, url: str, model: Any = None, **params: Any) -> Any:
    """GET, assert 200 and (when given) that the body fits the documented model."""
    r = call(app, url, **params)
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    if model is not None:
        TypeAdapter(model).validate_python(body, strict=False)
    return body


@dataclass
class Data:
    store: Store
    run: int
    done: int  # completed trial with long series, events, scalars, checkpoints
    failed: int
    live: int  # running trial
    lost: int
    older_run: int
    series: dict[tuple[str, str | None], int]  # (metric, device) of the finished trial -> id
    now: float  # the wall clock when the data was written


def _fill(store: Store, now: float) -> Data:
    run = store.ensure_run("search", start=T0)
    done = store.create_trial(
        run.id, params={"lr": 1e-4, "bs": 8}, host="node1", pids=[100, 101], start=T0
    )
    failed = store.create_trial(run.id, name="oom", start=T0 + 100)
    live = store.create_trial(run.id, start=now - 300)
    lost = store.create_trial(run.id, start=T0 + 50)
    store.update_trial(lost.id, heartbeat=now - 900)
    store.update_trial(live.id, heartbeat=now)
    store.update_trial(failed.id, state="failed", end=T0 + 200, error="CUDA out of memory")

    t = T0 + np.arange(N, dtype=np.float64)
    rng = np.random.default_rng(7)
    ids: dict[tuple[str, str | None], int] = {}
    rows: list[tuple[int, float, float]] = []
    for metric, device, values in (
        ("gpu.mem", "0", 20 * GIB + 2 * GIB * np.sin(t / 300.0)),
        ("gpu.mem", "1", 18 * GIB + rng.normal(0, GIB / 10, N)),
        ("gpu.util", "0", np.clip(rng.normal(80, 15, N), 0, 100)),
        ("gpu.util", "1", np.clip(rng.normal(60, 20, N), 0, 100)),
        ("cpu.util", None, np.clip(rng.normal(40, 10, N), 0, 100)),
        ("cpu.mem", None, 8 * GIB + np.cumsum(rng.normal(0, 1e6, N))),
    ):
        note = (
            "device memory: per-process unavailable"
            if (metric, device) == ("gpu.mem", "1")
            else None
        )
        sid = store.series(done.id, metric, device, note=note).id
        ids[(metric, device)] = sid
        vals = values.copy()
        if (metric, device) == ("gpu.mem", "0"):
            vals[SPIKE_AT] = SPIKE  # one sample: must survive as a bucket max
        rows.extend(zip([sid] * N, t.tolist(), vals.tolist(), strict=True))
    for i in range(0, len(rows), 7000):
        store.append_samples(rows[i : i + 7000])

    events = [
        Event(done.id, "optimizer_step", T0 + k * STEP_EVERY, step=k)
        for k in range(int(N / STEP_EVERY))
    ]
    for k in range(1, 5):
        te = T0 + k * EVAL_EVERY
        events.append(
            Event(
                done.id,
                "evaluation",
                te,
                name="eval",
                step=k * 500,
                duration=EVAL_LEN,
                value=1.0 / k,
            )
        )
        events.append(
            Event(
                done.id,
                "checkpoint",
                te + EVAL_LEN + 1,
                name=f"checkpoint-{k}",
                step=k * 500,
                data={"path": f"/ckpt/step-{k * 500}", "bytes": 1_000_000 * k},
            )
        )
    events.append(Event(done.id, "data_wait", T0 + 10, duration=0.5))
    store.add_events(events)
    store.add_scalars(
        [Scalar(done.id, "loss", k, T0 + k * 10, 2.0 - k / 100) for k in range(100)]
        + [
            Scalar(done.id, "eval_loss", k * 500, T0 + k * EVAL_EVERY + EVAL_LEN, 1.0 / k)
            for k in range(1, 5)
        ]
    )
    store.update_trial(done.id, state="completed", end=T0 + N)

    fs = store.series(failed.id, "gpu.mem", "0").id
    store.append_samples([(fs, T0 + 100 + i, 30 * GIB) for i in range(50)])
    ls = store.series(live.id, "gpu.mem", "0").id
    store.append_samples([(ls, now - 300 + i, 5 * GIB + i * 2**20) for i in range(100)])

    older = store.ensure_run("older", start=T0 - 10_000)
    o = store.create_trial(older.id, start=T0 - 10_000)
    so = store.series(o.id, "cpu.util").id
    store.append_samples([(so, T0 - 10_000 + i, 50.0) for i in range(10)])
    store.update_trial(o.id, state="completed", end=T0 - 9_000)
    store.ensure_run("empty", start=T0 - 20_000)
    return Data(store, run.id, done.id, failed.id, live.id, lost.id, older.id, ids, now)


@pytest.fixture
def data(sqlite_url: str) -> Iterator[Data]:
    store = open_store(sqlite_url)
    try:
        yield _fill(store, time.time())
    finally:
        store.close()


@pytest.fixture
def app(sqlite_url: str, data: Data) -> Iterator[FastAPI]:
    with app_over(sqlite_url) as application:
        yield application


def _expected_buckets(
    t: np.ndarray, v: np.ndarray, start: float, end: float, points: int
) -> list[tuple[int, float, float, float, float]]:
    """(n, min, max, mean, midpoint t) of every non-empty span, computed from raw samples."""
    keep = (t >= start) & (t <= end)
    t, v = t[keep], v[keep]
    width = (end - start) / points
    idx = np.minimum(points - 1, ((t - start) / width).astype(np.int64))
    out = []
    for i in np.unique(idx):
        sel = idx == i
        ts, vs = t[sel], v[sel]
        out.append(
            (
                int(sel.sum()),
                float(vs.min()),
                float(vs.max()),
                float(vs.mean()),
                (float(ts[0]) + float(ts[-1])) / 2,
            )
        )
    return out


# ---------------------------------------------------------------------------- catalog, runs
def test_health_names_the_store(app: FastAPI, sqlite_url: str) -> None:
    body = ok(app, "/api/health", schema.HealthOut)
    assert body["ok"] is True and body["store"].endswith("store.db")


def test_metrics_is_the_catalog(app: FastAPI) -> None:
    body = ok(app, "/api/metrics", list[schema.MetricOut])
    assert [m["key"] for m in body] == [m.key for m in CATALOG]
    gpu_mem = next(m for m in body if m["key"] == "gpu.mem")
    assert gpu_mem["scale"] == pytest.approx(1 / GIB) and gpu_mem["markers"] is True
    assert [m["key"] for m in body if m["headline"]] == [
        "cpu.util",
        "gpu.util",
        "cpu.mem",
        "gpu.mem",
    ]


def test_runs_newest_first_with_duration_and_peak(app: FastAPI, data: Data) -> None:
    body = ok(app, "/api/runs", list[schema.RunOut])
    assert [r["name"] for r in body] == ["search", "older", "empty"]
    search, older, empty = body
    assert search["state"] == "running" and search["end"] is None and search["trials"] == 4
    assert search["peak_gpu_mem"] == float(np.float32(SPIKE))
    assert search["duration_s"] == pytest.approx(data.now - T0, abs=5)  # live trial's heartbeat
    assert older["state"] == "completed" and older["peak_gpu_mem"] is None
    assert older["duration_s"] == pytest.approx(1000.0)
    assert empty["state"] == "empty" and empty["trials"] == 0 and empty["duration_s"] == 0


def test_run_by_id_or_name_with_trials_in_every_state(app: FastAPI, data: Data) -> None:
    by_name = ok(app, "/api/runs/search", schema.RunDetailOut)
    by_id = ok(app, f"/api/runs/{data.run}", schema.RunDetailOut)
    assert by_name == by_id
    states = {t["name"]: t["state"] for t in by_name["trials"]}
    assert states == {
        "trial-0": "completed",
        "oom": "failed",
        "trial-2": "running",
        "trial-3": "lost",
    }
    trials = ok(app, "/api/runs/search/trials", list[schema.TrialOut])
    assert trials == by_name["trials"]
    assert [t["id"] for t in trials] == [data.done, data.failed, data.live, data.lost]
    assert call(app, "/api/runs/nope").status_code == 404
    assert call(app, "/api/runs/99999/trials").status_code == 404


def test_trial_fields(app: FastAPI, data: Data) -> None:
    t = ok(app, f"/api/trials/{data.done}", schema.TrialOut)
    assert t["params"] == {"lr": 1e-4, "bs": 8} and t["pids"] == [100, 101]
    assert (t["host"], t["start"], t["end"], t["state"]) == ("node1", T0, T0 + N, "completed")
    assert t["run_id"] == data.run and t["interval"] == 1.0 and t["error"] is None
    f = ok(app, f"/api/trials/{data.failed}", schema.TrialOut)
    assert f["error"] == "CUDA out of memory" and f["state"] == "failed"
    assert call(app, "/api/trials/424242").status_code == 404


def test_trial_metrics_in_catalog_order_with_devices(app: FastAPI, data: Data) -> None:
    body = ok(app, f"/api/trials/{data.done}/metrics", list[schema.TrialMetricOut])
    one = [{"host": "node1", "device": None}]
    two = [{"host": "node1", "device": "0"}, {"host": "node1", "device": "1"}]
    assert body == [
        {"metric": "cpu.util", "devices": [None], "series": one},
        {"metric": "gpu.util", "devices": ["0", "1"], "series": two},
        {"metric": "cpu.mem", "devices": [None], "series": one},
        {"metric": "gpu.mem", "devices": ["0", "1"], "series": two},
    ]
    t = ok(app, f"/api/trials/{data.done}", schema.TrialDetailOut)
    assert (t["hosts"], t["where"]) == (["node1"], {"node1": {}})


def test_a_trial_on_two_hosts_has_each_hosts_series_and_where(app: FastAPI, data: Data) -> None:
    key = data.store.get_trial(data.live).key
    where = {
        "node2": {"hostname": "node2", "gpus": [{"index": 0, "uuid": "GPU-2", "name": "x"}]},
        "node0": {"hostname": "node0", "slurm": {"job_id": "42", "node_id": "0"}},
    }
    for host, value in (("node2", 2.0), ("node0", 0.5)):
        for device in ("1", "0"):
            data.store.write(
                Batch(
                    key,
                    host=host,
                    where=where[host],
                    samples=(("gpu.util", device, None, data.now - 1, value + int(device)),),
                )
            )
    t = ok(app, f"/api/trials/{data.live}", schema.TrialDetailOut)
    # the fixture's series of this trial (made without a host) are of its own host, ""
    assert (t["host"], t["hosts"]) == ("", ["", "node0", "node2"])
    assert t["where"] == {"": {}, **where}
    metrics = ok(app, f"/api/trials/{data.live}/metrics", list[schema.TrialMetricOut])
    (util,) = [m for m in metrics if m["metric"] == "gpu.util"]
    order = [(h, d) for h in ("node0", "node2") for d in ("0", "1")]
    assert util["devices"] == ["0", "1"]
    assert [(x["host"], x["device"]) for x in util["series"]] == order
    body = ok(app, f"/api/trials/{data.live}/series", schema.WindowOut, metric="gpu.util")
    assert [(x["host"], x["device"]) for x in body["series"]] == order
    last = {(x["host"], x["device"]): x["mean"][-1] for x in body["series"]}
    assert (last[("node0", "1")], last[("node2", "0")]) == (1.5, 2.0)


# ---------------------------------------------------------------------------- series windows
def test_whole_trial_window_is_buckets_matching_raw_data(app: FastAPI, data: Data) -> None:
    points = 300
    body = ok(
        app, f"/api/trials/{data.done}/series", schema.WindowOut, metric="gpu.mem", points=points
    )
    assert (body["metric"], body["points"]) == ("gpu.mem", points)
    assert (body["start"], body["end"]) == (T0, T0 + N - 1)  # the series' extent
    assert [s["device"] for s in body["series"]] == ["0", "1"]
    assert body["series"][1]["note"] == "device memory: per-process unavailable"
    for s in body["series"]:
        assert s["mode"] == "buckets"
        assert len(s["t"]) <= points
        t, v = data.store.read_samples(data.series[("gpu.mem", s["device"])])
        expected = _expected_buckets(t, v, body["start"], body["end"], points)
        assert s["n"] == [e[0] for e in expected]
        assert s["min"] == [e[1] for e in expected]
        assert s["max"] == [e[2] for e in expected]
        assert s["mean"] == pytest.approx([e[3] for e in expected], rel=1e-9)
        assert s["t"] == pytest.approx([e[4] for e in expected], abs=1e-6)
        assert sum(s["n"]) == N
    dev0 = body["series"][0]
    assert max(dev0["max"]) == float(np.float32(SPIKE))
    assert max(dev0["mean"]) < SPIKE / 2  # the spike is one sample of its bucket


def test_spike_survives_any_zoom(app: FastAPI, data: Data) -> None:
    spike_t = T0 + SPIKE_AT
    for start, end, points in (
        (T0, T0 + N, 7),
        (spike_t - 3000, spike_t + 17, 100),
        (T0 - 5000, T0 + 5 * N, 1000),
    ):
        body = ok(
            app,
            f"/api/trials/{data.done}/series",
            metric="gpu.mem",
            start=start,
            end=end,
            points=points,
        )
        dev0 = body["series"][0]
        assert dev0["mode"] == "buckets" and len(dev0["t"]) <= points
        assert max(dev0["max"]) == float(np.float32(SPIKE))


def test_few_samples_come_back_raw(app: FastAPI, data: Data) -> None:
    body = ok(
        app,
        f"/api/trials/{data.done}/series",
        schema.WindowOut,
        metric="cpu.util",
        start=T0 + 100,
        end=T0 + 160,
    )
    (s,) = body["series"]
    assert s["device"] is None and s["mode"] == "raw"
    assert s["min"] is None and s["max"] is None and s["n"] is None
    t, v = data.store.read_samples(data.series[("cpu.util", None)], T0 + 100, T0 + 160)
    assert s["t"] == t.tolist() and s["mean"] == v.tolist() and len(s["t"]) == 61

    live = ok(app, f"/api/trials/{data.live}/series", metric="gpu.mem")
    (s,) = live["series"]
    assert s["mode"] == "raw" and len(s["t"]) == 100 and s["mean"][-1] == 5 * GIB + 99 * 2**20


def test_known_metric_without_series_is_empty_and_window_defaults(app: FastAPI, data: Data) -> None:
    body = ok(app, f"/api/trials/{data.lost}/series", metric="gpu.power")
    assert body["series"] == [] and body["end"] > body["start"]
    # only a start past the data: valid and empty
    after = ok(app, f"/api/trials/{data.done}/series", metric="gpu.util", start=T0 + 2 * N)
    assert after["end"] > after["start"] and all(s["t"] == [] for s in after["series"])


@pytest.mark.parametrize(
    "params",
    [
        {"metric": "gpu.mem", "points": 0},
        {"metric": "gpu.mem", "points": 10_001},
        {"metric": "gpu.mem", "start": T0 + 10, "end": T0 + 10},
        {"metric": "gpu.mem", "start": T0 + 10, "end": T0},
        {"metric": "gpu.mem", "start": "yesterday"},
        {"metric": "gpu.mem", "start": "nan"},
        {"metric": "gpu.mem", "end": "inf"},
        {},
    ],
)
def test_bad_series_parameters_are_422(app: FastAPI, data: Data, params: dict[str, Any]) -> None:
    r = call(app, f"/api/trials/{data.done}/series", **params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid"


def test_a_damaged_chunk_flags_its_series_and_every_route_still_answers(
    app: FastAPI, data: Data, sqlite_url: str
) -> None:
    exact = ok(app, f"/api/trials/{data.done}/series", schema.WindowOut, metric="gpu.mem")
    assert [s["corrupt_chunks"] for s in exact["series"]] == [0, 0]
    sid = data.series[("gpu.mem", "0")]
    lo, hi = damage_chunk(sqlite_url, sid, SPIKE_AT // CHUNK_SAMPLES)
    assert lo <= T0 + SPIKE_AT <= hi
    url = f"/api/trials/{data.done}/series"
    body = ok(app, url, schema.WindowOut, metric="gpu.mem", points=N)
    dev0, dev1 = body["series"]
    assert (dev1["corrupt_chunks"], dev1["mode"], len(dev1["t"])) == (0, "raw", N)
    # every sample asked for: the damaged chunk is one bucket of its stored summary
    assert (dev0["corrupt_chunks"], dev0["mode"], sum(dev0["n"])) == (1, "buckets", N)
    assert [n for n in dev0["n"] if n > 1] == [CHUNK_SAMPLES]
    assert max(dev0["max"]) == float(np.float32(SPIKE))
    # a window cut through it has the samples after it only
    edge = ok(app, url, schema.WindowOut, metric="gpu.mem", start=lo + 10, end=hi + 20)
    assert edge["series"][0]["corrupt_chunks"] == 1
    assert edge["series"][0]["t"] == [hi + k for k in range(1, 21)]
    assert edge["series"][1]["corrupt_chunks"] == 0
    assert len(edge["series"][1]["t"]) == CHUNK_SAMPLES - 10 + 20  # lo + 10 to hi + 20, 1 Hz
    runs = ok(app, "/api/runs", list[schema.RunOut])
    assert runs[0]["peak_gpu_mem"] == float(np.float32(SPIKE))  # from the chunk's summary
    for route, model in [
        ("/api/runs/search", schema.RunDetailOut),
        ("/api/runs/search/findings", schema.RunFindingsOut),
        (f"/api/trials/{data.done}/findings", list[schema.FindingOut]),
        (f"/api/trials/{data.done}/metrics", list[schema.TrialMetricOut]),
        (f"/api/trials/{data.done}/events", schema.EventsOut),
        (f"/api/trials/{data.done}/scalars", schema.ScalarsOut),
    ]:
        ok(app, route, model)
    other = ok(app, url, schema.WindowOut, metric="gpu.util", points=N)
    assert [s["corrupt_chunks"] for s in other["series"]] == [0, 0]


def test_unknown_metric_or_trial_is_404(app: FastAPI, data: Data) -> None:
    r = call(app, f"/api/trials/{data.done}/series", metric="gpu.flux")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert "gpu.flux" in r.json()["error"]["message"]
    assert call(app, "/api/trials/9999/series", metric="gpu.mem").status_code == 404


def test_live_samples_appear_in_the_next_request(app: FastAPI, data: Data, sqlite_url: str) -> None:
    first = ok(app, f"/api/trials/{data.live}/series", metric="gpu.mem")
    last_t = first["series"][0]["t"][-1]
    writer = open_store(sqlite_url)  # the sampler: another connection to the same file
    try:
        sid = writer.series(data.live, "gpu.mem", "0").id
        writer.append_samples([(sid, last_t + i, 9 * GIB) for i in range(1, 4)])
        writer.add_events([Event(data.live, "optimizer_step", last_t + 2, step=1)])
        tail = ok(
            app,
            f"/api/trials/{data.live}/series",
            metric="gpu.mem",
            start=last_t - 10,
            end=last_t + 10,
        )
        assert tail["series"][0]["t"][-3:] == [last_t + 1, last_t + 2, last_t + 3]
        assert tail["series"][0]["mean"][-1] == 9 * GIB
        again = ok(app, f"/api/trials/{data.live}/series", metric="gpu.mem")
        assert again["end"] == last_t + 3 and len(again["series"][0]["t"]) == 103
        ev = ok(app, f"/api/trials/{data.live}/events", start=last_t, end=last_t + 5)
        assert [e["step"] for e in ev["events"]] == [1]
    finally:
        writer.close()


def test_concurrent_requests_share_one_store(app: FastAPI, data: Data) -> None:
    async def many() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            reqs = [
                c.get(f"/api/trials/{data.done}/series", params={"metric": m, "points": 200})
                for m in ("gpu.mem", "gpu.util", "cpu.util", "cpu.mem") * 4
            ]
            reqs += [c.get("/api/runs") for _ in range(4)]
            return await asyncio.gather(*reqs)

    responses = run_async(many())
    assert all(r.status_code == 200 for r in responses)
    first = {r.json()["metric"]: r.json() for r in responses[:4]}
    for r in responses[4:16]:
        assert r.json() == first[r.json()["metric"]]


# ---------------------------------------------------------------------------- events etc.
def test_dense_events_are_binned_over_the_limit(app: FastAPI, data: Data) -> None:
    body = ok(app, f"/api/trials/{data.done}/events", schema.EventsOut)
    assert (body["start"], body["end"]) == (T0, T0 + N)
    steps = int(N / STEP_EVERY)
    assert body["total"] == steps + 4 + 4 + 1 and body["total"] > 2000
    assert body["events"] is None and body["bins"]
    per_kind: dict[str, int] = {}
    for b in body["bins"]:
        assert body["start"] <= b["t0"] < b["t1"] <= body["end"] + 1e-6
        per_kind[b["kind"]] = per_kind.get(b["kind"], 0) + b["count"]
    assert per_kind["optimizer_step"] == steps  # instants count once, none dropped
    assert per_kind["evaluation"] > 4  # intervals count in every bin they overlap
    assert len({(b["t0"], b["t1"]) for b in body["bins"]}) <= 2000


def test_events_listed_under_the_limit_with_intervals(app: FastAPI, data: Data) -> None:
    body = ok(app, f"/api/trials/{data.done}/events", schema.EventsOut, limit=10_000)
    assert body["bins"] is None and len(body["events"]) == body["total"]
    evals = ok(
        app,
        f"/api/trials/{data.done}/events",
        kinds="evaluation",
        start=T0 + EVAL_EVERY + 30,
        end=T0 + EVAL_EVERY + 40,
    )
    # the evaluation began before the window but overlaps it
    assert evals["events"] == [
        {
            "kind": "evaluation",
            "name": "eval",
            "step": 500,
            "t": T0 + EVAL_EVERY,
            "duration": EVAL_LEN,
            "value": 1.0,
            "data": None,
        }
    ]
    two = ok(app, f"/api/trials/{data.done}/events", kinds="evaluation, checkpoint")
    assert {e["kind"] for e in two["events"]} == {"evaluation", "checkpoint"}
    assert two["total"] == 8


@pytest.mark.parametrize(
    "params",
    [
        {"kinds": "optimizer_step,bogus"},
        {"limit": 0},
        {"limit": 10_001},
        {"start": T0 + 5, "end": T0 + 1},
        {"end": "later"},
    ],
)
def test_bad_event_parameters_are_422(app: FastAPI, data: Data, params: dict[str, Any]) -> None:
    r = call(app, f"/api/trials/{data.done}/events", **params)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid"


def test_scalars_by_name(app: FastAPI, data: Data) -> None:
    body = ok(app, f"/api/trials/{data.done}/scalars", schema.ScalarsOut)
    assert body["names"] == ["eval_loss", "loss"] and len(body["scalars"]) == 104
    ev = ok(app, f"/api/trials/{data.done}/scalars", schema.ScalarsOut, name="eval_loss")
    assert ev["names"] == ["eval_loss", "loss"]
    assert [s["step"] for s in ev["scalars"]] == [500, 1000, 1500, 2000]
    assert ev["scalars"][0] == {
        "name": "eval_loss",
        "step": 500,
        "t": T0 + EVAL_EVERY + EVAL_LEN,
        "value": 1.0,
    }
    none = ok(app, f"/api/trials/{data.live}/scalars")
    assert none == {"names": [], "scalars": [], "next": None}


def test_scalars_thinned_for_a_chart(app: FastAPI, data: Data) -> None:
    whole = ok(app, f"/api/trials/{data.done}/scalars", schema.ScalarsOut)["scalars"]
    body = ok(app, f"/api/trials/{data.done}/scalars", schema.ScalarsOut, points=10)
    assert body["names"] == ["eval_loss", "loss"] and body["next"] is None
    # eval_loss has 4 (<= 10): all of them; loss has 100, falling: its first and last, and
    # the first (highest) and last (lowest) of each of 4 runs of the 98 between them
    assert body["scalars"][:4] == whole[:4]
    loss = [s["step"] for s in body["scalars"][4:]]
    assert loss == [0, 1, 24, 25, 49, 50, 73, 74, 98, 99]
    assert all(s in whole for s in body["scalars"])
    # a spike (and a dip) in a long curve survives thinning, in order
    rows = [Scalar(1, "loss", k, T0 + k, 1.0) for k in range(1000)]
    rows[617] = Scalar(1, "loss", 617, T0 + 617, 50.0)
    rows[618] = Scalar(1, "loss", 618, T0 + 618, -3.0)
    thin = thin_scalars(rows, 20)
    assert len(thin) <= 20 and thin[0] is rows[0] and thin[-1] is rows[-1]
    assert rows[617] in thin and rows[618] in thin
    assert [s.step for s in thin] == sorted(s.step for s in thin)
    for params in ({"points": 10, "limit": 5}, {"points": 3}, {"points": 10_001}):
        r = call(app, f"/api/trials/{data.done}/scalars", **params)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid"


def test_thinned_curves_are_read_once_until_the_trial_is_written_again(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        run = store.ensure_run("r", T0)
        trial = store.create_trial(run.id, "t", start=T0)
        store.add_scalars(Scalar(trial.id, "loss", k, T0 + k, 1.0 / (k + 1)) for k in range(50))
        store.update_trial(trial.id, state="completed", end=T0 + 50, heartbeat=T0 + 50)
        reads: list[int] = []
        real = store.scalars

        def counted(trial_id: int, name: str | None = None) -> list[Scalar]:
            reads.append(trial_id)
            return real(trial_id, name)

        store.scalars = counted  # type: ignore[method-assign]
        curves = ScalarCurves(store)

        def steps() -> list[int]:
            body = json.loads(curves.answer(store.get_trial(trial.id), None, 10))
            assert body["names"] == ["loss"] and body["next"] is None
            return [s["step"] for s in body["scalars"]]

        first = steps()
        assert steps() == first and reads == [trial.id]
        assert len(first) == 10 and first[-1] == 49
        # a late batch: its writer refreshes the heartbeat, and the curve has the new scalar
        store.add_scalars([Scalar(trial.id, "loss", 50, T0 + 50, 0.01)])
        store.update_trial(trial.id, heartbeat=T0 + 51)
        again = steps()
        assert again[-1] == 50 and reads == [trial.id, trial.id]


def test_checkpoints(app: FastAPI, data: Data) -> None:
    body = ok(app, f"/api/trials/{data.done}/checkpoints", list[schema.CheckpointOut])
    assert [c["name"] for c in body] == [f"checkpoint-{k}" for k in range(1, 5)]
    assert body[1] == {
        "t": T0 + 2 * EVAL_EVERY + EVAL_LEN + 1,
        "name": "checkpoint-2",
        "step": 1000,
        "path": "/ckpt/step-1000",
        "bytes": 2_000_000,
    }
    assert ok(app, f"/api/trials/{data.live}/checkpoints") == []
    assert call(app, "/api/trials/9999/checkpoints").status_code == 404
