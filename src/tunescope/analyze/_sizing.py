"""Sizing for a workload contract: how many replicas of which GPU a traffic needs, from what a
load run measured (docs/serving_analysis.md, "Sizing").

A :class:`Workload` (``tunescope report RUN --workload "context=4096,output=256,
concurrency=64,ttft=500ms,tpot=50ms,memory=80GiB,power=700W"``) names the traffic
(``concurrency`` requests in flight, or ``rate`` requests per second), the request shape
(``context``: prompt and output tokens a request holds at its end; ``output`` tokens), the SLO
(``ttft``, ``tpot``, ``e2el``; default: the run's) and, optionally, the memory and power one GPU
offers and the model's dimensions (``weights``, ``kv_per_token``, or ``layers``, ``kv_heads``,
``head_dim``, ``kv_dtype_bytes``; default: the load trials' ``model.*`` params).

:func:`size_workload` answers, each figure marked ``measured`` (read from one level's trial),
``extrapolated`` (computed from measured figures and the workload: it assumes replicas share the
traffic evenly and scale linearly) or ``given`` (from the workload):

* the highest good load per replica: the highest level that ran whose p99 TTFT, TPOT and E2EL
  meet the SLO (converted by Little's law, in flight = rate x mean E2EL, when the run's mode is
  not the workload's);
* replicas: the workload's load over that, rounded up;
* memory per replica: weights + KV bytes per token x context x requests in flight per replica;
* GPUs per replica (with ``memory=``) and the smallest GPU of the catalog that holds a replica
  with the right-size headroom;
* power: replicas x GPUs x the engine's measured mean ``gpu.power`` at that level (or ``power=``);
* USD per million output tokens: GPUs per replica x the GPU's hourly price over the output
  tokens one replica makes in an hour at that level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from tunescope.analyze._data import TrialData
from tunescope.analyze._gpu_catalog import GPU_CATALOG, GpuType
from tunescope.analyze._serving import (
    Level,
    ServingRun,
    Slo,
    engine_trial,
    parse_pairs,
    parse_seconds,
)
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import size
from tunescope.errors import ConfigError
from tunescope.store import Store

__all__ = ["Figure", "Sizing", "Workload", "parse_workload", "size_workload"]

Basis = Literal["measured", "extrapolated", "given"]
SHAPE_TOLERANCE = 0.25
"""A level measured requests of the workload's shape when its mean output and context tokens
are each within this share of the workload's; else its latencies are for another shape and the
load figure is marked extrapolated."""
_KEYS = (
    "context",
    "output",
    "concurrency",
    "rate",
    "ttft",
    "tpot",
    "e2el",
    "memory",
    "power",
    "weights",
    "kv_per_token",
    "layers",
    "kv_heads",
    "head_dim",
    "kv_dtype_bytes",
)
_BYTES = {
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
    "tib": 1024.0**4,
}
_OPTION = "--workload"


def _number(raw: str, key: str, units: dict[str, float], example: str) -> float:
    text = raw.strip().lower()
    scale = 1.0
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            text, scale = text[: -len(unit)], units[unit]
            break
    try:
        v = float(text) * scale
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{_OPTION} {key}: {raw!r} is not a number > 0 (e.g. {example})")
    return v


def _count(raw: str, key: str) -> int:
    v = _number(raw, key, {}, "4096")
    if v != int(v):
        raise ConfigError(f"{_OPTION} {key}: {raw!r} is not a whole number")
    return int(v)


@dataclass(frozen=True)
class Workload:
    """The traffic to size for (see the module doc); None where not given."""

    context: int
    output: int
    concurrency: float | None = None
    rate: float | None = None
    slo: Slo = field(default_factory=Slo)
    memory: float | None = None
    power: float | None = None
    weights: float | None = None
    kv_per_token: float | None = None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_dtype_bytes: float = 2.0

    @property
    def mode(self) -> str:
        return "concurrency" if self.concurrency is not None else "rate"

    @property
    def load(self) -> float:
        v = self.concurrency if self.concurrency is not None else self.rate
        assert v is not None
        return v

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "output": self.output,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "slo": self.slo.to_dict(),
            "memory_bytes": self.memory,
            "power_w": self.power,
            "weights_bytes": self.weights,
            "kv_per_token_bytes": self.kv_per_token,
        }


def parse_workload(text: str) -> Workload:
    """``context=4096,output=256,concurrency=64,ttft=500ms,…`` as a :class:`Workload`;
    ConfigError in one line for anything wrong."""
    p = parse_pairs(text, _OPTION, _KEYS)
    for need in ("context", "output"):
        if need not in p:
            raise ConfigError(f"{_OPTION} needs {need}= (tokens), e.g. context=4096,output=256")
    if ("concurrency" in p) == ("rate" in p):
        raise ConfigError(f"{_OPTION} needs one of concurrency= or rate=, not both or neither")
    context, output = _count(p["context"], "context"), _count(p["output"], "output")
    if output > context:
        raise ConfigError(f"{_OPTION}: output={output} exceeds context={context}")

    def opt(key: str, units: dict[str, float], example: str) -> float | None:
        return _number(p[key], key, units, example) if key in p else None

    def opt_count(key: str) -> int | None:
        return _count(p[key], key) if key in p else None

    def opt_time(key: str) -> float | None:
        return parse_seconds(p[key], f"{_OPTION} {key}") if key in p else None

    return Workload(
        context=context,
        output=output,
        concurrency=opt("concurrency", {}, "64"),
        rate=opt("rate", {"/s": 1.0}, "2.5"),
        slo=Slo(opt_time("ttft"), opt_time("tpot"), opt_time("e2el")),
        memory=opt("memory", _BYTES, "80GiB"),
        power=opt("power", {"kw": 1000.0, "w": 1.0}, "700W"),
        weights=opt("weights", _BYTES, "16GiB"),
        kv_per_token=opt("kv_per_token", _BYTES, "128KiB"),
        layers=opt_count("layers"),
        kv_heads=opt_count("kv_heads"),
        head_dim=opt_count("head_dim"),
        kv_dtype_bytes=opt("kv_dtype_bytes", {}, "2") or 2.0,
    )


@dataclass(frozen=True)
class Figure:
    """One figure of the answer: its value (None: cannot be known, ``note`` says why), unit,
    how it was obtained, the level trial it comes from and a note."""

    name: str
    value: float | str | None
    unit: str
    basis: Basis
    trial: str | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        v = self.value
        return {
            "name": self.name,
            "value": None if isinstance(v, float) and not math.isfinite(v) else v,
            "unit": self.unit,
            "basis": self.basis,
            "trial": self.trial,
            "note": self.note,
        }

    def text(self) -> str:
        v = self.value
        if v is None:
            shown = "unknown"
        elif isinstance(v, str):
            shown = v
        elif self.unit == "bytes":
            shown = size(v)
        elif self.unit == "USD/Mtok":
            shown = f"${v:.4g} per million output tokens"
        else:
            shown = f"{v:.4g} {self.unit}".rstrip()
        where = f", {self.trial}" if self.trial else ""
        note = f": {self.note}" if self.note else ""
        return f"{self.name}: {shown} ({self.basis}{where}){note}"


@dataclass(frozen=True)
class Sizing:
    """The answer for one workload: its figures, in the order the module doc lists them."""

    workload: Workload
    slo: Slo
    figures: tuple[Figure, ...]

    def figure(self, name: str) -> Figure:
        return next(f for f in self.figures if f.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload.to_dict(),
            "slo": self.slo.to_dict(),
            "figures": {f.name: f.to_dict() for f in self.figures},
        }


def _param(levels: tuple[Level, ...], key: str) -> float | None:
    for lv in levels:
        v = lv.trial.params.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _kv_per_token(w: Workload, levels: tuple[Level, ...]) -> float | None:
    if w.kv_per_token is not None:
        return w.kv_per_token
    dims = (
        w.layers or _param(levels, "model.n_layer"),
        w.kv_heads or _param(levels, "model.n_kv_heads"),
        w.head_dim or _param(levels, "model.head_dim"),
    )
    if all(d is not None for d in dims):
        layers, heads, dim = (float(d or 0) for d in dims)
        return 2.0 * layers * heads * dim * w.kv_dtype_bytes  # K and V of every layer
    return _param(levels, "model.kv_bytes_per_token")


def _per_replica(w: Workload, best: Level) -> tuple[float | None, float | None]:
    """(load per replica in the workload's mode, requests in flight per replica)."""
    s = best.stats
    in_flight = (
        best.level
        if best.mode == "concurrency"
        else (s.request_throughput or 0.0) * (s.e2el.mean or 0.0)
    )
    if w.mode == best.mode:
        return best.level, in_flight
    if w.mode == "rate":
        return s.request_throughput, in_flight
    return in_flight, in_flight


def _shape_note(w: Workload, best: Level) -> str:
    s = best.stats
    if not s.ok:
        return ""
    out_mean = s.completion_tokens / s.ok
    ctx_mean = (s.prompt_tokens + s.completion_tokens) / s.ok
    off = [
        f"{name} {got:.0f} tokens measured, {want} asked"
        for name, got, want in (("output", out_mean, w.output), ("context", ctx_mean, w.context))
        if abs(got - want) > SHAPE_TOLERANCE * want
    ]
    return "; ".join(off)


def size_workload(
    store: Store,
    sr: ServingRun,
    w: Workload,
    settings: FindingSettings | None = None,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
) -> Sizing:
    """The sizing answer for ``w`` from the load run ``sr`` (see the module doc)."""
    s = settings or FindingSettings()
    slo = w.slo if w.slo.given() else sr.slo
    if not slo.given():
        raise ConfigError(f"{_OPTION} needs ttft=, tpot= or e2el=: the run has no SLO")
    ran = [lv for lv in sr.levels if lv.ran]
    good = [lv for lv in ran if lv.stats.meets(slo)]
    unit = "concurrent requests" if w.mode == "concurrency" else "requests/s"
    figs: list[Figure] = [Figure("load", w.load, unit, "given", None)]
    if not good:
        low = min(ran, key=lambda lv: lv.level, default=None)
        note = "no level meets the SLO" + (f", not even {low.trial.name}" if low else "")
        figs.append(Figure("good_load_per_replica", None, unit, "measured", None, note))
        return Sizing(w, slo, tuple(figs))
    best = max(good, key=lambda lv: lv.level)
    per, in_flight = _per_replica(w, best)
    name = best.trial.name
    notes = []
    if best is max(ran, key=lambda lv: lv.level):
        notes.append("the highest level measured: one replica may take more")
    shape = _shape_note(w, best)
    if shape:
        notes.append(f"measured with other requests ({shape})")
    basis: Basis = "measured" if w.mode == best.mode and not shape else "extrapolated"
    if w.mode != best.mode:
        notes.append("converted by Little's law (in flight = rate x mean E2EL)")
    figs.append(Figure("good_load_per_replica", per, unit, basis, name, "; ".join(notes)))
    if not per:
        return Sizing(w, slo, tuple(figs))
    replicas = math.ceil(w.load / per - 1e-9)
    figs.append(Figure("replicas", float(replicas), "", "extrapolated", name))
    figs.append(Figure("slots_per_replica", in_flight, "requests in flight", "measured", name))
    figs += _memory_and_cost(store, sr, w, best, replicas, in_flight or 0.0, s, catalog)
    return Sizing(w, slo, tuple(figs))


def _memory_and_cost(
    store: Store,
    sr: ServingRun,
    w: Workload,
    best: Level,
    replicas: int,
    in_flight: float,
    s: FindingSettings,
    catalog: tuple[GpuType, ...],
) -> list[Figure]:
    name = best.trial.name
    weights = w.weights or _param(sr.levels, "model.weights_bytes")
    kv = _kv_per_token(w, sr.levels)
    figs: list[Figure] = []
    if weights is None or kv is None:
        missing = "weights=" if weights is None else "kv_per_token= (or layers, kv_heads, head_dim)"
        figs.append(Figure("memory_per_replica", None, "bytes", "extrapolated", None,
                           f"the model's size is not known: give {missing}"))  # fmt: skip
        return figs
    need = weights + kv * w.context * math.ceil(in_flight)
    figs.append(
        Figure(
            "memory_per_replica",
            need,
            "bytes",
            "extrapolated",
            name,
            f"weights {size(weights)} + KV {kv:.0f} B/token x {w.context} tokens x "
            f"{math.ceil(in_flight)} in flight",
        )
    )
    with_room = need * (1.0 + s.rightsize_headroom_pct / 100.0)
    gpus = 1
    if w.memory is not None:
        gpus = math.ceil(with_room / w.memory)
        figs.append(Figure("gpus_per_replica", float(gpus), "", "extrapolated", name,
                           f"{w.memory / 1024**3:.0f} GiB each"))  # fmt: skip
    fits = [g for g in catalog if g.memory * gpus >= with_room]
    gpu = min(fits, key=lambda g: (g.memory, g.price), default=None)
    figs.append(
        Figure(
            "gpu",
            None if gpu is None else gpu.key,
            "",
            "extrapolated",
            name,
            "no GPU of the catalog holds a replica"
            if gpu is None
            else f"{gpu.label}: the smallest that holds a replica with "
            f"{s.rightsize_headroom_pct:g}% headroom",
        )
    )
    figs.append(_power(store, w, best, replicas * gpus))
    out_tps = best.stats.output_throughput
    if gpu is not None and out_tps:
        per_m = gpu.price * gpus / (out_tps * 3600.0) * 1e6
        figs.append(
            Figure("usd_per_million_output_tokens", per_m, "USD/Mtok", "extrapolated", name,
                   f"{out_tps:.4g} output tokens/s per replica at ${gpu.price:g}/GPU-hour")
        )  # fmt: skip
    return figs


def _power(store: Store, w: Workload, best: Level, gpus: int) -> Figure:
    eng = engine_trial(store, best.trial)
    if eng is not None:
        d = TrialData(store, eng)
        a, b = best.trial.start, best.trial.end or best.trial.start
        watts = 0.0
        for dev in d.devices("gpu.power"):
            tr = d.trace("gpu.power", dev)
            if tr is not None:
                inside = (tr.t >= a) & (tr.t <= b)
                if inside.any():
                    watts += tr.mean(inside)
        if watts > 0:
            n = len(d.devices("gpu.power"))
            return Figure("power_total", watts / n * gpus, "W", "extrapolated",
                          best.trial.name, f"mean {watts / n:.0f} W per GPU measured")  # fmt: skip
    if w.power is not None:
        return Figure("power_total", w.power * gpus, "W", "given", None, f"{w.power:.0f} W per GPU")
    return Figure("power_total", None, "W", "extrapolated", None, "no gpu.power measured")
