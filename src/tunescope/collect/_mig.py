"""MIG (Multi-Instance GPU): each instance of a GPU in MIG mode is a device of its own.

:class:`MigSlots` finds, once when NVML opens, the GPUs whose MIG mode is on
(``nvmlDeviceGetMigMode``) and their instances (``nvmlDeviceGetMigDeviceHandleByIndex`` up to
``nvmlDeviceGetMaxMigDeviceCount``). The backend numbers the instances after the GPUs; a GPU in
MIG mode stays in the list, marked ``partitioned``, and is not sampled itself. Series name an
instance ``<gpu>/mig<k>`` (``0/mig1``: MIG device 1 of GPU 0); its UUID (``MIG-...``) is in
its :class:`~tunescope.collect._gpu.GpuInfo`, which ``CUDA_VISIBLE_DEVICES`` may name.

What NVML gives per instance, through its MIG device handle: memory (total and used), the
processes on it with their memory, and GPM metrics (SM, tensor and DRAM activity:
``nvmlGpmMigSampleGet`` on the GPU with the instance's GPU-instance id, Hopper and newer).
What it does not: utilization (``nvmlDeviceGetUtilizationRates`` and per-process utilization
answer NotSupported in MIG mode, so ``gpu.util``, ``gpu.mem_bw.util`` and ``gpu.proc_util``
are absent; ``gpu.sm_active`` is the measure of compute there), and power, energy and the power
limit, which belong to the whole board and are left out rather than charged to one instance.
Temperature, SM clock and throttle reasons are the GPU's, recorded on each of its instances:
every instance runs under them. MIG configuration changed while the sampler runs is not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tunescope.collect._gpu import GpuInfo, GpuReading, _num, _text
from tunescope.collect._gpushare import Query, not_found_as

__all__ = ["NVML_DEVICE_MIG_ENABLE", "MigSlot", "MigSlots"]

NVML_DEVICE_MIG_ENABLE = 1
"""``nvmlDeviceGetMigMode``'s current mode when MIG is on (nvml.h)."""


@dataclass(frozen=True)
class MigSlot:
    """One MIG instance: its GPU's NVML index (``parent``), its MIG device index (``mig``),
    its handle and its GPU's, and its GPU-instance id (None when NVML did not say)."""

    parent: int
    mig: int
    handle: Any
    parent_handle: Any
    gpu_instance: int | None

    def info(self, query: Query, index: int) -> GpuInfo:
        """Its static facts; ``index`` is the backend's number for it."""
        name = _text(query("nvmlDeviceGetName", self.handle, default=f"GPU {self.parent} MIG"))
        uuid = _text(query("nvmlDeviceGetUUID", self.handle, default=""))
        mem = query("nvmlDeviceGetMemoryInfo", self.handle)
        support = query("nvmlGpmQueryDeviceSupport", self.parent_handle)
        return GpuInfo(
            index=index,
            name=name,
            uuid=uuid,
            memory_total=_num(getattr(mem, "total", None)),
            power_limit=None,
            gpm_supported=bool(getattr(support, "isSupportedDevice", 0))
            and self.gpu_instance is not None,
            parent=self.parent,
            mig=self.mig,
        )

    @staticmethod
    def reading(own: GpuReading, board: GpuReading) -> GpuReading:
        """What is recorded for an instance: its own memory, and its GPU's temperature, SM
        clock and throttle reasons (module doc)."""
        return GpuReading(
            mem_used=own.mem_used,
            temp=board.temp,
            clock_sm=board.clock_sm,
            throttle=board.throttle,
        )


@dataclass(frozen=True)
class MigSlots:
    """The GPUs (``gpus``), those in MIG mode, and their instances, numbered after the GPUs."""

    gpus: int
    slots: tuple[MigSlot, ...] = ()
    enabled: frozenset[int] = field(default_factory=frozenset)

    @property
    def count(self) -> int:
        """Devices the backend offers: the GPUs, then the MIG instances."""
        return self.gpus + len(self.slots)

    def slot(self, index: int) -> MigSlot | None:
        """The MIG instance numbered ``index``, None for a GPU."""
        k = index - self.gpus
        return self.slots[k] if 0 <= k < len(self.slots) else None

    def partitioned(self, index: int) -> bool:
        """GPU ``index`` is in MIG mode (its instances are sampled instead)."""
        return index in self.enabled

    def gpm_sample(self, query: Query, index: int, handle: Any, sample: Any) -> Any:
        """Take a GPM sample of device ``index``: of the GPU, or of a MIG instance through
        its GPU and GPU-instance id. None when NVML refused."""
        slot = self.slot(index)
        if slot is None:
            return query("nvmlGpmSampleGet", handle, sample)
        if slot.gpu_instance is None:
            return None
        return query("nvmlGpmMigSampleGet", slot.parent_handle, slot.gpu_instance, sample)

    @classmethod
    def find(cls, query: Query, nvml: Any, gpu_handle: Callable[[int], Any]) -> MigSlots:
        """The GPUs NVML sees and the MIG instances of those in MIG mode."""
        gpus = int(query("nvmlDeviceGetCount", default=0))
        slots: list[MigSlot] = []
        enabled: set[int] = set()
        for i in range(gpus):
            h = gpu_handle(i)
            if h is None or not hasattr(nvml, "nvmlDeviceGetMigMode"):
                continue
            mode = query("nvmlDeviceGetMigMode", h)  # NotSupported: no MIG on this GPU
            if not mode or int(mode[0]) != NVML_DEVICE_MIG_ENABLE:
                continue
            enabled.add(i)
            most = int(query("nvmlDeviceGetMaxMigDeviceCount", h, default=0))
            by_index = not_found_as(None, nvml, "nvmlDeviceGetMigDeviceHandleByIndex")
            for k in range(most):
                mh = query(by_index, h, k)  # NotFound: no instance at k
                if mh is None:
                    continue
                gi = query("nvmlDeviceGetGpuInstanceId", mh)
                slots.append(MigSlot(i, k, mh, h, None if gi is None else int(gi)))
        return cls(gpus, tuple(slots), frozenset(enabled))
