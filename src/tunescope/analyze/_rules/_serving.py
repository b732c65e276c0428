"""Findings on the levels of a load run (``tunescope load``): latency target missed, queueing,
KV-cache bound, decode memory-bandwidth bound and over-provisioned.

Each judges one load trial (a level); trials without ``load.mode`` find nothing. The
requests are the level's ``request`` events (``analyze/_serving.py::level_stats``), the engine's own
figures its ``serve.*`` series, and the engine's hardware the series of the trial that sampled
the engine (``analyze/_serving.py::engine_trial``) over the level's span. See docs/findings.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.analyze._data import F64, Trace, TrialData
from tunescope.analyze._gpu_catalog import GB, match_gpu
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said, gpu_devices
from tunescope.analyze._serving import (
    Level,
    ServingRun,
    engine_trial,
    is_load_trial,
    serving_run,
)
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._summary import trial_end
from tunescope.analyze._text import pct

__all__ = [
    "DecodeBandwidthBound",
    "KvCacheBound",
    "LatencyTargetMissed",
    "OverProvisioned",
    "Queueing",
]

ADVICE_SLO = (
    "Serve this load with more replicas: the sizing answer (tunescope report RUN --workload "
    "...) says how many, from the highest level that met the target.",
    "Cap each replica's load at the highest good level (a load balancer's max connections per "
    "backend) so queueing does not push TTFT past the target.",
    "Shorten TPOT with a smaller or quantized model, or a GPU with more memory bandwidth.",
)
ADVICE_QUEUE = (
    "Give the engine more parallel slots: llama.cpp --parallel N, vLLM --max-num-seqs, SGLang "
    "--max-running-requests, TGI --max-batch-size (with the KV cache to hold them).",
    "Raise the batch's token budget so prefills join running decodes: vLLM "
    "--max-num-batched-tokens, TGI --max-batch-prefill-tokens.",
    "Or add replicas: each waiting request adds a whole service time to its TTFT.",
)
ADVICE_KV = (
    "Give the KV cache more memory: vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, "
    "llama.cpp --ctx-size (shared by its slots).",
    "Store the KV cache in 8 bits (vLLM --kv-cache-dtype fp8, llama.cpp --cache-type-k q8_0) "
    "or shorten the longest context the engine accepts (vLLM --max-model-len).",
    "Fewer concurrent sequences per replica, and more replicas, keep requests from being "
    "preempted and recomputed.",
)
ADVICE_BW = (
    "Decode reads every weight once per step: batch more sequences per step (more slots or "
    "concurrency) so each read serves more tokens.",
    "Read fewer bytes per token: quantize the weights (FP8, INT4 AWQ/GPTQ) or the KV cache.",
    "A GPU with more memory bandwidth shortens TPOT (the GPU catalog lists each one's).",
    "Speculative decoding turns several decode steps into one verification step.",
)
ADVICE_OVER = (
    "Serve the same traffic with fewer replicas, or on a smaller GPU (the sizing answer and "
    "the right-size catalog say which).",
    "Or raise each replica's load: the SLO holds at this level with room to spare.",
)


def _run(c: Case) -> tuple[ServingRun, Level] | None:
    """The load run of the trial, and the trial's level; None for other trials."""
    if not is_load_trial(c.d.trial):
        return None
    sr = serving_run(c.d.store, c.d.trial.run_id)
    if sr is None:
        return None
    mine = next((lv for lv in sr.levels if lv.trial.id == c.d.trial.id), None)
    return None if mine is None else (sr, mine)


def _span(d: TrialData) -> tuple[float, float]:
    return d.trial.start, trial_end(d.trial) or d.trial.start


def _inside(tr: Trace, a: float, b: float) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return (tr.t >= a) & (tr.t <= b)


@dataclass(frozen=True)
class Compute:
    """The engine's compute activity during a level: the signal read, its mean over the span
    and its traces (one per device), for reading at other times."""

    metric: str
    mean_pct: float
    traces: tuple[Trace, ...]

    def at(self, times: F64, tolerance: float) -> F64:
        """Mean over the devices of each one's nearest point to each of ``times``."""
        vals = np.vstack([tr.at(times, tolerance) for tr in self.traces])
        with np.errstate(all="ignore"):
            return np.asarray(np.nanmean(vals, axis=0), dtype=np.float64)


