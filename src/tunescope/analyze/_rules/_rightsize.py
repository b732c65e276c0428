"""Right-sizing: the cheapest GPU of the catalog (``_gpu_catalog.py``), or MIG slice, that
holds the trial's peak GPU memory with headroom, and what the trial would have cost on it.

Estimate of the saving per run: (price of the current GPU - price of the recommended one) x
GPUs x the trial's duration. It assumes the trial takes as long on the recommended GPU, which
holds for memory but not for compute: a GPU with fewer SMs is slower on compute-bound work
(the finding says so when utilization is high).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope.analyze._data import TrialData
from tunescope.analyze._gpu_catalog import GpuOption, GpuType, match_gpu, mig_options
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said, gpu_devices
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._summary import trial_duration
from tunescope.analyze._text import pct, size

__all__ = ["ADVICE_MIG", "ADVICE_PRICES", "ADVICE_SLOWER", "Fit", "RightSize"]

ADVICE_MIG = (
    "MIG slices share one GPU between jobs: ask your cluster for a MIG profile (e.g. the "
    "nvidia.com/mig-* resources in Kubernetes)."
)
ADVICE_SLOWER = (
    "Time a few hundred steps on the smaller GPU first: with high utilization it may run "
    "slower, which eats into the saving."
)
ADVICE_PRICES = (
    "Prices are defaults (rough on-demand USD per GPU-hour); set yours with --price KEY=USD."
)


def _options(
    catalog: tuple[GpuType, ...], need: float, util_p95: float, mig_ok: bool
) -> list[GpuOption]:
    out = [GpuOption(g.label, g.key, "gpu", g.memory, g.price) for g in catalog if g.memory >= need]
    if mig_ok:
        for g in catalog:
            out.extend(mig_options(g, need, util_p95))
    return out


@dataclass(frozen=True, kw_only=True)
class Fit(Measured):
    """The peak GPU memory of the trial (on the GPU with the highest; span: its series), what
    it needs with headroom, utilization while training, the GPU it ran on (``current``, None
    when not in the catalog) and the cheapest option of the catalog that holds it, with the
    cost of the run on each."""

    peak_bytes: float
    peak_t: float
    needed_bytes: float
    util_mean_pct: float
    util_p95_pct: float
    mig_considered: bool
    gpus: int
    device_memory: float | None
    """The memory of the GPU it ran on (gpu.mem.total), None without that series."""
    current: GpuType | None
    best: GpuOption
    duration_h: float | None

    @property
    def cost_current_usd(self) -> float | None:
        if self.current is None or self.duration_h is None:
            return None
        return self.current.price * self.gpus * self.duration_h

    @property
    def cost_recommended_usd(self) -> float | None:
        return None if self.duration_h is None else self.best.price * self.gpus * self.duration_h

    @property
    def saving_usd(self) -> float | None:
        now, new = self.cost_current_usd, self.cost_recommended_usd
        return None if now is None or new is None else now - new


class RightSize(Rule[Fit]):
    key = "right_size"
    title = "Right-size"
    severities = ("moderate", "low")
    uses = (
        FindingSettings.rightsize_headroom_pct,
        FindingSettings.mig_max_util_pct,
        FindingSettings.rightsize_moderate_price_pct,
        FindingSettings.rightsize_slower_util_pct,
        FindingSettings.min_samples,
    )
    metrics = ("gpu.mem", "gpu.mem.total", "gpu.util")
    summary = (
        "The cheapest GPU of a catalog, or MIG slice when utilization stays low, that "
        "holds the peak GPU memory with headroom, and the saving per run."
    )
    advice = (ADVICE_SLOWER, ADVICE_MIG, ADVICE_PRICES)

    def measure(self, c: Case) -> Fit | None:
        d, s = c.d, c.s
        devices = [x for x in gpu_devices(d) if d.trace("gpu.mem", x) is not None]
        if not devices:
            return None
        traces = {x: tr for x in devices if (tr := d.trace("gpu.mem", x)) is not None}
        device = max(traces, key=lambda x: traces[x].peak())
        mem = traces[device]
        peak = mem.peak()
        need = peak * (1.0 + s.rightsize_headroom_pct / 100.0)
        utils: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        for x in devices:
            tr = d.trace("gpu.util", x)
            if tr is not None:
                m = d.training(tr)
                utils.append(tr.v[m] if m.any() else tr.v)
        if not utils or sum(len(u) for u in utils) < s.min_samples:
            return None
        allu = np.concatenate(utils)
        util_p95 = float(np.percentile(allu, 95))
        mig_ok = util_p95 <= s.mig_max_util_pct
        options = _options(c.catalog, need, util_p95, mig_ok)
        if not options:
            return None
        total_tr = d.trace("gpu.mem.total", device)
        memory = None if total_tr is None else float(total_tr.v[-1])
        return Fit(
            peak_bytes=peak,
            peak_t=float(mem.t[int(np.argmax(mem.hi))]),
            needed_bytes=need,
            util_mean_pct=float(allu.mean()),
            util_p95_pct=util_p95,
            mig_considered=mig_ok,
            gpus=len(devices),
            device_memory=memory,
            current=None if memory is None else match_gpu(memory, c.catalog),
            best=min(options, key=lambda o: (o.price, o.memory)),
            duration_h=_hours(d),
            t0=float(mem.t[0]),
            t1=float(mem.t[-1]),
            metric="gpu.mem",
            device=device,
        )

    def judge(self, m: Fit, s: FindingSettings) -> Severity | None:
        best, current = m.best, m.current
        if current is not None and (best.price >= current.price or best.key == current.key):
            return None  # nothing cheaper
        if current is None and m.device_memory is not None and best.memory >= m.device_memory:
            return None  # nothing smaller
        cheap = (
            current is not None
            and best.price <= s.rightsize_moderate_price_pct / 100.0 * current.price
        )
        return "moderate" if cheap else "low"

    def say(self, m: Fit, s: FindingSettings, severity: Severity) -> Said:
        best, current, saving = m.best, m.current, m.saving_usd
        slower = m.util_mean_pct >= s.rightsize_slower_util_pct
        now_txt = (
            "an unidentified GPU"
            if current is None
            else f"{current.label} (${current.price:.2f}/h)"
        )
        cost_txt = (
            ""
            if saving is None
            else f", saving about ${saving:.2f} per run ({m.gpus} GPU(s) x {m.duration_h:.2f} h)"
        )
        caveat = ""
        if slower and best.kind == "gpu":
            caveat = (
                f" Utilization averaged {pct(m.util_mean_pct)}: a smaller GPU may take longer, "
                "so the saving assumes the same run time."
            )
        advice = [
            f"Run this trial on {best.label} ({size(best.memory)}, ${best.price:.2f}/h per "
            f"{'slice' if best.kind == 'mig' else 'GPU'})."
        ]
        if best.kind == "mig":
            advice.append(ADVICE_MIG)
        elif slower:
            advice.append(ADVICE_SLOWER)
        advice.append(ADVICE_PRICES)
        return Said(
            f"Right-size: {best.label} would do",
            f"Peak GPU memory was {size(m.peak_bytes)} (GPU {m.device}); with "
            f"{pct(s.rightsize_headroom_pct)} headroom it needs {size(m.needed_bytes)}, which "
            f"{best.label} holds ({size(best.memory)}). The trial ran on {now_txt}"
            f"{cost_txt}.{caveat}",
            {
                "peak_bytes": m.peak_bytes,
                "peak_t": m.peak_t,
                "needed_bytes": m.needed_bytes,
                "headroom_pct": s.rightsize_headroom_pct,
                "util_mean_pct": m.util_mean_pct,
                "util_p95_pct": m.util_p95_pct,
                "mig_considered": m.mig_considered,
                "gpus": m.gpus,
                "current": None
                if current is None
                else {
                    "key": current.key,
                    "label": current.label,
                    "memory_bytes": current.memory,
                    "price_per_hour": current.price,
                },
                "recommended": best.to_dict(),
                "duration_h": m.duration_h,
                "cost_current_usd": m.cost_current_usd,
                "cost_recommended_usd": m.cost_recommended_usd,
                "saving_usd": saving,
                "assumes_same_runtime": True,
            },
            tuple(advice),
        )


def _hours(d: TrialData) -> float | None:
    duration = trial_duration(d.trial)
    if duration is None or not duration > 0:
        return None
    return duration / 3600.0
