"""Serving: what a load run measured, level by level (docs/serving_analysis.md).

A load run (``tunescope load``, SERVING_CONTRACT) has one trial per load level, its params
holding ``load.mode`` (``concurrency`` or ``rate``) and ``load.level``, and one ``request``
event per request (t: sent, duration: end-to-end latency, value: TTFT, name ``ok`` or
``error``, data: ``ttft``, ``tpot``, ``itl``, ``prompt_tokens``, ``completion_tokens``…).

:func:`level_stats` turns one level's requests into the figures ``vllm bench serve`` prints,
with its definitions: TTFT, TPOT, ITL and E2EL percentiles (numpy's linear interpolation) and
means over the successful requests (TPOT over those with at least two output tokens, ITL over
every gap of every stream); request and token throughput over the level's duration (first
request sent to last request done); goodput: successful requests per second whose TTFT, TPOT
and E2EL each meet the SLO given (a request of one output token counts TPOT 0).
:func:`serving_run` reads every level of a run, sorted by level. Times are seconds.

A level imported from another load tester (``tunescope import``) without per-request events
carries the tool's summary as ``load.*`` scalars instead (docs/serving.md, "Importing"):
:func:`summary_stats` reads its figures from them, so the page, the findings and the sizing
treat it as any level (its token counts are the tool's throughputs times its duration).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.analyze._summary import trial_end
from tunescope.errors import ConfigError, NotFound
from tunescope.store import Event, RunInfo, Store, TrialInfo

__all__ = [
    "REQUEST",
    "Dist",
    "Level",
    "LevelStats",
    "ServingRun",
    "Slo",
    "engine_trial",
    "is_load_trial",
    "level_stats",
    "parse_pairs",
    "parse_seconds",
    "parse_slo",
    "serving_run",
    "summary_stats",
]

REQUEST = "request"
"""The event kind of one request of a load level."""
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Dist:
    """Mean and percentiles of one latency over a level (seconds); all None with ``n`` 0."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Iterable[float]) -> Dist:
        arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], np.float64)
        if not len(arr):
            return cls(0, None, None, None, None)
        p = np.percentile(arr, PERCENTILES)
        return cls(len(arr), float(arr.mean()), float(p[0]), float(p[1]), float(p[2]))

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class Slo:
    """A latency target: TTFT, TPOT and end-to-end latency (seconds), None where not set."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2el_s: float | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2el_s))

    @classmethod
    def of_params(cls, params: Mapping[str, Any]) -> Slo:
        """The SLO a load trial was run with (``slo.ttft_s``… params)."""

        def num(key: str) -> float | None:
            v = params.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        return cls(num("slo.ttft_s"), num("slo.tpot_s"), num("slo.e2el_s"))

    def good(self, ttft: float | None, tpot: float | None, e2el: float | None) -> bool:
        """Whether one request meets every target given (``vllm bench serve``'s goodput)."""
        for target, got in ((self.ttft_s, ttft), (self.tpot_s, tpot), (self.e2el_s, e2el)):
            if target is not None and (got is None or got > target):
                return False
        return True

    def to_dict(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2el_s": self.e2el_s}


@dataclass(frozen=True)
class LevelStats:
    """One load level's figures (see the module doc for their definitions)."""

    requests: int
    ok: int
    errors: int
    duration_s: float | None
    ttft: Dist
    tpot: Dist
    itl: Dist
    e2el: Dist
    prompt_tokens: int
    completion_tokens: int
    request_throughput: float | None
    """Successful requests per second."""
    output_throughput: float | None
    """Output tokens per second."""
    total_token_throughput: float | None
    """Prompt and output tokens per second."""
    good: int | None
    """Successful requests meeting the SLO; None without an SLO."""
    goodput: float | None
    """``good`` per second; None without an SLO."""

    def meets(self, slo: Slo) -> bool:
        """Whether the level meets ``slo`` at the 99th percentile (TTFT, TPOT, E2EL given)
        with at least one successful request."""
        if self.ok == 0:
            return False
        for target, got in (
            (slo.ttft_s, self.ttft.p99),
            (slo.tpot_s, self.tpot.p99),
            (slo.e2el_s, self.e2el.p99),
        ):
            if target is not None and got is not None and got > target:
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "duration_s": self.duration_s,
            "ttft": self.ttft.to_dict(),
            "tpot": self.tpot.to_dict(),
            "itl": self.itl.to_dict(),
            "e2el": self.e2el.to_dict(),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "good": self.good,
            "goodput": self.goodput,
        }


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def level_stats(events: Iterable[Event], slo: Slo | None = None) -> LevelStats:
    """The figures of one load level from its ``request`` events (other kinds are ignored);
    goodput under ``slo`` (None, or an SLO with no target: goodput None)."""
    reqs = [e for e in events if e.kind == REQUEST]
    ok = [e for e in reqs if e.name == "ok"]
    spans = [(e.t, e.t + (e.duration or 0.0)) for e in reqs]
    duration = max(b for _, b in spans) - min(a for a, _ in spans) if spans else None
    ttfts, tpots, itls, e2els = [], [], [], []
    good = 0
    prompt = completion = 0
    for e in ok:
        data = e.data or {}
        ttft = _num(data.get("ttft", e.value))
        tpot = _num(data.get("tpot"))
        e2el = _num(e.duration)
        ttfts.append(ttft)
        if tpot is not None:
            tpots.append(tpot)
        e2els.append(e2el)
        itls += [x for x in (_num(v) for v in data.get("itl") or ()) if x is not None]
        prompt += int(data.get("prompt_tokens") or 0)
        completion += int(data.get("completion_tokens") or 0)
        if slo is not None and slo.good(ttft, 0.0 if tpot is None else tpot, e2el):
            good += 1
    per_s = duration if duration is not None and duration > 0 else None

    def rate(n: float) -> float | None:
        return n / per_s if per_s is not None else None

    with_slo = slo is not None and slo.given()
    return LevelStats(
        requests=len(reqs),
        ok=len(ok),
        errors=len(reqs) - len(ok),
        duration_s=duration,
        ttft=Dist.of(x for x in ttfts if x is not None),
        tpot=Dist.of(tpots),
        itl=Dist.of(itls),
        e2el=Dist.of(x for x in e2els if x is not None),
        prompt_tokens=prompt,
        completion_tokens=completion,
        request_throughput=rate(len(ok)),
        output_throughput=rate(completion),
        total_token_throughput=rate(prompt + completion),
        good=good if with_slo else None,
        goodput=rate(good) if with_slo else None,
    )


LATENCIES = ("ttft", "tpot", "itl", "e2el")
SUMMARY = "load."
"""The prefix of an imported level's summary scalars."""


def summary_stats(scalars: Mapping[str, float], goodput: bool = True) -> LevelStats:
    """The figures of a level imported as its summary: ``load.requests_ok``,
    ``load.requests_error``, ``load.duration_s``, ``load.request_throughput``,
    ``load.output_throughput``, ``load.total_token_throughput``, ``load.goodput`` and
    ``load.{ttft,tpot,itl,e2el}_{mean,p50,p90,p99}_s``, each where the tool gave it. A
    distribution's ``n`` is the successful requests. ``goodput``: whether the tool's goodput
    applies (its SLO is the one asked for)."""

    def get(name: str) -> float | None:
        return _num(scalars.get(SUMMARY + name))

    ok = int(get("requests_ok") or 0)
    errors = int(get("requests_error") or 0)
    duration = get("duration_s")

    def dist(lat: str) -> Dist:
        mean, p50, p90, p99 = (get(f"{lat}_{stat}_s") for stat in ("mean", "p50", "p90", "p99"))
        given = any(v is not None for v in (mean, p50, p90, p99))
        return Dist(ok if given else 0, mean, p50, p90, p99)

    req_tp = get("request_throughput")
    if req_tp is None and duration:
        req_tp = ok / duration
    out_tp, total_tp = get("output_throughput"), get("total_token_throughput")
    per = duration or 0.0
    completion = round(out_tp * per) if out_tp is not None else 0
    prompt = round(total_tp * per) - completion if total_tp is not None else 0
    good_tp = get("goodput") if goodput else None
    return LevelStats(
        requests=ok + errors,
        ok=ok,
        errors=errors,
        duration_s=duration,
        ttft=dist("ttft"),
        tpot=dist("tpot"),
        itl=dist("itl"),
        e2el=dist("e2el"),
        prompt_tokens=max(0, prompt),
        completion_tokens=completion,
        request_throughput=req_tp,
        output_throughput=out_tp,
        total_token_throughput=total_tp,
        good=round(good_tp * per) if good_tp is not None and duration else None,
        goodput=good_tp,
    )


# ---------------------------------------------------------------------- a load run
def is_load_trial(t: TrialInfo) -> bool:
    """Whether ``t`` is a level of a load run (its params hold ``load.mode``)."""
    return t.params.get("load.mode") in ("concurrency", "rate")


@dataclass(frozen=True)
class Level:
    """One load level: its trial, mode (``concurrency`` or ``rate``), level, the SLO it was
    run with and its figures."""

    trial: TrialInfo
    mode: str
    level: float
    slo: Slo
    stats: LevelStats

    @property
    def ran(self) -> bool:
        """Whether the level ran to its end (a failed level is kept but not judged)."""
        return self.trial.state == "completed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial.id,
            "trial": self.trial.name,
            "state": self.trial.state,
            "error": self.trial.error,
            "mode": self.mode,
            "level": self.level,
            "start": self.trial.start,
            "end": trial_end(self.trial),
            "slo": self.slo.to_dict(),
            "stats": self.stats.to_dict(),
        }