def engine_compute(d: TrialData, metrics: tuple[str, ...]) -> Compute | None:
    """The engine's compute over the level's span: the first of ``metrics`` the engine's
    trial has samples of there (GPU ones averaged over its GPUs)."""
    eng = engine_trial(d.store, d.trial)
    if eng is None:
        return None
    e = TrialData(d.store, eng)
    a, b = _span(d)
    for metric in metrics:
        traces = []
        for dev in e.devices(metric):
            tr = e.trace(metric, dev)
            if tr is not None and _inside(tr, a, b).any():
                traces.append(tr)
        if traces:
            mean = float(np.mean([tr.mean(_inside(tr, a, b)) for tr in traces]))
            return Compute(metric, mean, tuple(traces))
    return None


COMPUTE = ("gpu.sm_active", "gpu.util", "cpu.util")


# ---------------------------------------------------------------------- latency target missed
@dataclass(frozen=True, kw_only=True)
class Missed(Measured):
    """The first level that misses the run's SLO at p99, the level before it, and every
    level's goodput."""

    mode: str
    level: float
    ttft_p99: float | None
    tpot_p99: float | None
    e2el_p99: float | None
    slo: dict[str, float | None]
    last_good: str | None
    goodput: dict[str, float | None]


class LatencyTargetMissed(Rule[Missed]):
    key = "latency_target_missed"
    title = "Latency target missed"
    severities = ("high", "moderate")
    uses = (FindingSettings.serve_min_requests,)
    metrics = ("serve.running", "serve.waiting")
    summary = (
        "The first load level whose p99 TTFT, TPOT or end-to-end latency misses the SLO the "
        "run was given (--slo), with every level's goodput."
    )
    advice = ADVICE_SLO

    def measure(self, c: Case) -> Missed | None:
        got = _run(c)
        if got is None:
            return None
        sr, mine = got
        first = sr.first_missed(min_requests=c.s.serve_min_requests)
        if first is None or first.trial.id != mine.trial.id:
            return None
        before = [lv for lv in sr.levels if lv.ran and lv.level < mine.level]
        a, b = _span(c.d)
        s = mine.stats
        return Missed(
            mode=mine.mode,
            level=mine.level,
            ttft_p99=s.ttft.p99,
            tpot_p99=s.tpot.p99,
            e2el_p99=s.e2el.p99,
            slo=sr.slo.to_dict(),
            last_good=before[-1].trial.name if before else None,
            goodput={lv.trial.name: lv.stats.goodput for lv in sr.levels},
            t0=a,
            t1=b,
            metric="serve.waiting" if c.d.has("serve.waiting") else None,
            device=None,
        )

    def judge(self, m: Missed, s: FindingSettings) -> Severity | None:
        return "moderate" if m.last_good is not None else "high"

    def say(self, m: Missed, s: FindingSettings, severity: Severity) -> Said:
        misses = [
            f"p99 {name} {got * 1000:.0f} ms > {target * 1000:.0f} ms"
            for name, got, target in (
                ("TTFT", m.ttft_p99, m.slo["ttft_s"]),
                ("TPOT", m.tpot_p99, m.slo["tpot_s"]),
                ("E2EL", m.e2el_p99, m.slo["e2el_s"]),
            )
            if got is not None and target is not None and got > target
        ]
        good = ", ".join(f"{k} {'-' if v is None else f'{v:.3g}'}/s" for k, v in m.goodput.items())
        before = (
            f"{m.last_good} was the highest level that met it"
            if m.last_good
            else "no lower level met it"
        )
        return Said(
            f"Latency target missed at {m.mode} {m.level:g}",
            f"At {m.mode} {m.level:g} the SLO is missed ({'; '.join(misses) or 'no success'}); "
            f"{before}. Goodput per level: {good}.",
            {
                "mode": m.mode,
                "level": m.level,
                "ttft_p99_s": m.ttft_p99,
                "tpot_p99_s": m.tpot_p99,
                "e2el_p99_s": m.e2el_p99,
                "slo": m.slo,
                "last_good": m.last_good,
                "goodput": m.goodput,
            },
            ADVICE_SLO,
        )


