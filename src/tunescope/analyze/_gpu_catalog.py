"""The GPU catalog: common data-centre GPUs with their memory, an hourly price per GPU, their
MIG profiles and memory bandwidth, and the prices a caller sets.

The default prices are rough on-demand cloud prices (USD per GPU-hour, rounded); they vary by
provider, region, commitment and month, so set your own (:func:`gpu_catalog`, or
``tunescope report --price KEY=USD``). MIG slices are priced as their share of the GPU's
compute (``g``/7 of its price) and hold ``m``/8 of its memory, as NVIDIA's profiles do.

Read by the right-size and packing findings, the serving findings (a GPU's bandwidth), usage
(a device's model by its memory, for prices) and the sizing of a serving workload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tunescope.analyze._text import GIB, MIB
from tunescope.errors import ConfigError

__all__ = [
    "GB",
    "GPU_CATALOG",
    "MATCH_TOLERANCE",
    "MIG_COMPUTE_SLICES",
    "MIG_MEMORY_SLICES",
    "GpuOption",
    "GpuType",
    "MigProfile",
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
class GpuOption:
    """A GPU of the catalog (``kind`` ``gpu``) or a MIG slice of one (``mig``): its label,
    key, memory in bytes and price in USD per hour."""

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


def mig_options(g: GpuType, need: float, util_pct: float) -> list[GpuOption]:
    """The MIG slices of ``g`` (the whole GPU left out) that hold ``need`` bytes and whose
    share of the SMs is at least ``util_pct`` % of the GPU's, priced at that share."""
    out = []
    for p in g.mig:
        if p.compute == MIG_COMPUTE_SLICES:
            continue  # the whole GPU
        mem = g.memory * p.memory / MIG_MEMORY_SLICES
        if mem >= need and p.compute / MIG_COMPUTE_SLICES >= util_pct / 100.0:
            out.append(
                GpuOption(
                    f"{g.label} MIG {p.name}",
                    f"{g.key}:{p.name}",
                    "mig",
                    mem,
                    g.price * p.compute / MIG_COMPUTE_SLICES,
                )
            )
    return out


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