def _summary_scalars(store: Store, t: TrialInfo) -> dict[str, float]:
    """An imported level's ``load.*`` summary scalars (the newest of each name)."""
    out: dict[str, float] = {}
    for sc in sorted(store.scalars(t.id), key=lambda sc: sc.t):
        if sc.name.startswith(SUMMARY):
            out[sc.name] = sc.value
    return out


def read_level(store: Store, t: TrialInfo, slo: Slo | None = None) -> Level:
    """One load trial as a :class:`Level` (goodput under ``slo``, by default its own; an
    imported level's goodput is the tool's, under its own SLO only)."""
    own = Slo.of_params(t.params)
    use = slo if slo is not None else own
    events = store.all_events(t.id, kinds=[REQUEST])
    summary = {} if events else _summary_scalars(store, t)
    if summary:  # imported as the tool's summary: no request to count
        stats = summary_stats(summary, goodput=slo is None or slo == own)
    else:
        stats = level_stats(events, use)
    level = _num(t.params.get("load.level"))
    return Level(t, str(t.params["load.mode"]), math.nan if level is None else level, own, stats)


@dataclass(frozen=True)
class ServingRun:
    """Every level of a load run, sorted by mode then level, and the SLO they were run with
    (the first level's that has one)."""

    run: RunInfo
    levels: tuple[Level, ...]
    slo: Slo

    def first_missed(self, slo: Slo | None = None, min_requests: float = 0) -> Level | None:
        """The lowest level that ran, sent at least ``min_requests`` requests and misses
        ``slo`` (default: the run's) at p99."""
        use = slo if slo is not None else self.slo
        if not use.given():
            return None
        judged = [lv for lv in self.levels if lv.ran and lv.stats.requests >= min_requests]
        return next((lv for lv in judged if not lv.stats.meets(use)), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": {"id": self.run.id, "name": self.run.name},
            "slo": self.slo.to_dict(),
            "levels": [lv.to_dict() for lv in self.levels],
        }