# ---------------------------------------------------------------------- queueing
@dataclass(frozen=True, kw_only=True)
class Queue(Measured):
    """How much of the level requests waited at the engine, how many at most, the engine's
    compute meanwhile and its slots."""

    share_pct: float
    waiting_max: float
    deferred: float | None
    compute_metric: str
    compute_pct: float
    slots: int | None
    running_mean: float | None


def _waiting_mask(d: TrialData, a: float, b: float) -> tuple[Trace, Any, float | None] | None:
    wait = d.trace("serve.waiting")
    deferred = d.trace("serve.requests_deferred")
    if wait is not None:
        inside = _inside(wait, a, b)
        return wait, inside & (wait.hi > 0), None if deferred is None else _rise(deferred)
    if deferred is None:
        return None
    inside = _inside(deferred, a, b)
    rising = np.concatenate([[False], np.diff(deferred.v) > 0])
    return deferred, inside & rising, _rise(deferred)


def _rise(tr: Trace) -> float:
    return float(tr.v[-1] - tr.v[0]) if len(tr) else math.nan


class Queueing(Rule[Queue]):
    key = "queueing"
    title = "Queueing at the engine"
    severities = ("moderate",)
    uses = (
        FindingSettings.serve_waiting_share_pct,
        FindingSettings.serve_busy_pct,
        FindingSettings.min_samples,
    )
    metrics = ("serve.waiting", "serve.requests_deferred", "serve.running", *COMPUTE)
    summary = (
        "Requests wait at the engine while its compute is not busy: too few slots or too "
        "small a batch, not too little compute."
    )
    advice = ADVICE_QUEUE
    yields_to = ("kv_cache_bound",)

    def measure(self, c: Case) -> Queue | None:
        d, s = c.d, c.s
        if not is_load_trial(d.trial):
            return None
        a, b = _span(d)
        got = _waiting_mask(d, a, b)
        comp = engine_compute(d, COMPUTE)
        if got is None or comp is None:
            return None
        tr, waiting, deferred = got
        inside = _inside(tr, a, b)
        if int(tr.n[inside].sum()) < s.min_samples or not waiting.any():
            return None
        busy = comp.at(tr.t[waiting], 1.5 * d.interval())
        running = d.trace("serve.running")
        slots = d.trial.params.get("engine.slots")
        return Queue(
            share_pct=100.0 * float(tr.n[waiting].sum()) / float(tr.n[inside].sum()),
            waiting_max=float(tr.hi[waiting].max()) if tr.series.metric == "serve.waiting" else 0,
            deferred=deferred,
            compute_metric=comp.metric,
            compute_pct=float(np.nanmean(busy)) if np.isfinite(busy).any() else comp.mean_pct,
            slots=slots if isinstance(slots, int) and not isinstance(slots, bool) else None,
            running_mean=None if running is None else running.mean(_inside(running, a, b)),
            t0=float(tr.t[waiting].min()) - d.interval(),
            t1=float(tr.t[waiting].max()),
            metric=tr.series.metric,
            device=None,
        )

    def judge(self, m: Queue, s: FindingSettings) -> Severity | None:
        queues = m.share_pct >= s.serve_waiting_share_pct
        return "moderate" if queues and m.compute_pct < s.serve_busy_pct else None

    def say(self, m: Queue, s: FindingSettings, severity: Severity) -> Said:
        slots = ""
        if m.slots is not None and m.running_mean is not None:
            slots = f"; it ran {m.running_mean:.1f} requests on average of its {m.slots} slots"
        waited = f"up to {m.waiting_max:.0f} waiting" if m.waiting_max else "requests deferred"
        return Said(
            f"Queueing: requests wait while the engine's compute is {pct(m.compute_pct)} busy",
            f"For {pct(m.share_pct)} of the level requests waited at the engine ({waited}) "
            f"while its {m.compute_metric} averaged {pct(m.compute_pct)} (busy from "
            f"{pct(s.serve_busy_pct)}){slots}: the requests wait for a slot, not for compute.",
            {
                "share_pct": m.share_pct,
                "waiting_max": m.waiting_max,
                "requests_deferred": m.deferred,
                "compute_metric": m.compute_metric,
                "compute_pct": m.compute_pct,
                "slots": m.slots,
                "running_mean": m.running_mean,
                "share_threshold_pct": s.serve_waiting_share_pct,
                "busy_threshold_pct": s.serve_busy_pct,
            },
            ADVICE_QUEUE,
        )


