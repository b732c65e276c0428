"""Rules on the trial's CPU side and its memory: input-bound, near out-of-memory (CPU),
CPU-bound, memory growth and evaluation spikes (the last two for CPU and GPU memory alike).

Each rule takes a :class:`TrialData` and the :class:`FindingSettings` and returns its findings
(none when the trial lacks the data it needs: a rule never guesses)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tunescope.analyze._data import F64, TrialData
from tunescope.analyze._finding import Finding, Severity
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import MIB, dur, pct, size
from tunescope.store import Store, TrialInfo

__all__ = ["cpu_bound", "eval_memory_spike", "input_bound", "memory_growth", "near_oom_cpu"]

FLUSH_MAX_S = 1.05
"""The SDK writes train.* samples at most every second (a little slack for a late flush): a
CPU sample at t falls in the period of the first train.data_wait sample after it."""
MAX_WAIT_EVENTS = 200_000
"""Beyond this many data_wait events the share is taken from the train.data_wait series."""

ADVICE_INPUT = (
    "Load batches in parallel: DataLoader(num_workers=N) with N up to the spare CPU cores, "
    "and persistent_workers=True so workers survive between epochs.",
    "Pin host memory (pin_memory=True) and copy with .to(device, non_blocking=True) so the "
    "transfer overlaps compute.",
    "Prefetch: keep batches ready before they are asked for (prefetch_factor, or a "
    "background prefetcher).",
    "Move expensive preprocessing offline: decode, tokenize and augment once, store the "
    "result (e.g. datasets.map(..., num_proc=N) with its cache, or tensors on disk).",
)
ADVICE_CPU_MEM = (
    "Raise the trial's memory limit (container, cgroup or job spec) if the host has room.",
    "Hold less in RAM: memory-map datasets (Arrow, numpy.memmap) instead of loading them, "
    "and drop references to large objects once used.",
    "Fewer or lighter DataLoader workers: each holds prefetch_factor batches and its own "
    "copy of any Python objects it touches.",
    "A smaller batch size (with gradient accumulation to keep the effective batch).",
)
ADVICE_CPU_BOUND = (
    "More DataLoader workers will not help: the CPU the trial may use is already full.",
    "Move preprocessing offline (pre-tokenize, pre-decode, pre-resize once and save).",
    "Do augmentation on the GPU (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI).",
    "Give the trial more CPU (cgroup quota, --cpus-per-task, a larger instance).",
    "Avoid oversubscription: set torch.set_num_threads / OMP_NUM_THREADS per worker.",
)
ADVICE_GROWTH_CPU = (
    "Look for references kept across steps: losses or outputs appended to lists (append "
    "loss.item(), not loss), metrics accumulated as tensors, growing caches.",
    "Compare two tracemalloc snapshots (or a memray profile) taken some steps apart.",
    "Data-loader workers that touch Python lists or dicts copy them page by page (copy on "
    "access): hold dataset metadata in numpy arrays instead.",
)
ADVICE_GROWTH_GPU = (
    "Look for tensors kept across steps: a loss history without .item() or .detach() keeps "
    "every step's graph alive.",
    "Record the allocator's history (torch.cuda.memory._record_memory_history()) and open "
    "the snapshot at pytorch.org/memory_viz to see who allocates.",
    "Compare torch.mem.allocated with torch.mem.reserved: growth of reserved alone is the "
    "caching allocator keeping freed blocks (varying shapes), not a leak; pad inputs to a "
    "few fixed lengths.",
)
ADVICE_EVAL = (
    "Evaluate under torch.inference_mode() (or torch.no_grad()) with model.eval().",
    "Use a smaller evaluation batch size.",
    "Do not accumulate every logit: compute metrics batch by batch (HF Trainer: "
    "eval_accumulation_steps, preprocess_logits_for_metrics).",
    "Free training-only memory first (optimizer.zero_grad(set_to_none=True)).",
)


def _share_from_events(d: TrialData) -> dict[str, Any] | None:
    n = d.store.count_events(d.trial.id, kinds=["data_wait"])
    if n == 0 or n > MAX_WAIT_EVENTS:
        return None
    lo, hi = d.bounds()
    rows = [
        (e.t, e.duration, e.value)
        for e in d.store.all_events(d.trial.id, lo, hi, kinds=["data_wait"])
        if e.duration is not None and e.value is not None
    ]
    if not rows:
        return None
    arr = np.asarray(rows, dtype=np.float64)
    t, wait, step = arr[:, 0], arr[:, 1], arr[:, 2].copy()
    end = t + step
    for a, b in d.evaluations():  # an evaluation between two batches is no step time
        step -= np.clip(np.minimum(end, b) - np.maximum(t, a), 0.0, None)
    step = np.maximum(step, wait)
    total = float(step.sum())
    if total <= 0:
        return None
    return {
        "t": t,
        "end": end,
        "wait": wait,
        "step": step,
        "batches": len(t),
        "wait_s": float(wait.sum()),
        "step_s": total,
        "source": "data_wait events",
    }


def input_bound(d: TrialData, s: FindingSettings) -> list[Finding]:
    """Share of step time waiting for the next batch (trial.watch())."""
    ev = _share_from_events(d)
    moderate = s.input_wait_moderate_pct
    if ev is not None:
        if ev["batches"] < s.input_min_batches:
            return []
        share = 100.0 * ev["wait_s"] / ev["step_s"]
        flagged = ev["wait"] >= moderate / 100.0 * ev["step"]
        if not flagged.any():
            flagged = np.ones(len(ev["t"]), dtype=bool)
        t0, t1 = float(ev["t"][flagged].min()), float(ev["end"][flagged].max())
        batches, wait_s, step_s, source = ev["batches"], ev["wait_s"], ev["step_s"], ev["source"]
    else:
        tr = d.trace("train.data_wait")
        if tr is None or tr.samples < max(s.min_samples, 1):
            return []
        share = tr.mean()
        flagged = tr.hi >= moderate
        if not flagged.any():
            flagged = np.ones(len(tr.t), dtype=bool)
        t0 = float(tr.t[flagged].min()) - 1.0
        t1 = float(tr.t[flagged].max())
        batches, wait_s, step_s, source = None, None, None, "train.data_wait series"
    if not share >= moderate:
        return []
    severity: Severity = "high" if share >= s.input_wait_high_pct else "moderate"
    ev_out: dict[str, Any] = {
        "share_pct": share,
        "batches": batches,
        "wait_s": wait_s,
        "step_s": step_s,
        "source": source,
        "high_pct": s.input_wait_high_pct,
        "moderate_pct": moderate,
    }
    detail = ""
    if batches and wait_s is not None and step_s is not None:
        ev_out["mean_wait_ms"] = 1000.0 * wait_s / batches
        ev_out["mean_step_ms"] = 1000.0 * step_s / batches
        detail = (
            f" ({batches} batches: {ev_out['mean_wait_ms']:.1f} ms of "
            f"{ev_out['mean_step_ms']:.1f} ms per step on average)"
        )
    cpu = d.trace("cpu.util")
    advice: tuple[str, ...] = ADVICE_INPUT
    if cpu is not None:
        in_span = (cpu.t >= t0) & (cpu.t <= t1)
        cpu_mean = cpu.mean(in_span) if in_span.any() else cpu.mean()
        ev_out["cpu_util_mean_pct"] = cpu_mean
        if cpu_mean >= s.cpu_bound_cpu_pct:
            advice = (ADVICE_CPU_BOUND[0], *ADVICE_INPUT[1:], *ADVICE_CPU_BOUND[1:3])
        else:
            detail += f"; the trial's CPU was {pct(cpu_mean)} busy meanwhile"
    level = "highly" if severity == "high" else "moderately"
    return [
        Finding(
            rule="input_bound",
            trial_id=d.trial.id,
            severity=severity,
            title=f"Input-bound: {pct(share)} of step time waiting for data",
            message=(
                f"Training waited for the next batch {pct(share)} of its step time{detail}: "
                f"{level} input-bound (moderate from {pct(moderate)}, high from "
                f"{pct(s.input_wait_high_pct)})."
            ),
            evidence=ev_out,
            t0=t0,
            t1=t1,
            metric="train.data_wait",
            device=None,
            advice=advice,
        )
    ]


def near_oom_cpu(d: TrialData, s: FindingSettings) -> list[Finding]:
    """Peak CPU memory against the limit the trial runs under."""
    mem, lim = d.trace("cpu.mem"), d.trace("cpu.mem.limit")
    if mem is None or lim is None or mem.samples < 1:
        return []
    limit = lim.at(mem.t, math.inf)
    ok = np.isfinite(limit) & (limit > 0)
    if not ok.any():
        return []
    ratio = np.where(ok, mem.hi / np.where(ok, limit, 1.0), 0.0) * 100.0
    k = int(np.argmax(ratio))
    peak_pct = float(ratio[k])
    if peak_pct < s.cpu_mem_near_limit_pct:
        return []
    above = ratio >= s.cpu_mem_near_limit_pct
    seconds = float(mem.n[above].sum()) * d.interval()
    return [
        Finding(
            rule="near_oom_cpu",
            trial_id=d.trial.id,
            severity="high",
            title=f"Near out-of-memory (CPU): peak at {pct(peak_pct)} of the memory limit",
            message=(
                f"The trial's processes held up to {size(float(mem.hi[k]))} of RAM, "
                f"{pct(peak_pct)} of the {size(float(limit[k]))} it may use, and stayed at "
                f"or above {pct(s.cpu_mem_near_limit_pct)} for about {dur(seconds)}; beyond "
                "the limit the kernel's OOM killer ends the trial."
            ),
            evidence={
                "peak_bytes": float(mem.hi[k]),
                "limit_bytes": float(limit[k]),
                "peak_pct": peak_pct,
                "seconds_above": seconds,
                "threshold_pct": s.cpu_mem_near_limit_pct,
            },
            t0=float(mem.t[above].min()),
            t1=float(mem.t[above].max()),
            metric="cpu.mem",
            device=None,
            advice=ADVICE_CPU_MEM,
        )
    ]


def cpu_bound(d: TrialData, s: FindingSettings) -> list[Finding]:
    """The trial's CPU near its capacity while the GPU (or, without a GPU, the loop) waits."""
    cpu = d.trace("cpu.util")
    if cpu is None:
        return []
    mask = d.training(cpu)
    if int(mask.sum()) < s.min_samples:
        return []
    t = cpu.t[mask]
    smooth = cpu.rolling(s.cpu_bound_window_s)[mask]
    busy = smooth >= s.cpu_bound_cpu_pct
    gpus = [tr for dev in d.devices("gpu.util") if (tr := d.trace("gpu.util", dev)) is not None]
    evidence: dict[str, Any] = {
        "cpu_threshold_pct": s.cpu_bound_cpu_pct,
        "share_threshold_pct": s.cpu_bound_share_pct,
    }
    if gpus:
        vals = np.vstack([g.at(t, 1.5 * d.interval()) for g in gpus])
        # the mean of the GPUs that have a sample near each time, NaN where none has one
        seen = np.isfinite(vals)
        n_seen = seen.sum(axis=0)
        other = np.where(seen, vals, 0.0).sum(axis=0) / np.where(n_seen > 0, n_seen, np.nan)
        waiting = other < s.cpu_bound_gpu_pct
        signal, label = "gpu.util", "the GPU"
        evidence["gpu_threshold_pct"] = s.cpu_bound_gpu_pct
    else:
        wait = d.trace("train.data_wait")
        if wait is None:
            return []
        other = wait.after(t, FLUSH_MAX_S)
        waiting = other >= s.cpu_bound_wait_pct
        signal, label = "train.data_wait", "the training loop"
        evidence["wait_threshold_pct"] = s.cpu_bound_wait_pct
    hit = busy & waiting
    share = 100.0 * float(cpu.n[mask][hit].sum()) / float(cpu.n[mask].sum())
    if share < s.cpu_bound_share_pct:
        return []
    cap_tr = d.trace("cpu.capacity")
    cap = None if cap_tr is None else float(np.nanmean(cap_tr.at(t[hit], math.inf)))
    cpu_mean = float(np.average(smooth[hit], weights=cpu.n[mask][hit]))
    other_mean = float(np.nanmean(other[hit]))
    evidence.update(
        {
            "share_pct": share,
            "cpu_util_mean_pct": cpu_mean,
            "signal": signal,
            "cpu_capacity_cores": cap,
        }
    )
    if gpus:
        evidence["gpu_util_mean_pct"] = other_mean
        what = f"GPU utilization averaged {pct(other_mean)}"
    else:
        evidence["data_wait_mean_pct"] = other_mean
        what = f"training waited for data {pct(other_mean)} of its step time"
    cores = "" if cap is None else f" of the {cap:.2g} cores it may use"
    severity: Severity = "high" if gpus else "moderate"
    return [
        Finding(
            rule="cpu_bound",
            trial_id=d.trial.id,
            severity=severity,
            title=f"CPU-bound: the CPU is full while {label} waits",
            message=(
                f"For {pct(share)} of training the trial's CPU was at or above "
                f"{pct(s.cpu_bound_cpu_pct)}{cores} (mean {pct(cpu_mean)}) while {label} "
                f"waited: {what}."
            ),
            evidence=evidence,
            t0=float(t[hit].min()),
            t1=float(t[hit].max()),
            metric="cpu.util",
            device=None,
            advice=ADVICE_CPU_BOUND,
        )
    ]