def serving_run(store: Store, run: int | str) -> ServingRun | None:
    """A run's load levels (None when it has none: not a load run). NotFound for an unknown
    run. Goodput of each level is under its own SLO."""
    info = store.get_run(run)
    loads = [t for t in store.list_trials(info.id) if is_load_trial(t)]
    if not loads:
        return None
    levels = sorted((read_level(store, t) for t in loads), key=lambda lv: (lv.mode, lv.level))
    slo = next((lv.slo for lv in levels if lv.slo.given()), Slo())
    return ServingRun(info, tuple(levels), slo)


def engine_trial(store: Store, load: TrialInfo) -> TrialInfo | None:
    """The trial that sampled the engine a load level ran against: the one its
    ``engine.trial_key`` names, else the run's non-load trial whose span overlaps the
    level's the most; None when there is none."""
    key = load.params.get("engine.trial_key")
    if isinstance(key, str) and key:
        try:
            return store.trial_by_key(key)
        except NotFound:
            pass
    a, b = load.start, trial_end(load) or load.start
    best, overlap = None, 0.0
    for t in store.list_trials(load.run_id):
        if is_load_trial(t):
            continue
        end = trial_end(t)
        shared = min(b, end if end is not None else math.inf) - max(a, t.start)
        if shared > overlap:
            best, overlap = t, shared
    return best


# ---------------------------------------------------------------------- parsing
_SECONDS = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6, "s": 1.0, "min": 60.0}


def parse_seconds(raw: str, what: str) -> float:
    """``500ms``, ``0.5s``, ``2min`` or a bare number of seconds; ConfigError naming
    ``what`` otherwise."""
    text = raw.strip().lower()
    for unit in sorted(_SECONDS, key=len, reverse=True):
        if text.endswith(unit):
            number, scale = text[: -len(unit)], _SECONDS[unit]
            break
    else:
        number, scale = text, 1.0
    try:
        v = float(number) * scale
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{what}: {raw!r} is not a time > 0 (e.g. 500ms, 2s)")
    return v


def parse_pairs(text: str, option: str, known: Iterable[str]) -> dict[str, str]:
    """``k=v,k=v`` into a dict of the keys in ``known``; ConfigError (one line naming
    ``option``) for an item without ``=``, an unknown key or a key given twice."""
    names = tuple(known)
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not key or not value.strip():
            raise ConfigError(f"malformed {option} item {item.strip()!r}: expected KEY=VALUE")
        if key not in names:
            raise ConfigError(f"unknown {option} key {key!r}; known: {', '.join(names)}")
        if key in out:
            raise ConfigError(f"{option} key {key!r} given twice")
        out[key] = value.strip()
    return out


def parse_slo(text: str, option: str = "--slo") -> Slo:
    """``ttft=500ms,tpot=50ms,e2el=10s`` (any of the three) as an :class:`Slo`."""
    pairs = parse_pairs(text, option, ("ttft", "tpot", "e2el"))
    got = {k: parse_seconds(v, f"{option} {k}") for k, v in pairs.items()}
    return Slo(got.get("ttft"), got.get("tpot"), got.get("e2el"))