# ---------------------------------------------------------------------- KV-cache bound
@dataclass(frozen=True, kw_only=True)
class KvUse(Measured):
    """The level's peak KV-cache use, the share of samples at or above the threshold, and the
    preemptions during it."""

    peak_pct: float
    share_high_pct: float
    preemptions: float | None


class KvCacheBound(Rule[KvUse]):
    key = "kv_cache_bound"
    title = "KV-cache bound"
    severities = ("high", "moderate")
    uses = (FindingSettings.serve_kv_high_pct,)
    metrics = ("serve.kv_use", "serve.preemptions")
    summary = (
        "The engine's KV cache is full (use at or above the threshold) or it preempts "
        "requests: the cache, not compute, sets how many requests run at once."
    )
    advice = ADVICE_KV

    def measure(self, c: Case) -> KvUse | None:
        d, s = c.d, c.s
        if not is_load_trial(d.trial):
            return None
        a, b = _span(d)
        kv, pre = d.trace("serve.kv_use"), d.trace("serve.preemptions")
        if kv is None and pre is None:
            return None
        peak, share, t0, t1 = 0.0, 0.0, a, b
        if kv is not None and _inside(kv, a, b).any():
            inside = _inside(kv, a, b)
            high = inside & (kv.hi >= s.serve_kv_high_pct)
            peak = kv.peak(inside)
            share = 100.0 * float(kv.n[high].sum()) / float(kv.n[inside].sum())
            if high.any():
                t0, t1 = float(kv.t[high].min()) - d.interval(), float(kv.t[high].max())
        preempted = None
        if pre is not None and _inside(pre, a, b).any():
            v = pre.v[_inside(pre, a, b)]
            preempted = float(v.max() - v.min())
        return KvUse(
            peak_pct=peak,
            share_high_pct=share,
            preemptions=preempted,
            t0=t0,
            t1=t1,
            metric="serve.kv_use" if kv is not None else "serve.preemptions",
            device=None,
        )

    def judge(self, m: KvUse, s: FindingSettings) -> Severity | None:
        if m.preemptions:
            return "high"
        return "moderate" if m.peak_pct >= s.serve_kv_high_pct else None

    def say(self, m: KvUse, s: FindingSettings, severity: Severity) -> Said:
        pre = (
            f"; the engine preempted {m.preemptions:.0f} request(s), which recompute from "
            "their prompt"
            if m.preemptions
            else ""
        )
        return Said(
            f"KV-cache bound: KV cache {pct(m.peak_pct)} full",
            f"The engine's KV cache reached {pct(m.peak_pct)} (at or above "
            f"{pct(s.serve_kv_high_pct)} for {pct(m.share_high_pct)} of the level){pre}: the "
            "cache limits how many requests run at once.",
            {
                "peak_pct": m.peak_pct,
                "share_high_pct": m.share_high_pct,
                "preemptions": m.preemptions,
                "threshold_pct": s.serve_kv_high_pct,
            },
            ADVICE_KV,
        )


# ---------------------------------------------------------------------- bandwidth bound
@dataclass(frozen=True, kw_only=True)
class Bandwidth(Measured):
    """DRAM and tensor activity of the engine's busiest-memory GPU during the level, and
    TPOT against the bound its bandwidth sets (None where the model's weights or the GPU's
    bandwidth are not known)."""

    dram_pct: float
    tensor_pct: float
    tpot_p50: float | None
    tpot_bound: float | None
    gpu_model: str | None
    bandwidth: float | None

    @property
    def near_pct(self) -> float | None:
        if self.tpot_bound is None or not self.tpot_p50:
            return None
        return 100.0 * self.tpot_bound / self.tpot_p50


