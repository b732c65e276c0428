"""Importers: other load testers' result files as load levels (trials) of a run.

``tunescope import vllm-bench|guidellm|aiperf FILE...``: each benchmark in a file becomes one
trial, with the params a ``tunescope load`` level has (``load.mode``, ``load.level``, model,
SLOs where the file says them, ``load.source`` = the tool) and its summary as scalars (one
each, step None, at the level's end):

* ``load.requests_ok``, ``load.requests_error``, ``load.duration_s``;
* ``load.request_throughput`` (req/s), ``load.output_throughput`` and
  ``load.total_token_throughput`` (tok/s), ``load.goodput`` (req/s) where the tool gives it;
* ``load.{ttft,tpot,itl,e2el}_{mean,p50,p90,p99}_s`` (seconds).

Per-request ``request`` events are written where the file holds each request's send time
(guidellm's per-request stats); vLLM's and AIPerf's summary files do not, so their levels
carry the scalars only. A file that cannot be read as the tool's is refused whole (one line,
nothing written).
"""

from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tunescope.errors import ConfigError
from tunescope.serving._load import trial_name
from tunescope.store import Batch, EventRow, ScalarRow, TrialEnd, TrialSpec, new_key, open_store

__all__ = ["TOOLS", "ImportedLevel", "import_levels", "read_levels"]

TOOLS = ("vllm-bench", "guidellm", "aiperf")
STATS = ("mean", "p50", "p90", "p99")
LATENCIES = ("ttft", "tpot", "itl", "e2el")


@dataclass
class ImportedLevel:
    """One benchmark of a file, ready to write as a trial."""

    mode: str
    level: float
    start: float
    end: float
    params: dict[str, Any]
    scalars: dict[str, float] = field(default_factory=dict)
    events: list[EventRow] = field(default_factory=list)

    @property
    def name(self) -> str:
        return trial_name(self.mode, self.level)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _params(source: str, mode: str, level: float, model: Any, path: Path) -> dict[str, Any]:
    return {
        "load.mode": mode,
        "load.level": int(level) if mode == "concurrency" else level,
        "load.stream": True,
        "model": model if isinstance(model, str) else None,
        "engine": None,
        "engine.version": None,
        "load.url": None,
        "slo.ttft_s": None,
        "slo.tpot_s": None,
        "slo.e2el_s": None,
        "load.source": source,
        "load.file": path.name,
    }


# ---------------------------------------------------------------------------- vllm bench serve
def _vllm(doc: Any, path: Path) -> list[ImportedLevel]:
    if not isinstance(doc, dict) or "completed" not in doc or "duration" not in doc:
        raise ValueError("no 'completed' and 'duration': not a vllm bench serve result")
    duration = _num(doc["duration"])
    if duration is None or duration <= 0:
        raise ValueError("'duration' is not a positive number")
    conc = _num(doc.get("max_concurrency"))
    rate = _num(doc.get("request_rate"))
    if conc is not None:
        mode, level = "concurrency", conc
    elif rate is not None:
        mode, level = "rate", rate
    else:  # request_rate "inf" and no max concurrency: every request at once
        mode, level = "concurrency", float(_num(doc.get("completed")) or 1)
    end = _vllm_date(doc.get("date"), path)
    params = _params("vllm-bench", mode, level, doc.get("model_id"), path)
    lv = ImportedLevel(mode, level, end - duration, end, params)
    lv.params["load.burstiness"] = _num(doc.get("burstiness"))
    lv.params["load.requests"] = doc.get("num_prompts")
    s = lv.scalars
    completed = _num(doc.get("completed")) or 0.0
    s["load.requests_ok"] = completed
    failed = _num(doc.get("failed"))
    if failed is None and isinstance(doc.get("num_prompts"), int):
        failed = max(0.0, doc["num_prompts"] - completed)
    if failed is not None:
        s["load.requests_error"] = failed
    s["load.duration_s"] = duration
    for key, name in (
        ("request_throughput", "load.request_throughput"),
        ("output_throughput", "load.output_throughput"),
        ("total_token_throughput", "load.total_token_throughput"),
        ("request_goodput", "load.goodput"),
    ):
        v = _num(doc.get(key))
        if v is not None:
            s[name] = v
    for m in LATENCIES:
        for stat, key in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99")):
            v = _num(doc.get(f"{key}_{m}_ms"))
            if v is not None:
                s[f"load.{m}_{stat}_s"] = v / 1000.0
    return [lv]


