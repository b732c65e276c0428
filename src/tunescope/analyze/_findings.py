"""Findings of a trial or a run: every rule of :data:`RULES` applied to what the store holds.

Rules that lack their data (no GPU series, no events) find nothing rather than guess. The
thresholds are :class:`FindingSettings`; right-sizing reads a GPU catalog whose prices the
caller may set (:func:`gpu_catalog`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunescope.analyze._data import TrialData
from tunescope.analyze._finding import SEVERITIES, Finding, RuleInfo
from tunescope.analyze._gpus import (
    ADVICE_BUSY,
    ADVICE_GPU_OOM,
    ADVICE_IDLE,
    ADVICE_UNDERUSED,
    busy_not_working,
    gpu_devices,
    gpu_underused,
    idle_gpu,
    near_oom_gpu,
)
from tunescope.analyze._rightsize import (
    ADVICE_MIG,
    ADVICE_PRICES,
    ADVICE_SLOWER,
    GPU_CATALOG,
    GpuType,
    right_size,
)
from tunescope.analyze._rules import (
    ADVICE_CPU_BOUND,
    ADVICE_CPU_MEM,
    ADVICE_EVAL,
    ADVICE_GROWTH_CPU,
    ADVICE_GROWTH_GPU,
    ADVICE_INPUT,
    cpu_bound,
    eval_memory_spike,
    input_bound,
    memory_growth,
    near_oom_cpu,
)
from tunescope.analyze._settings import FindingSettings
from tunescope.store import Store, TrialInfo

__all__ = ["RULES", "findings_for_run", "findings_for_trial", "to_dict"]

RULES: tuple[RuleInfo, ...] = (
    RuleInfo(
        "input_bound",
        "Input-bound",
        ("high", "moderate"),
        ("input_wait_high_pct", "input_wait_moderate_pct", "input_min_batches", "min_samples"),
        ("train.data_wait", "train.step_time", "cpu.util"),
        "Share of step time spent waiting for the next batch (trial.watch()).",
        ADVICE_INPUT,
    ),
    RuleInfo(
        "near_oom_gpu",
        "Near out-of-memory (GPU)",
        ("high",),
        ("gpu_mem_near_oom_pct", "alloc_retries_min"),
        ("gpu.mem", "gpu.mem.used", "gpu.mem.total", "torch.alloc_retries"),
        "Peak GPU memory near the device's memory, or torch allocator retries.",
        ADVICE_GPU_OOM,
    ),
    RuleInfo(
        "near_oom_cpu",
        "Near out-of-memory (CPU)",
        ("high",),
        ("cpu_mem_near_limit_pct",),
        ("cpu.mem", "cpu.mem.limit"),
        "Peak CPU memory of the trial near the limit it runs under.",
        ADVICE_CPU_MEM,
    ),
    RuleInfo(
        "gpu_underused",
        "GPU under-used",
        ("moderate",),
        ("gpu_underused_util_pct", "sm_active_low_pct", "busy_util_pct", "min_samples"),
        ("gpu.util", "gpu.sm_active"),
        "Mean GPU utilization, or SM activity where GPM reports it, low while training "
        "(evaluations left out).",
        ADVICE_UNDERUSED,
    ),
    RuleInfo(
        "busy_not_working",
        "Busy but not working",
        ("moderate", "low"),
        ("busy_util_pct", "sm_active_low_pct", "busy_power_pct", "min_samples"),
        ("gpu.util", "gpu.sm_active", "gpu.power", "gpu.power.limit"),
        "GPU utilization high while SM activity is low; without GPM, low power draw "
        "against the limit (a weaker signal, severity low).",
        ADVICE_BUSY,
    ),
    RuleInfo(
        "cpu_bound",
        "CPU-bound",
        ("high", "moderate"),
        (
            "cpu_bound_cpu_pct",
            "cpu_bound_window_s",
            "cpu_bound_gpu_pct",
            "cpu_bound_wait_pct",
            "cpu_bound_share_pct",
            "min_samples",
        ),
        ("cpu.util", "cpu.capacity", "gpu.util", "train.data_wait"),
        "The trial's CPU near its capacity while the GPU waits (or, without a GPU, "
        "while the training loop waits for data).",
        ADVICE_CPU_BOUND,
    ),
    RuleInfo(
        "idle_gpu",
        "Idle GPU",
        ("moderate",),
        ("idle_gpu_util_pct", "idle_gpu_share_pct", "min_samples"),
        ("gpu.util", "gpu.mem"),
        "A GPU the trial holds that stays near 0% for most of the run.",
        ADVICE_IDLE,
    ),
    RuleInfo(
        "memory_growth",
        "Memory growth",
        ("moderate",),
        (
            "growth_min_pct",
            "growth_min_mib",
            "growth_max_dip_pct",
            "growth_segments",
            "min_samples",
        ),
        ("cpu.mem", "gpu.mem", "cpu.mem.limit", "gpu.mem.total"),
        "CPU or GPU memory that keeps climbing through training.",
        ADVICE_GROWTH_CPU + ADVICE_GROWTH_GPU,
    ),
    RuleInfo(
        "eval_memory_spike",
        "Evaluation memory spike",
        ("moderate", "low"),
        ("eval_spike_min_pct", "eval_spike_min_mib"),
        ("cpu.mem", "gpu.mem"),
        "How much each evaluation adds to memory over the level just before it.",
        ADVICE_EVAL,
    ),
    RuleInfo(
        "right_size",
        "Right-size",
        ("moderate", "low"),
        ("rightsize_headroom_pct", "mig_max_util_pct", "min_samples"),
        ("gpu.mem", "gpu.mem.total", "gpu.util"),
        "The cheapest GPU of a catalog, or MIG slice when utilization stays low, that "
        "holds the peak GPU memory with headroom, and the saving per run.",
        (ADVICE_SLOWER, ADVICE_MIG, ADVICE_PRICES),
    ),
)
"""Every rule, in the order findings are listed at equal severity."""

_ORDER = {r.key: i for i, r in enumerate(RULES)}


def _sort_key(f: Finding) -> tuple[int, int, str]:
    return SEVERITIES.index(f.severity), _ORDER.get(f.rule, len(_ORDER)), f.device or ""


def findings_for_trial(
    store: Store,
    trial: TrialInfo | int,
    settings: FindingSettings | None = None,
    *,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
) -> list[Finding]:
    """Every finding of one trial, most severe first. NotFound for an unknown trial id."""
    info = store.get_trial(trial) if isinstance(trial, int) else trial
    s = settings if settings is not None else FindingSettings()
    d = TrialData(store, info)
    out: list[Finding] = []
    out += input_bound(d, s)
    out += near_oom_cpu(d, s)
    out += cpu_bound(d, s)
    out += memory_growth(d, s, "cpu.mem")
    out += eval_memory_spike(d, s, "cpu.mem")
    for dev in gpu_devices(d):
        out += near_oom_gpu(d, s, dev)
        idle = idle_gpu(d, s, dev)
        out += idle
        if not idle:
            out += gpu_underused(d, s, dev)
            out += busy_not_working(d, s, dev)
        out += memory_growth(d, s, "gpu.mem", dev)
        out += eval_memory_spike(d, s, "gpu.mem", dev)
    out += right_size(d, s, catalog)
    return sorted(out, key=_sort_key)


def findings_for_run(
    store: Store,
    run: int | str,
    settings: FindingSettings | None = None,
    *,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
) -> dict[int, list[Finding]]:
    """Findings of every trial of a run (by id or name), keyed by trial id in creation
    order; a trial with none maps to an empty list. NotFound for an unknown run."""
    info = store.get_run(run)
    return {
        t.id: findings_for_trial(store, t, settings, catalog=catalog)
        for t in store.list_trials(info.id)
    }


def to_dict(findings: Finding | Sequence[Finding] | Mapping[int, Sequence[Finding]]) -> Any:
    """JSON values: a finding as a dict, a list of findings as a list, and the mapping of
    :func:`findings_for_run` as ``{"<trial id>": [finding, ...]}``."""
    if isinstance(findings, Finding):
        return findings.to_dict()
    if isinstance(findings, Mapping):
        return {str(k): [f.to_dict() for f in v] for k, v in findings.items()}
    return [f.to_dict() for f in findings]