def _segment_means(t: F64, v: F64, w: F64, a: float, b: float, k: int) -> list[float]:
    edges = np.linspace(a, b, k + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, k - 1)
    means = []
    for i in range(k):
        sel = idx == i
        if sel.any():
            means.append(float(np.average(v[sel], weights=w[sel])))
    return means


def memory_growth(
    d: TrialData, s: FindingSettings, metric: str, device: str | None = None
) -> list[Finding]:
    """CPU (``cpu.mem``) or GPU (``gpu.mem``) memory that keeps climbing through training."""
    tr = d.trace(metric, device)
    if tr is None:
        return []
    span = d.train_span() or (float(tr.t[0]), float(tr.t[-1]))
    a, b = span
    mask = (tr.t >= a) & (tr.t <= b)
    segs = int(s.growth_segments)
    if int(mask.sum()) < max(s.min_samples, 2 * segs) or not b > a:
        return []
    t, v, w = tr.t[mask], tr.v[mask], tr.n[mask]
    mid = (a + b) / 2.0
    second = t >= mid
    means = _segment_means(t[second], v[second], w[second], mid, b, segs)
    if len(means) < 3:
        return []
    arr = np.asarray(means)
    dip = float(np.max(np.maximum.accumulate(arr) - arr))
    rise2 = means[-1] - means[0]
    need = max(s.growth_min_pct / 100.0 * max(means[0], 0.0), s.growth_min_mib * MIB)
    if rise2 < need or dip > s.growth_max_dip_pct / 100.0 * rise2:
        return []
    start = _segment_means(t, v, w, a, b, 2 * segs)[0]
    rise = means[-1] - start
    minutes = (b - mid) / 60.0 * (segs - 1) / segs
    slope = rise2 / minutes if minutes > 0 else math.nan
    steps = d.store.count_events(d.trial.id, a, b, kinds=["optimizer_step"])
    limit_tr = d.trace("cpu.mem.limit") if metric == "cpu.mem" else d.trace("gpu.mem.total", device)
    limit = float(limit_tr.v[-1]) if limit_tr is not None else None
    to_limit = (limit - means[-1]) / slope if limit is not None and slope > 0 else None
    per_step = rise / steps if steps else None
    where = "CPU memory" if metric == "cpu.mem" else f"GPU {device} memory"
    extra = f", about {size(per_step)} per optimizer step" if per_step else ""
    if to_limit is not None and limit is not None:
        extra += (
            f"; at this pace it reaches the {size(limit)} limit in about "
            f"{dur(max(0.0, to_limit) * 60.0)}"
        )
    return [
        Finding(
            rule="memory_growth",
            trial_id=d.trial.id,
            severity="moderate",
            title=f"{where} keeps growing: +{size(rise)} over training",
            message=(
                f"{where} rose from {size(start)} to {size(means[-1])} during training and "
                f"was still climbing in its second half (+{size(rise2)}, "
                f"{size(slope)}/min, never falling back more than {size(dip)}){extra}."
            ),
            evidence={
                "start_bytes": start,
                "end_bytes": means[-1],
                "rise_bytes": rise,
                "rise_second_half_bytes": rise2,
                "slope_bytes_per_min": slope,
                "dip_bytes": dip,
                "steps": steps,
                "bytes_per_step": per_step,
                "limit_bytes": limit,
                "minutes_to_limit": to_limit,
                "min_pct": s.growth_min_pct,
                "min_mib": s.growth_min_mib,
            },
            t0=a,
            t1=b,
            metric=metric,
            device=device,
            advice=ADVICE_GROWTH_CPU if metric == "cpu.mem" else ADVICE_GROWTH_GPU,
        )
    ]


