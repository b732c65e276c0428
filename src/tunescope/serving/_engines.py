"""Engine metrics: a serving engine's Prometheus page in one vocabulary (``serve.*``).

Each engine names the same things its own way; :data:`ENGINES` maps each ``serve.*`` key of
the metric catalog to the engine's source name (the catalog's ``equivalent`` lists them, a
test checks they agree). A metric an engine does not expose gives no sample (never zero).

- counters and gauges are summed over their label sets (several models or data-parallel
  ranks on one server), except percentages, which are averaged;
- a ratio (Triton's KV blocks used / max) is taken over the sums;
- histograms (engine-side TTFT and ITL) give the mean over the last scrape interval:
  growth of ``_sum`` / growth of ``_count``, absent while no request finished in it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ENGINES",
    "SERVE_KEYS",
    "Exposition",
    "Gauge",
    "HistMean",
    "Ratio",
    "Scrape",
    "detect",
    "parse_exposition",
    "parse_slots",
]

Labels = tuple[tuple[str, str], ...]
Exposition = dict[str, list[tuple[Labels, float]]]
"""Sample name -> [(labels, value)] of one Prometheus text page."""

_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(v: str) -> str:
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_exposition(text: str) -> Exposition:
    """The samples of a Prometheus text exposition (format 0.0.4). Comment lines and lines
    that do not parse are skipped; NaN and infinite values are kept out."""
    out: Exposition = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        labels: Labels = ()
        if m.group(3):
            pairs = _LABEL.findall(m.group(3))
            labels = tuple(sorted((k, _unescape(v)) for k, v in pairs))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def _pick(
    exp: Exposition, names: tuple[str, ...], where: Mapping[str, str] | None = None
) -> list[float] | None:
    """The values of the first of ``names`` the page has (label filter ``where``)."""
    for name in names:
        rows = exp.get(name)
        if rows is None:
            continue
        want = tuple((where or {}).items())
        vals = [v for labels, v in rows if all(kv in labels for kv in want)]
        if vals:
            return vals
    return None


@dataclass(frozen=True)
class Gauge:
    """A gauge or counter: ``names`` (the first the page has), summed over label sets (or
    averaged: ``mean``), times ``scale``; ``where`` selects label values."""

    names: tuple[str, ...]
    scale: float = 1.0
    mean: bool = False
    where: tuple[tuple[str, str], ...] = ()

    def read(self, exp: Exposition) -> float | None:
        vals = _pick(exp, self.names, dict(self.where))
        if vals is None:
            return None
        total = sum(vals) / len(vals) if self.mean else sum(vals)
        return total * self.scale

    def source(self) -> str:
        sel = ",".join(f'{k}="{v}"' for k, v in self.where)
        return " or ".join(f"{n}{{{sel}}}" if sel else n for n in self.names)


@dataclass(frozen=True)
class Ratio:
    """``num`` / ``den`` × ``scale`` (None when either is missing or ``den`` is 0)."""

    num: Gauge
    den: Gauge
    scale: float = 100.0

    def read(self, exp: Exposition) -> float | None:
        a, b = self.num.read(exp), self.den.read(exp)
        if a is None or not b:
            return None
        return a / b * self.scale

    def source(self) -> str:
        return f"{self.num.source()} / {self.den.source()}"


@dataclass(frozen=True)
class HistMean:
    """A histogram's mean over the last interval (its ``_sum`` and ``_count`` growth)."""

    names: tuple[str, ...]

    def totals(self, exp: Exposition) -> tuple[float, float] | None:
        for name in self.names:
            s, c = exp.get(name + "_sum"), exp.get(name + "_count")
            if s and c:
                return sum(v for _, v in s), sum(v for _, v in c)
        return None

    def source(self) -> str:
        return " or ".join(self.names)


Source = Gauge | Ratio | HistMean


def _g(*names: str, scale: float = 1.0, mean: bool = False, **where: str) -> Gauge:
    return Gauge(names, scale, mean, tuple(where.items()))


SERVE_KEYS = (
    "serve.running",
    "serve.waiting",
    "serve.kv_use",
    "serve.preemptions",
    "serve.prompt_tokens",
    "serve.gen_tokens",
    "serve.requests_deferred",
    "serve.ttft_mean",
    "serve.itl_mean",
)