def _vllm_date(v: Any, path: Path) -> float:
    """vllm's ``date`` (``%Y%m%d-%H%M%S``, local time, when the result was saved), else the
    file's modification time."""
    if isinstance(v, str):
        try:
            return datetime.strptime(v, "%Y%m%d-%H%M%S").timestamp()
        except ValueError:
            pass
    return path.stat().st_mtime


# ---------------------------------------------------------------------------- guidellm
def _dist(d: Any, stat: str) -> float | None:
    """A guidellm distribution summary's statistic, successful requests only."""
    if not isinstance(d, dict):
        return None
    d = d.get("successful", d)
    if not isinstance(d, dict):
        return None
    if stat == "mean":
        return _num(d.get("mean"))
    pct = d.get("percentiles")
    return _num(pct.get(stat)) if isinstance(pct, dict) else None


def _guidellm(doc: Any, path: Path) -> list[ImportedLevel]:
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ValueError("no 'benchmarks' list: not a guidellm report")
    out = []
    for i, b in enumerate(doc["benchmarks"]):
        if not isinstance(b, dict) or not isinstance(b.get("metrics"), dict):
            raise ValueError(f"benchmark {i} has no metrics")
        strat = _obj(_obj(b.get("config")).get("strategy"))
        kind = strat.get("type_")
        if kind == "synchronous":
            mode, level = "concurrency", 1.0
        elif kind == "concurrent" and _num(strat.get("streams")):
            mode, level = "concurrency", float(strat["streams"])
        elif kind in ("constant", "poisson") and _num(strat.get("rate")):
            mode, level = "rate", float(strat["rate"])
        else:
            raise ValueError(f"benchmark {i}: strategy {kind!r} is not a load level")
        st = _obj(b.get("scheduler_state"))
        start, end = _num(st.get("start_time")), _num(st.get("end_time"))
        if start is None or end is None or end < start:
            raise ValueError(f"benchmark {i}: no scheduler_state start_time and end_time")
        model = None
        lv = ImportedLevel(mode, level, start, end, _params("guidellm", mode, level, model, path))
        if kind == "poisson":
            lv.params["load.burstiness"] = 1.0
        m = b["metrics"]
        s = lv.scalars
        totals = _obj(m.get("request_totals"))
        ok, err = _num(totals.get("successful")), _num(totals.get("errored"))
        if ok is not None:
            s["load.requests_ok"] = ok
        if err is not None:
            s["load.requests_error"] = err + (_num(totals.get("incomplete")) or 0.0)
        s["load.duration_s"] = end - start
        for key, name in (
            ("requests_per_second", "load.request_throughput"),
            ("output_tokens_per_second", "load.output_throughput"),
            ("tokens_per_second", "load.total_token_throughput"),
        ):
            v = _dist(m.get(key), "mean")
            if v is not None:
                s[name] = v
        for lat, key, scale in (
            ("ttft", "time_to_first_token_ms", 1e-3),
            ("tpot", "time_per_output_token_ms", 1e-3),
            ("itl", "inter_token_latency_ms", 1e-3),
            ("e2el", "request_latency", 1.0),
        ):
            for stat in STATS:
                v = _dist(m.get(key), stat)
                if v is not None:
                    s[f"load.{lat}_{stat}_s"] = v * scale
        lv.events = _guidellm_requests(b.get("requests"))
        out.append(lv)
    if not out:
        raise ValueError("the report holds no benchmark")
    return out


def _guidellm_requests(reqs: Any) -> list[EventRow]:
    if not isinstance(reqs, dict):
        return []
    rows: list[tuple[float, str, dict[str, Any]]] = []
    for status in ("successful", "errored", "incomplete"):
        for r in reqs.get(status) or []:
            if not isinstance(r, dict) or _num(r.get("request_start_time")) is None:
                continue
            rows.append((float(r["request_start_time"]), status, r))
    rows.sort(key=lambda x: x[0])
    events: list[EventRow] = []
    for k, (t, status, r) in enumerate(rows):
        ttft_ms = _num(r.get("time_to_first_token_ms"))
        tpot_ms = _num(r.get("time_per_output_token_ms"))
        e2el = _num(r.get("request_latency"))
        info = _obj(r.get("info"))
        error = info.get("error") if status != "successful" else None
        ttft = None if ttft_ms is None else ttft_ms / 1000.0
        data: dict[str, Any] = {
            "ttft": None if ttft_ms is None else ttft_ms / 1000.0,
            "tpot": None if tpot_ms is None else tpot_ms / 1000.0,
            "itl": [],
            "prompt_tokens": _int(r.get("prompt_tokens")),
            "completion_tokens": _int(r.get("output_tokens")),
            "t_first": None if ttft_ms is None else t + ttft_ms / 1000.0,
            "error": None if status == "successful" else str(error or status)[:300],
            "status": None,
        }
        name = "ok" if status == "successful" else "error"
        events.append(("request", t, name, k, e2el, ttft, data))
    return events


