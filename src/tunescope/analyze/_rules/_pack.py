"""Packing: a trial that uses a small part of each of its GPUs (time and memory) could share
the GPU with other trials, or run on a MIG slice of it.

The trial's share of a GPU's time is ``gpu.proc_util`` (its own processes), else the device's
``gpu.util`` (an upper bound: other processes count too); its share of memory is the peak of
``gpu.mem`` against ``gpu.mem.total``. MIG instances are left out: a trial on a slice is
already packed (and NVML has no utilization per instance)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tunescope.analyze._gpu_catalog import MIG_COMPUTE_SLICES, GpuOption, match_gpu, mig_options
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said, gpu_devices
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import pct, size

__all__ = ["PackTrials"]

ADVICE_PACK = (
    "Run several such trials on one GPU at the same time, each in its own process (Ray Tune: "
    "resources_per_trial={'gpu': 0.25}; Optuna: several workers given the same "
    "CUDA_VISIBLE_DEVICES): CUDA time-slices their kernels, and NVIDIA MPS "
    "(nvidia-cuda-mps-control -d) lets them run side by side.",
    "Or give each trial a MIG slice of the profile named (nvidia.com/mig-<profile> resources "
    "in Kubernetes): its own memory and SMs, so packed trials cannot slow or crash each other.",
    "Leave room for each process's CUDA context (about 0.5 GiB) and for peaks: the packed "
    "trials' peak memory together must stay under the GPU's memory, or one of them runs out.",
)


@dataclass(frozen=True, kw_only=True)
class PackFit(Measured):
    """The trial's largest share of any of its GPUs while training: peak memory (on the GPU
    where that share is largest: ``device``, span: its training samples), mean and 95th
    percentile of its utilization (``signal``: ``gpu.proc_util`` or ``gpu.util``), how many
    such trials fit on one GPU (at most 7, as many as MIG instances), and the smallest MIG
    slice of that GPU model that holds its peak with headroom (None: not a MIG GPU of the
    catalog, or none fits)."""

    peak_bytes: float
    total_bytes: float
    util_mean_pct: float
    util_p95_pct: float
    signal: str
    gpus: int
    per_gpu: int
    gpu_model: str | None
    mig: GpuOption | None

    @property
    def peak_pct(self) -> float:
        return 100.0 * self.peak_bytes / self.total_bytes


class PackTrials(Rule[PackFit]):
    key = "pack_trials"
    title = "Pack trials on a GPU"
    severities = ("moderate",)
    uses = (
        FindingSettings.pack_mem_pct,
        FindingSettings.pack_util_pct,
        FindingSettings.rightsize_headroom_pct,
        FindingSettings.min_samples,
    )
    metrics = ("gpu.proc_util", "gpu.util", "gpu.mem", "gpu.mem.total")
    summary = (
        "The trial used under a quarter of each of its GPUs' time and memory: four or more "
        "such trials could share one GPU, or each run on a MIG slice."
    )
    advice = ADVICE_PACK
    yields_to = ("idle_gpu",)

    def measure(self, c: Case) -> PackFit | None:
        d, s = c.d, c.s
        devices = [x for x in gpu_devices(d) if "/mig" not in x]
        shares = []
        for x in devices:
            mem, total_tr = d.trace("gpu.mem", x), d.trace("gpu.mem.total", x)
            own = d.trace("gpu.proc_util", x) is not None
            signal = "gpu.proc_util" if own else "gpu.util"
            util = d.trace(signal, x)
            if mem is None or total_tr is None or util is None or not total_tr.v[-1] > 0:
                return None  # a GPU it cannot judge: no finding rather than a guess
            mask = d.training(util)
            if int(util.n[mask].sum()) < s.min_samples:
                return None
            shares.append((x, mem.peak(), float(total_tr.v[-1]), signal, util, mask))
        if not shares:
            return None
        x, peak, total, signal, util, mask = max(shares, key=lambda p: p[1] / p[2])
        means = [u.mean(m) for *_, u, m in shares]
        p95s = [float(np.percentile(u.v[m], 95)) for *_, u, m in shares]
        util_mean = max(means)
        fit_time = math.floor(100.0 / util_mean) if util_mean > 0 else MIG_COMPUTE_SLICES
        fit_mem = math.floor(total / peak) if peak > 0 else MIG_COMPUTE_SLICES
        model = match_gpu(total, c.catalog)
        need = peak * (1.0 + s.rightsize_headroom_pct / 100.0)
        slices = [] if model is None else mig_options(model, need, max(p95s))
        return PackFit(
            peak_bytes=peak,
            total_bytes=total,
            util_mean_pct=util_mean,
            util_p95_pct=max(p95s),
            signal=signal,
            gpus=len(shares),
            per_gpu=min(MIG_COMPUTE_SLICES, fit_time, fit_mem),
            gpu_model=None if model is None else model.label,
            mig=min(slices, key=lambda o: (o.memory, o.price), default=None),
            t0=float(util.t[mask].min()),
            t1=float(util.t[mask].max()),
            metric=signal,
            device=x,
        )

    def judge(self, m: PackFit, s: FindingSettings) -> Severity | None:
        small = m.peak_pct < s.pack_mem_pct and m.util_mean_pct < s.pack_util_pct
        return "moderate" if small and m.per_gpu >= 2 else None

    def say(self, m: PackFit, s: FindingSettings, severity: Severity) -> Said:
        whose = (
            "the trial's processes used"
            if m.signal == "gpu.proc_util"
            else "the GPU (all its processes, the trial's own share unknown) was busy"
        )
        where = f"GPU {m.device}" if m.gpus == 1 else f"GPU {m.device} (the fullest of {m.gpus})"
        mig_txt = ""
        if m.mig is not None:
            mig_txt = (
                f", or each run on a {m.mig.label} slice ({size(m.mig.memory)}: the peak with "
                f"{pct(s.rightsize_headroom_pct)} headroom)"
            )
        mig = None
        if m.mig is not None:
            mig = {**m.mig.to_dict(), "profile": m.mig.key.split(":", 1)[1]}
        return Said(
            f"Pack trials: {m.per_gpu} like this one fit on one GPU",
            f"While training on {where}, {whose} {pct(m.util_mean_pct)} of the time on average "
            f"and the trial held at most {size(m.peak_bytes)} of {size(m.total_bytes)} "
            f"({pct(m.peak_pct)}): {m.per_gpu} such trials could share one GPU{mig_txt}.",
            {
                "peak_bytes": m.peak_bytes,
                "total_bytes": m.total_bytes,
                "peak_pct": m.peak_pct,
                "util_mean_pct": m.util_mean_pct,
                "util_p95_pct": m.util_p95_pct,
                "signal": m.signal,
                "gpus": m.gpus,
                "per_gpu": m.per_gpu,
                "gpu_model": m.gpu_model,
                "mig": mig,
                "mem_threshold_pct": s.pack_mem_pct,
                "util_threshold_pct": s.pack_util_pct,
                "headroom_pct": s.rightsize_headroom_pct,
            },
            ADVICE_PACK,
        )