class DecodeBandwidthBound(Rule[Bandwidth]):
    key = "decode_bandwidth_bound"
    title = "Decode memory-bandwidth bound"
    severities = ("moderate", "low")
    uses = (
        FindingSettings.serve_dram_high_pct,
        FindingSettings.serve_tensor_low_pct,
        FindingSettings.serve_bw_near_pct,
    )
    metrics = ("gpu.dram_active", "gpu.tensor_active", "gpu.mem.total")
    summary = (
        "During the level the engine's GPU reads memory hard while its tensor cores idle, and "
        "TPOT is near what the GPU's bandwidth allows: decode waits on memory, not math."
    )
    advice = ADVICE_BW

    def measure(self, c: Case) -> Bandwidth | None:
        got = _run(c)
        if got is None:
            return None
        _, mine = got
        eng = engine_trial(c.d.store, c.d.trial)
        if eng is None:
            return None
        e = TrialData(c.d.store, eng)
        a, b = _span(c.d)
        best = None
        for dev in gpu_devices(e) or e.devices("gpu.dram_active"):
            dram, tensor = e.trace("gpu.dram_active", dev), e.trace("gpu.tensor_active", dev)
            if dram is None or tensor is None:
                continue
            di, ti = _inside(dram, a, b), _inside(tensor, a, b)
            if di.any() and ti.any() and (best is None or dram.mean(di) > best[1]):
                best = (dev, dram.mean(di), tensor.mean(ti))
        if best is None:
            return None
        dev, dram_pct, tensor_pct = best
        total = e.trace("gpu.mem.total", dev)
        gpu = None if total is None else match_gpu(float(total.v[-1]), c.catalog)
        weights = c.d.trial.params.get("model.weights_bytes")
        bound = None
        if gpu is not None and gpu.bandwidth and isinstance(weights, int | float) and weights > 0:
            bound = float(weights) / gpu.bandwidth
        return Bandwidth(
            dram_pct=dram_pct,
            tensor_pct=tensor_pct,
            tpot_p50=mine.stats.tpot.p50,
            tpot_bound=bound,
            gpu_model=None if gpu is None else gpu.label,
            bandwidth=None if gpu is None else gpu.bandwidth,
            t0=a,
            t1=b,
            metric="gpu.dram_active",
            device=dev,
        )

    def judge(self, m: Bandwidth, s: FindingSettings) -> Severity | None:
        if m.dram_pct < s.serve_dram_high_pct or m.tensor_pct >= s.serve_tensor_low_pct:
            return None
        near = m.near_pct
        return "moderate" if near is not None and near >= s.serve_bw_near_pct else "low"

    def say(self, m: Bandwidth, s: FindingSettings, severity: Severity) -> Said:
        near = m.near_pct
        tail = ""
        if near is not None and m.tpot_bound is not None and m.tpot_p50 is not None:
            tail = (
                f" Median TPOT {m.tpot_p50 * 1000:.1f} ms against {m.tpot_bound * 1000:.1f} ms "
                f"for reading the weights once at the {m.gpu_model}'s "
                f"bandwidth: {pct(near)} of the bound."
            )
        return Said(
            f"Decode memory-bandwidth bound: DRAM {pct(m.dram_pct)} busy, tensor cores "
            f"{pct(m.tensor_pct)}",
            f"During the level GPU {m.device}'s DRAM was {pct(m.dram_pct)} active while its "
            f"tensor cores were {pct(m.tensor_pct)} active: decoding waits on memory.{tail}",
            {
                "dram_active_pct": m.dram_pct,
                "tensor_active_pct": m.tensor_pct,
                "tpot_p50_s": m.tpot_p50,
                "tpot_bound_s": m.tpot_bound,
                "bound_share_pct": near,
                "gpu_model": m.gpu_model,
                "bandwidth_gb_s": None if m.bandwidth is None else m.bandwidth / GB,
                "dram_threshold_pct": s.serve_dram_high_pct,
                "tensor_threshold_pct": s.serve_tensor_low_pct,
                "near_threshold_pct": s.serve_bw_near_pct,
            },
            ADVICE_BW,
        )