# ---------------------------------------------------------------------------- aiperf
_AIPERF_UNITS = {"ms": 1e-3, "ns": 1e-9, "us": 1e-6, "s": 1.0, "sec": 1.0}


def _find(doc: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in ``doc`` (depth first)."""
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        for v in doc.values():
            found = _find(v, key)
            if found is not None:
                return found
    elif isinstance(doc, list):
        for v in doc:
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _aiperf(doc: Any, path: Path) -> list[ImportedLevel]:
    if not isinstance(doc, dict) or not isinstance(doc.get("request_throughput"), dict):
        raise ValueError("no 'request_throughput' metric: not an AIPerf profile export")
    cfg = doc.get("input_config")
    conc, rate = _num(_find(cfg, "concurrency")), _num(_find(cfg, "request_rate"))
    if rate is not None:
        mode, level = "rate", rate
    elif conc is not None:
        mode, level = "concurrency", conc
    else:
        raise ValueError("input_config gives neither concurrency nor request_rate")
    start, end = _iso(doc.get("start_time")), _iso(doc.get("end_time"))
    dur = doc.get("benchmark_duration")
    duration = _num(dur.get("avg")) if isinstance(dur, dict) else None
    if end is None:
        end = path.stat().st_mtime
    if start is None:
        start = end - (duration or 0.0)
    model = _find(cfg, "model_names")
    model = model[0] if isinstance(model, list) and model else model
    lv = ImportedLevel(mode, level, start, end, _params("aiperf", mode, level, model, path))
    s = lv.scalars

    def avg(key: str) -> float | None:
        d = doc.get(key)
        return _num(d.get("avg")) if isinstance(d, dict) else None

    for key, name in (
        ("request_count", "load.requests_ok"),
        ("error_request_count", "load.requests_error"),
        ("request_throughput", "load.request_throughput"),
        ("output_token_throughput", "load.output_throughput"),
        ("total_token_throughput", "load.total_token_throughput"),
        ("goodput", "load.goodput"),
    ):
        v = avg(key)
        if v is not None:
            s[name] = v
    s["load.duration_s"] = duration if duration is not None else end - start
    for lat, key in (
        ("ttft", "time_to_first_token"),
        ("itl", "inter_token_latency"),
        ("e2el", "request_latency"),
    ):
        d = doc.get(key)
        if not isinstance(d, dict):
            continue
        scale = _AIPERF_UNITS.get(str(d.get("unit", "ms")))
        if scale is None:
            raise ValueError(f"{key}: unknown unit {d.get('unit')!r}")
        for stat, field_ in (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99")):
            v = _num(d.get(field_))
            if v is not None:
                s[f"load.{lat}_{stat}_s"] = v * scale
    return [lv]


def _iso(v: Any) -> float | None:
    if not isinstance(v, str):
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_READERS = {"vllm-bench": _vllm, "guidellm": _guidellm, "aiperf": _aiperf}


def read_levels(tool: str, path: str) -> list[ImportedLevel]:
    """The load levels of one result file; ConfigError names what is wrong."""
    if tool not in _READERS:
        raise ConfigError(f"unknown tool {tool!r}: use {', '.join(TOOLS)}")
    p = Path(path).expanduser()
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except ValueError:
        raise ConfigError(f"{path}: not JSON") from None
    try:
        return _READERS[tool](doc, p)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def import_levels(
    levels: list[ImportedLevel], run: str, store_url: str, project: str, os_user: str
) -> list[str]:
    """Write each level as a trial of ``run`` (one batch each); the trials' names."""
    names = []
    with open_store(store_url) as st:
        for lv in levels:
            key = new_key()
            spec = TrialSpec(
                key=key,
                run=run,
                name=lv.name,
                params=lv.params,
                host=socket.gethostname(),
                start=lv.start,
                interval=1.0,
                project=project,
                os_user=os_user,
            )
            scalars: tuple[ScalarRow, ...] = tuple(
                (name, None, lv.end, v) for name, v in sorted(lv.scalars.items())
            )
            tid = st.write(
                Batch(
                    key,
                    spec=spec,
                    events=tuple(lv.events),
                    scalars=scalars,
                    end=TrialEnd("completed", lv.end),
                )
            )
            names.append(st.get_trial(tid).name)
    return names
