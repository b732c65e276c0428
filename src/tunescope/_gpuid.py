"""Which NVML device a CUDA device is: the one mapping the SDK and the sampler share.

CUDA ordinals are not NVML indices. CUDA orders devices fastest first unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and renumbers the devices ``CUDA_VISIBLE_DEVICES`` names
(indices, or ``GPU-``/``MIG-`` UUIDs) from 0; NVML numbers every GPU of the machine in PCI bus
order. The device UUID is what both agree on (``torch.cuda.get_device_properties(i).uuid``
on the CUDA side, ``nvmlDeviceGetUUID`` on NVML's), so devices are matched by UUID.

Lives outside :mod:`tunescope.collect` because the SDK (:mod:`tunescope.record`) may not import
the sampler (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["cuda_to_nvml", "nvml_uuids"]


def _bare(uuid: str) -> str:
    u = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if u.startswith(prefix):
            return u[len(prefix) :]
    return u


def cuda_to_nvml(cuda_uuid: object, nvml_uuids: Sequence[str]) -> tuple[int, str] | None:
    """(NVML index, NVML UUID) of the CUDA device whose UUID is ``cuda_uuid``; None when no
    NVML device has it (the caller keeps the CUDA ordinal).

    ``cuda_uuid``: what CUDA says of the device (a ``uuid.UUID`` or its text, with or without
    a ``GPU-``/``MIG-`` prefix, any case); ``nvml_uuids``: the NVML UUIDs in NVML index order
    (:func:`nvml_uuids`, or the sampler's ``GpuInfo.uuid`` values)."""
    if cuda_uuid is None:
        return None
    want = _bare(str(cuda_uuid))
    if not want:
        return None
    for index, uuid in enumerate(nvml_uuids):
        if uuid and _bare(uuid) == want:
            return index, uuid
    return None


def nvml_uuids(nvml: Any = None) -> list[str]:
    """The UUIDs of the machine's GPUs in NVML index order; empty when ``pynvml``, the driver
    or a GPU is missing (never raises). ``nvml``: the ``pynvml`` module (default: import it).
    One init/shutdown of NVML per call: the SDK calls it once per process."""
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            uuid = nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))
            out.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        return out
    except Exception:
        return []
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
