"""A load run made per SERVING_CONTRACT, for the serving analysis, report and page tests.

SYNTHETIC: the requests and engine series come from a small simulation, not from an engine: a
server with ``slots`` parallel slots serves requests first come first served, each taking
``prefill_s`` to its first token and ``token_s`` per further token; ``concurrency`` clients
each send their next request when the previous one ends (a closed loop, as
``tunescope load --concurrency`` does). Every figure the tests check follows from that model,
so queueing (and TTFT) grows with the concurrency beyond the slots, as on a real engine. The
series are written with the note ``synthetic`` through the store's Batch API, the way
``tunescope load`` and ``tunescope run`` write theirs.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from tunescope.store import Batch, Store, TrialEnd, TrialSpec, new_key

NOTE = "synthetic"
T0 = 1_700_000_000.0
GIB = 1024.0**3


@dataclass(frozen=True)
class Engine:
    """The simulated engine (see the module doc) and what its trial's hardware shows."""

    slots: int = 2
    prefill_s: float = 0.05
    token_s: float = 0.02
    output_tokens: int = 32
    prompt_tokens: int = 96
    kv_pct_per_request: float = 20.0
    cpu_util_pct: float = 40.0
    gpu: dict[str, float] | None = None
    """GPU series of the engine trial (device 0), e.g. {"gpu.sm_active": 20}; None: no GPU."""
    model: dict[str, Any] = field(
        default_factory=lambda: {
            "model.weights_bytes": 2 * GIB,
            "model.kv_bytes_per_token": 131072,
        }
    )


@dataclass(frozen=True)
class Req:
    sent: float
    start: float
    first: float
    end: float


def simulate(e: Engine, concurrency: int, requests: int, t0: float) -> list[Req]:
    """The requests of one closed-loop level, in the order they were sent."""
    free = [t0] * e.slots  # when each slot is next free
    heapq.heapify(free)
    sends = [(t0, c) for c in range(concurrency)]
    heapq.heapify(sends)
    out = []
    service = e.prefill_s + (e.output_tokens - 1) * e.token_s
    while len(out) < requests:
        sent, client = heapq.heappop(sends)
        start = max(sent, heapq.heappop(free))
        end = start + service
        heapq.heappush(free, end)
        out.append(Req(sent, start, start + e.prefill_s, end))
        heapq.heappush(sends, (end, client))
    return out


def _request_event(i: int, r: Req, e: Engine) -> tuple[Any, ...]:
    ttft = r.first - r.sent
    e2el = r.end - r.sent
    data = {
        "ttft": ttft,
        "tpot": (e2el - ttft) / (e.output_tokens - 1),
        "itl": [round(e.token_s, 4)] * (e.output_tokens - 1),
        "prompt_tokens": e.prompt_tokens,
        "completion_tokens": e.output_tokens,
        "t_first": r.first,
        "error": None,
        "status": 200,
    }
    return ("request", r.sent, "ok", i, e2el, ttft, data)


def _engine_samples(reqs: list[Req], e: Engine, a: float, b: float) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    t = a + 1.0
    while t <= b + 1.0:
        running = sum(1 for r in reqs if r.start <= t < r.end)
        waiting = sum(1 for r in reqs if r.sent <= t < r.start)
        deferred = sum(1 for r in reqs if r.sent <= t and r.start > r.sent)
        done = sum(e.output_tokens for r in reqs if r.end <= t)
        for metric, v in (
            ("serve.running", running),
            ("serve.waiting", waiting),
            ("serve.kv_use", min(100.0, running * e.kv_pct_per_request)),
            ("serve.requests_deferred", deferred),
            ("serve.gen_tokens", done),
            ("serve.preemptions", 0),
        ):
            rows.append((metric, None, NOTE, t, float(v)))
        t += 1.0
    return rows


def write_load_run(
    store: Store,
    run: str = "serve",
    levels: tuple[int, ...] = (1, 2, 6),
    *,
    engine: Engine | None = None,
    slo: dict[str, float | None] | None = None,
    requests: int = 24,
    t0: float = T0,
) -> dict[int, int]:
    """Write an engine trial and one load trial per concurrency level (``c1``…) of run
    ``run``; returns {level: trial id}. ``slo``: the params' slo.ttft_s / slo.tpot_s /
    slo.e2el_s (default TTFT 0.5 s, TPOT 50 ms)."""
    e = engine or Engine()
    targets = slo if slo is not None else {"ttft_s": 0.5, "tpot_s": 0.05}
    host = "engine.local"
    start = t0
    out: dict[int, int] = {}
    spans = []
    for c in levels:
        reqs = simulate(e, c, requests, start + 0.5)
        end = max(r.end for r in reqs) + 0.5
        key = new_key()
        params: dict[str, Any] = {
            "load.mode": "concurrency",
            "load.level": c,
            "load.prompt_tokens": e.prompt_tokens,
            "load.output_tokens": e.output_tokens,
            "load.stream": True,
            "load.api": "completions",
            "model": "synthetic-model",
            "engine": "llamacpp",
            "engine.version": None,
            "load.url": f"http://{host}:8080",
            "slo.ttft_s": targets.get("ttft_s"),
            "slo.tpot_s": targets.get("tpot_s"),
            "slo.e2el_s": targets.get("e2el_s"),
            "load.burstiness": None,
            "load.requests": requests,
            "load.seconds": None,
            "engine.slots": e.slots,
            "engine.trial_key": None,
            **e.model,
        }
        spec = TrialSpec(key, run, name=f"c{c}", params=params, host=host, start=start)
        events = tuple(_request_event(i, r, e) for i, r in enumerate(reqs))
        samples = tuple(_engine_samples(reqs, e, start, end))
        out[c] = store.write(
            Batch(
                key,
                spec=spec,
                events=events,
                samples=samples,
                host=host,
                end=TrialEnd("completed", end),
            )
        )
        spans.append((start, end))
        start = end + 1.0
    _write_engine(store, run, e, t0 - 2.0, start + 1.0, host)
    return out


def _write_engine(store: Store, run: str, e: Engine, a: float, b: float, host: str) -> int:
    key = new_key()
    spec = TrialSpec(key, run, name="engine", params={"command": "synthetic"}, host=host, start=a)
    rows: list[tuple[Any, ...]] = []
    t = a + 1.0
    while t <= b:
        rows.append(("cpu.util", None, NOTE, t, e.cpu_util_pct))
        for metric, v in (e.gpu or {}).items():
            rows.append((metric, "0", NOTE, t, v))
        t += 1.0
    return store.write(
        Batch(key, spec=spec, samples=tuple(rows), host=host, end=TrialEnd("completed", b))
    )