def eval_memory_spike(
    d: TrialData, s: FindingSettings, metric: str, device: str | None = None
) -> list[Finding]:
    """How much each evaluation adds to memory over the level just before it."""
    evals = d.evaluations()
    tr = d.trace(metric, device)
    if not evals or tr is None:
        return []
    step = d.interval()
    in_any = d.in_eval(tr.t, pad=step)
    rows: list[dict[str, float]] = []
    for a, b in evals:
        inside = (tr.t >= a) & (tr.t <= b + step)
        width = max(3.0 * step, min(b - a, 30.0))
        before = (tr.t >= a - width) & (tr.t < a) & ~in_any
        if not inside.any() or not before.any():
            continue
        base = float(np.average(tr.v[before], weights=tr.n[before]))
        peak = float(tr.hi[inside].max())
        rows.append(
            {
                "t": a,
                "duration": b - a,
                "before_bytes": base,
                "peak_bytes": peak,
                "added_bytes": peak - base,
            }
        )
    if not rows:
        return []
    worst = max(rows, key=lambda r: r["added_bytes"])
    need = max(
        s.eval_spike_min_pct / 100.0 * max(worst["before_bytes"], 0.0), s.eval_spike_min_mib * MIB
    )
    if worst["added_bytes"] < need:
        return []
    added = [r["added_bytes"] for r in rows]
    peak_in = float(tr.hi[in_any].max()) if in_any.any() else math.nan
    peak_out = float(tr.hi[~in_any].max()) if (~in_any).any() else math.nan
    sets_peak = bool(peak_in > peak_out) if math.isfinite(peak_out) else True
    adds_to_peak = max(0.0, peak_in - peak_out) if math.isfinite(peak_out) else math.nan
    for r in rows:  # how far each evaluation went above the training peak
        r["above_training_peak_bytes"] = (
            max(0.0, r["peak_bytes"] - peak_out) if math.isfinite(peak_out) else math.nan
        )
    severity: Severity = "moderate" if sets_peak else "low"
    where = "CPU memory" if metric == "cpu.mem" else f"GPU {device} memory"
    share = (
        100.0 * worst["added_bytes"] / worst["before_bytes"]
        if worst["before_bytes"] > 0
        else math.nan
    )
    tail = (
        f" Evaluation sets the trial's peak memory ({size(adds_to_peak)} above the training "
        "peak), so it decides how much memory the trial needs."
        if sets_peak and math.isfinite(adds_to_peak)
        else ""
    )
    return [
        Finding(
            rule="eval_memory_spike",
            trial_id=d.trial.id,
            severity=severity,
            title=f"Evaluation adds up to {size(worst['added_bytes'])} to {where}",
            message=(
                f"Across {len(rows)} evaluation(s), {where} rose by up to "
                f"{size(worst['added_bytes'])} ({pct(share)}) over the level just before "
                f"(mean {size(float(np.mean(added)))}).{tail}"
            ),
            evidence={
                "evaluations": len(rows),
                "max_added_bytes": worst["added_bytes"],
                "mean_added_bytes": float(np.mean(added)),
                "max_added_pct": share,
                "peak_in_eval_bytes": peak_in,
                "peak_outside_eval_bytes": peak_out,
                "sets_peak": sets_peak,
                "adds_to_peak_bytes": adds_to_peak,
                "per_evaluation": rows[:50],
                "min_pct": s.eval_spike_min_pct,
                "min_mib": s.eval_spike_min_mib,
            },
            t0=worst["t"],
            t1=worst["t"] + worst["duration"],
            metric=metric,
            device=device,
            advice=ADVICE_EVAL,
        )
    ]


def data_wait_share(store: Store, trial: TrialInfo) -> float | None:
    """Percent of step time a trial spent waiting for data, computed as the input-bound
    finding computes it (evaluations between batches excluded); None without data."""
    d = TrialData(store, trial)
    ev = _share_from_events(d)
    if ev is not None:
        return 100.0 * float(ev["wait_s"]) / float(ev["step_s"])
    tr = d.trace("train.data_wait")
    return None if tr is None or tr.samples == 0 else float(tr.mean())
