"""Findings of a trial or a run: every rule of :data:`FINDINGS` applied to what the store holds.

A rule (a :class:`Rule` of ``_rule.py``) holds everything of one finding and produces
:class:`Finding` records (``_finding.py``); registering it is one line of :data:`FINDINGS`.
Rules that lack their data (no GPU series, no events) find nothing rather than guess. The
thresholds are :class:`FindingSettings`; right-sizing reads the GPU catalog
(``analyze/_gpu_catalog.py``), whose prices the caller may set (:func:`gpu_catalog`).

The rules, one module per family:

=================== =================================================================
``_oom.py``          out of memory, near out-of-memory on a GPU and on the CPU
``_input.py``        input-bound and CPU-bound: what feeds the training loop
``_utilization.py``  a GPU idle, under-used, or busy but not working
``_nodes.py``        the straggler node of a multi-node trial
``_waste.py``        GPU-hours held idle, and a sweep's pruned and failed trials
``_memory.py``       memory growth and evaluation spikes (CPU and each GPU)
``_rightsize.py``    the cheapest GPU or MIG slice that holds the trial
``_pack.py``         a trial small enough to share its GPU
``_serving.py``      the levels of a load run (``tunescope load``)
=================== =================================================================

This module is the face of the findings for the rest of ``analyze``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tunescope.analyze._data import TrialData
from tunescope.analyze._gpu_catalog import GPU_CATALOG, GpuType
from tunescope.analyze._rules._finding import SEVERITIES, Finding, RuleInfo, Severity, jsonable
from tunescope.analyze._rules._input import CpuBound, InputBound, data_wait_share
from tunescope.analyze._rules._memory import EvalMemorySpike, MemoryGrowth
from tunescope.analyze._rules._nodes import StragglerNode
from tunescope.analyze._rules._oom import NearOomCpu, NearOomGpu, OutOfMemory
from tunescope.analyze._rules._pack import PackTrials
from tunescope.analyze._rules._rightsize import RightSize
from tunescope.analyze._rules._rule import Rule
from tunescope.analyze._rules._serving import (
    DecodeBandwidthBound,
    KvCacheBound,
    LatencyTargetMissed,
    OverProvisioned,
    Queueing,
)
from tunescope.analyze._rules._utilization import BusyNotWorking, GpuUnderused, IdleGpu
from tunescope.analyze._rules._waste import IdleStretch, SweepWaste
from tunescope.analyze._settings import FindingSettings
from tunescope.store import Store, TrialInfo

__all__ = [
    "FINDINGS",
    "RULES",
    "SEVERITIES",
    "Finding",
    "RuleInfo",
    "Severity",
    "data_wait_share",
    "findings_for_run",
    "findings_for_trial",
    "jsonable",
    "to_dict",
]

FINDINGS: tuple[Rule[Any], ...] = (
    OutOfMemory(),
    InputBound(),
    NearOomGpu(),
    NearOomCpu(),
    GpuUnderused(),
    BusyNotWorking(),
    CpuBound(),
    StragglerNode(),
    IdleGpu(),
    IdleStretch(),
    MemoryGrowth(),
    EvalMemorySpike(),
    RightSize(),
    PackTrials(),
    LatencyTargetMissed(),
    KvCacheBound(),
    Queueing(),
    DecodeBandwidthBound(),
    OverProvisioned(),
    SweepWaste(),
)
"""Every rule, in the order findings are listed at equal severity."""

RULES: tuple[RuleInfo, ...] = tuple(r.info() for r in FINDINGS)
"""What each rule diagnoses (for the docs and the page), in :data:`FINDINGS` order."""

_ORDER = {r.key: i for i, r in enumerate(FINDINGS)}
_YIELDS = {r.key: r.yields_to for r in FINDINGS}


def _sort_key(f: Finding) -> tuple[int, int, str]:
    return SEVERITIES.index(f.severity), _ORDER.get(f.rule, len(_ORDER)), f.device or ""


def findings_for_trial(
    store: Store,
    trial: TrialInfo | int,
    settings: FindingSettings | None = None,
    *,
    catalog: tuple[GpuType, ...] = GPU_CATALOG,
) -> list[Finding]:
    """Every finding of one trial, most severe first. NotFound for an unknown trial id. A
    trial whose findings were kept when its raw samples were dropped (:func:`compact_raw`)
    answers those, whatever ``settings``."""
    info = store.get_trial(trial) if isinstance(trial, int) else trial
    kept = getattr(store, "kept_findings", None)
    text = None if kept is None else kept(info.id)
    if text is not None:  # computed before its raw samples were dropped (compact_raw)
        return [Finding.from_dict(d) for d in json.loads(text)]
    s = settings if settings is not None else FindingSettings()
    d = TrialData(store, info)
    out = [f for rule in FINDINGS for f in rule.findings(d, s, catalog)]
    found = {(f.rule, f.device) for f in out}
    kept = [f for f in out if not any((k, f.device) in found for k in _YIELDS[f.rule])]
    return sorted(kept, key=_sort_key)


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
