"""Right-sizing: the cheapest GPU of a catalog, or MIG slice, that holds the trial's peak GPU
memory with headroom, and what the trial would have cost on it.

The catalog lists common data-centre GPUs with their memory and an hourly price per GPU. The
default prices are rough on-demand cloud prices (USD per GPU-hour, rounded); they vary by
provider, region, commitment and month, so set your own (:func:`gpu_catalog`, or
``tunescope report --price KEY=USD``). MIG slices are priced as their share of the GPU's
compute (``g``/7 of its price) and hold ``m``/8 of its memory, as NVIDIA's profiles do.

Estimate of the saving per run: (price of the current GPU - price of the recommended one) x
GPUs x the trial's duration. It assumes the trial takes as long on the recommended GPU, which
holds for memory but not for compute: a GPU with fewer SMs is slower on compute-bound work
(the finding says so when utilization is high).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tunescope.analyze._data import TrialData
from tunescope.analyze._finding import Severity
from tunescope.analyze._rule import Case, Measured, Rule, Said, gpu_devices
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._summary import trial_duration
from tunescope.analyze._text import GIB, MIB, pct, size
from tunescope.errors import ConfigError

__all__ = [
    "GPU_CATALOG",
    "MIG_COMPUTE_SLICES",
    "MIG_MEMORY_SLICES",
    "GpuType",
    "MigProfile",
    "RightSize",
    "describe_catalog",
    "gpu_catalog",
    "match_gpu",
    "mig_options",
    "parse_prices",
]


GB = 1e9
"""A gigabyte (memory bandwidths are given in GB/s)."""

MIG_COMPUTE_SLICES = 7
"""A MIG-capable GPU's compute is cut into 7 slices (a ``g`` profile has g of them) and its
memory into 8 (an ``m`` profile has m of them): NVIDIA Multi-Instance GPU User Guide,
"Supported MIG Profiles" (A100, H100, H200, B200 alike). The unit the catalog's profiles are
written in, not a threshold: it changes only with the catalog."""
MIG_MEMORY_SLICES = 8
"""See :data:`MIG_COMPUTE_SLICES`."""


@dataclass(frozen=True)
class MigProfile:
    """A MIG profile: ``name`` as nvidia-smi shows it, ``compute`` sevenths of the SMs,
    ``memory`` eighths of the memory."""

    name: str
    compute: int
    memory: int


@dataclass(frozen=True)
class GpuType:
    """One GPU model: ``key`` to name it (``h100-80gb``), its label, memory in bytes (as NVML
    reports it), price in USD per GPU-hour, MIG profiles (empty: no MIG) and peak memory
    bandwidth in bytes per second (NVIDIA's datasheet; None: not known)."""

    key: str
    label: str
    memory: float
    price: float
    mig: tuple[MigProfile, ...] = ()
    bandwidth: float | None = None


def _mig(*profiles: tuple[str, int, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(n, c, m) for n, c, m in profiles)


_A100_40 = _mig(
    ("1g.5gb", 1, 1), ("2g.10gb", 2, 2), ("3g.20gb", 3, 4), ("4g.20gb", 4, 4), ("7g.40gb", 7, 8)
)
_A100_80 = _mig(
    ("1g.10gb", 1, 1), ("2g.20gb", 2, 2), ("3g.40gb", 3, 4), ("4g.40gb", 4, 4), ("7g.80gb", 7, 8)
)
_H100 = _mig(
    ("1g.10gb", 1, 1),
    ("1g.20gb", 1, 2),
    ("2g.20gb", 2, 2),
    ("3g.40gb", 3, 4),
    ("4g.40gb", 4, 4),
    ("7g.80gb", 7, 8),
)
_H200 = _mig(
    ("1g.18gb", 1, 1),
    ("1g.35gb", 1, 2),
    ("2g.35gb", 2, 2),
    ("3g.71gb", 3, 4),
    ("4g.71gb", 4, 4),
    ("7g.141gb", 7, 8),
)
_B200 = _mig(
    ("1g.23gb", 1, 1),
    ("1g.45gb", 1, 2),
    ("2g.45gb", 2, 2),
    ("3g.90gb", 3, 4),
    ("4g.90gb", 4, 4),
    ("7g.180gb", 7, 8),
)

GPU_CATALOG: tuple[GpuType, ...] = (
    GpuType("t4", "NVIDIA T4 16GB", 15360 * MIB, 0.35, bandwidth=320 * GB),
    GpuType("l4", "NVIDIA L4 24GB", 23034 * MIB, 0.80, bandwidth=300 * GB),
    GpuType("a10g", "NVIDIA A10G 24GB", 23028 * MIB, 1.00, bandwidth=600 * GB),
    GpuType("l40s", "NVIDIA L40S 48GB", 46068 * MIB, 1.90, bandwidth=864 * GB),
    GpuType("a100-40gb", "NVIDIA A100 40GB", 40960 * MIB, 3.00, _A100_40, 1555 * GB),
    GpuType("a100-80gb", "NVIDIA A100 80GB", 81920 * MIB, 4.00, _A100_80, 2039 * GB),
    GpuType("h100-80gb", "NVIDIA H100 80GB", 81559 * MIB, 7.00, _H100, 3350 * GB),
    GpuType("h200", "NVIDIA H200 141GB", 143771 * MIB, 8.50, _H200, 4800 * GB),
    GpuType("b200", "NVIDIA B200 180GB", 183359 * MIB, 11.00, _B200, 8000 * GB),
)
"""The default catalog; prices in USD per GPU-hour (see the module doc); bandwidths from
NVIDIA's datasheets (SXM parts for A100, H100, H200 and B200)."""

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

MATCH_TOLERANCE = 0.03
"""A device matches a catalog GPU when their memory sizes differ by at most this share."""


def gpu_catalog(
    prices: Mapping[str, float] | None = None, base: tuple[GpuType, ...] = GPU_CATALOG
) -> tuple[GpuType, ...]:
    """The catalog with the hourly prices in ``prices`` (GPU key -> USD per GPU-hour).
    ConfigError for an unknown key or a price that is not a finite number >= 0."""
    if not prices:
        return base
    known = {g.key: g for g in base}
    for key, price in prices.items():
        if key not in known:
            raise ConfigError(f"unknown GPU {key!r} in prices; known: {', '.join(known)}")
        if (
            isinstance(price, bool)
            or not isinstance(price, int | float)
            or not math.isfinite(price)
            or price < 0
        ):
            raise ConfigError(
                f"price of {key} must be a number >= 0 (USD per GPU-hour), not {price!r}"
            )
    return tuple(replace(g, price=float(prices[g.key])) if g.key in prices else g for g in base)


def parse_prices(items: list[str]) -> dict[str, float]:
    """``KEY=USD`` pairs (a GPU: a catalog key, or for usage a model name; USD per GPU-hour)
    into a dict; ConfigError names a malformed item or a key given twice (prices are checked
    for range where they are used: :func:`gpu_catalog`, ``check_query``)."""
    out: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        try:
            price = float(raw)
        except ValueError:
            price = float("nan")
        if not sep or not key.strip() or price != price:
            raise ConfigError(
                f"malformed --price {item!r}: expected GPU=USD_PER_HOUR, e.g. h100-80gb=2.49"
            )
        if key.strip() in out:
            raise ConfigError(f"--price {key.strip()!r} given twice")
        out[key.strip()] = price
    return out


def match_gpu(memory_total: float, catalog: tuple[GpuType, ...] = GPU_CATALOG) -> GpuType | None:
    """The catalog GPU whose memory is nearest ``memory_total`` (bytes), None when none is
    within :data:`MATCH_TOLERANCE`."""
    best = min(catalog, key=lambda g: abs(g.memory - memory_total), default=None)
    if best is None or abs(best.memory - memory_total) > MATCH_TOLERANCE * best.memory:
        return None
    return best


@dataclass(frozen=True)
class _Option:
    label: str
    key: str
    kind: str
    memory: float
    price: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "kind": self.kind,
            "memory_bytes": self.memory,
            "price_per_hour": self.price,
        }


def mig_options(g: GpuType, need: float, util_pct: float) -> list[_Option]:
    """The MIG slices of ``g`` (the whole GPU left out) that hold ``need`` bytes and whose
    share of the SMs is at least ``util_pct`` % of the GPU's, priced at that share."""
    out = []
    for p in g.mig:
        if p.compute == MIG_COMPUTE_SLICES:
            continue  # the whole GPU
        mem = g.memory * p.memory / MIG_MEMORY_SLICES
        if mem >= need and p.compute / MIG_COMPUTE_SLICES >= util_pct / 100.0:
            out.append(
                _Option(
                    f"{g.label} MIG {p.name}",
                    f"{g.key}:{p.name}",
                    "mig",
                    mem,
                    g.price * p.compute / MIG_COMPUTE_SLICES,
                )
            )
    return out


def _options(
    catalog: tuple[GpuType, ...], need: float, util_p95: float, mig_ok: bool
) -> list[_Option]:
    out = [_Option(g.label, g.key, "gpu", g.memory, g.price) for g in catalog if g.memory >= need]
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
    best: _Option
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


def describe_catalog(catalog: tuple[GpuType, ...] = GPU_CATALOG) -> list[dict[str, Any]]:
    """The catalog as JSON values (for the docs and the API)."""
    return [
        {
            "key": g.key,
            "label": g.label,
            "memory_gib": round(g.memory / GIB, 1),
            "price_per_hour": g.price,
            "mig": [p.name for p in g.mig],
            "bandwidth_gb_s": None if g.bandwidth is None else round(g.bandwidth / GB),
        }
        for g in catalog
    ]