# ---------------------------------------------------------------------- over-provisioned
@dataclass(frozen=True, kw_only=True)
class Headroom(Measured):
    """At the top level: p99 latencies against their targets (as shares), the engine's
    compute activity and peak KV-cache use."""

    level: float
    mode: str
    ttft_share_pct: float | None
    tpot_share_pct: float | None
    compute_metric: str
    compute_pct: float
    kv_peak_pct: float | None


def _share(got: float | None, target: float | None) -> float | None:
    return None if got is None or not target else 100.0 * got / target


class OverProvisioned(Rule[Headroom]):
    key = "over_provisioned"
    title = "Over-provisioned"
    severities = ("low",)
    uses = (
        FindingSettings.serve_slo_margin_pct,
        FindingSettings.serve_overprov_sm_pct,
        FindingSettings.serve_overprov_kv_pct,
    )
    metrics = ("gpu.sm_active", "gpu.util", "serve.kv_use")
    summary = (
        "At the highest load level the SLO is met with margin while the engine's GPU is "
        "mostly idle and its KV cache half empty: the traffic needs less."
    )
    advice = ADVICE_OVER

    def measure(self, c: Case) -> Headroom | None:
        got = _run(c)
        if got is None:
            return None
        sr, mine = got
        ran = [lv for lv in sr.levels if lv.ran and lv.mode == mine.mode]
        if not ran or ran[-1].trial.id != mine.trial.id or not sr.slo.given():
            return None
        comp = engine_compute(c.d, COMPUTE[:2])
        if comp is None:
            return None
        a, b = _span(c.d)
        kv = c.d.trace("serve.kv_use")
        st = mine.stats
        return Headroom(
            level=mine.level,
            mode=mine.mode,
            ttft_share_pct=_share(st.ttft.p99, sr.slo.ttft_s),
            tpot_share_pct=_share(st.tpot.p99, sr.slo.tpot_s),
            compute_metric=comp.metric,
            compute_pct=comp.mean_pct,
            kv_peak_pct=None if kv is None else kv.peak(_inside(kv, a, b)),
            t0=a,
            t1=b,
            metric=comp.metric,
            device=comp.traces[0].series.device,
        )

    def judge(self, m: Headroom, s: FindingSettings) -> Severity | None:
        shares = [x for x in (m.ttft_share_pct, m.tpot_share_pct) if x is not None]
        if not shares or max(shares) > s.serve_slo_margin_pct:
            return None
        if m.compute_pct >= s.serve_overprov_sm_pct:
            return None
        if m.kv_peak_pct is not None and m.kv_peak_pct >= s.serve_overprov_kv_pct:
            return None
        return "low"

    def say(self, m: Headroom, s: FindingSettings, severity: Severity) -> Said:
        shares = ", ".join(
            f"p99 {n} at {pct(v)} of its target"
            for n, v in (("TTFT", m.ttft_share_pct), ("TPOT", m.tpot_share_pct))
            if v is not None
        )
        kv = "" if m.kv_peak_pct is None else f", KV cache at most {pct(m.kv_peak_pct)} full"
        return Said(
            f"Over-provisioned: SLO met with margin at {m.mode} {m.level:g}",
            f"At the highest level measured ({m.mode} {m.level:g}) {shares}, while the engine's "
            f"{m.compute_metric} averaged {pct(m.compute_pct)}{kv}.",
            {
                "mode": m.mode,
                "level": m.level,
                "ttft_share_pct": m.ttft_share_pct,
                "tpot_share_pct": m.tpot_share_pct,
                "compute_metric": m.compute_metric,
                "compute_pct": m.compute_pct,
                "kv_peak_pct": m.kv_peak_pct,
                "margin_pct": s.serve_slo_margin_pct,
                "sm_threshold_pct": s.serve_overprov_sm_pct,
                "kv_threshold_pct": s.serve_overprov_kv_pct,
            },
            ADVICE_OVER,
        )