ENGINES: dict[str, dict[str, Source]] = {
    # vLLM's documented production metrics (V0 and V1 names where they differ)
    "vllm": {
        "serve.running": _g("vllm:num_requests_running"),
        "serve.waiting": _g("vllm:num_requests_waiting"),
        "serve.kv_use": _g(
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", scale=100.0, mean=True
        ),
        "serve.preemptions": _g("vllm:num_preemptions_total"),
        "serve.prompt_tokens": _g("vllm:prompt_tokens_total"),
        "serve.gen_tokens": _g("vllm:generation_tokens_total"),
        "serve.ttft_mean": HistMean(("vllm:time_to_first_token_seconds",)),
        "serve.itl_mean": HistMean(
            ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
        ),
    },
    "sglang": {
        "serve.running": _g("sglang:num_running_reqs"),
        "serve.waiting": _g("sglang:num_queue_reqs"),
        "serve.kv_use": _g("sglang:token_usage", scale=100.0, mean=True),
        "serve.prompt_tokens": _g("sglang:prompt_tokens_total"),
        "serve.gen_tokens": _g("sglang:generation_tokens_total"),
        "serve.ttft_mean": HistMean(("sglang:time_to_first_token_seconds",)),
        "serve.itl_mean": HistMean(
            ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
        ),
    },
    "tgi": {
        "serve.running": _g("tgi_batch_current_size"),
        "serve.waiting": _g("tgi_queue_size"),
        "serve.prompt_tokens": _g("tgi_request_input_length_sum"),
        "serve.gen_tokens": _g("tgi_request_generated_tokens_sum"),
        "serve.itl_mean": HistMean(("tgi_request_mean_time_per_token_duration",)),
    },
    "llamacpp": {
        "serve.running": _g("llamacpp:requests_processing"),
        "serve.waiting": _g("llamacpp:requests_deferred"),
        "serve.kv_use": _g("llamacpp:kv_cache_usage_ratio", scale=100.0, mean=True),
        "serve.prompt_tokens": _g("llamacpp:prompt_tokens_total"),
        "serve.gen_tokens": _g("llamacpp:tokens_predicted_total"),
        "serve.requests_deferred": _g("llamacpp:requests_deferred"),
    },
    # Triton Inference Server with the TensorRT-LLM backend
    "triton": {
        "serve.running": _g("nv_trt_llm_request_metrics", request_type="scheduled"),
        "serve.waiting": _g("nv_inference_pending_request_count"),
        "serve.kv_use": Ratio(
            _g("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="used"),
            _g("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max"),
        ),
    },
    # NVIDIA NIM for LLMs: vLLM's names without the prefix
    "nim": {
        "serve.running": _g("num_requests_running"),
        "serve.waiting": _g("num_requests_waiting"),
        "serve.kv_use": _g("gpu_cache_usage_perc", scale=100.0, mean=True),
        "serve.prompt_tokens": _g("prompt_tokens_total"),
        "serve.gen_tokens": _g("generation_tokens_total"),
        "serve.ttft_mean": HistMean(("time_to_first_token_seconds",)),
        "serve.itl_mean": HistMean(("time_per_output_token_seconds",)),
    },
}

_PREFIXES = (
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("llamacpp:", "llamacpp"),
    ("tgi_", "tgi"),
    ("nv_", "triton"),
)


def detect(exp: Exposition) -> str | None:
    """Which engine wrote the page (its metric names), or None."""
    names = set(exp)
    for prefix, engine in _PREFIXES:
        if any(n.startswith(prefix) for n in names):
            return engine
    if "num_requests_running" in names or "generation_tokens_total" in names:
        return "nim"
    return None


def parse_slots(doc: object) -> tuple[int, int] | None:
    """llama.cpp's ``/slots``: (slots, slots processing), or None when it is not that."""
    if not isinstance(doc, list) or not all(isinstance(s, dict) for s in doc):
        return None
    busy = sum(1 for s in doc if s.get("is_processing"))
    return len(doc), busy


@dataclass
class Scrape:
    """Turns successive pages of one engine into ``serve.*`` values; keeps the histograms'
    last totals for the interval means."""

    engine: str
    _last: dict[str, tuple[float, float]] = field(default_factory=dict)

    def values(self, exp: Exposition) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, src in ENGINES[self.engine].items():
            if isinstance(src, HistMean):
                tot = src.totals(exp)
                if tot is None:
                    continue
                prev = self._last.get(key)
                self._last[key] = tot
                if prev is not None and tot[1] > prev[1]:
                    out[key] = (tot[0] - prev[0]) / (tot[1] - prev[1])
            else:
                v = src.read(exp)
                if v is not None:
                    out[key] = v
        return out
