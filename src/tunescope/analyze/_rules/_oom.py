"""The ``oom`` finding: a trial that ran out of memory, as its recorded end says.

A trial ends ``failed`` with ``out of memory (killed by the kernel)`` when the kernel's OOM
killer ended it (the sampler read its memory cgroup's ``oom_kill`` counter and the exit
signal), and with ``out of memory (CUDA)...`` when ``torch.cuda.OutOfMemoryError`` ended it
(see ``tunescope/_protocol.py``). The finding shows the memory series' last minute before the
end (``cpu.mem`` for the kernel's kill; for CUDA the torch allocator's ``torch.mem.allocated``,
else ``gpu.mem``, on the device that held the most) and gives the advice of the near-OOM rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunescope._protocol import OOM_CUDA, OOM_KERNEL
from tunescope.analyze._rules._finding import Severity
from tunescope.analyze._rules._input import ADVICE_CPU_MEM
from tunescope.analyze._rules._rule import Case, Measured, Rule, Said
from tunescope.analyze._rules._utilization import ADVICE_GPU_OOM
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._text import size

__all__ = ["MAX_EVIDENCE_POINTS", "OutOfMemory"]

MAX_EVIDENCE_POINTS = 240
"""At most this many (t, bytes) points of that minute in the evidence (the last ones)."""


@dataclass(frozen=True, kw_only=True)
class OomEnd:
    """How the trial ran out of memory (``kind``: ``kernel`` or ``cuda``), its recorded
    reason, and the memory series' points over the window before the end
    (``oom_window_s``: the last minute)."""

    kind: str
    reason: str
    end: float
    window_s: float
    points: tuple[tuple[float, float], ...]
    limit_bytes: float | None


@dataclass(frozen=True, kw_only=True)
class OomMeasured(Measured):
    oom: OomEnd

    @property
    def peak_bytes(self) -> float | None:
        return max((v for _t, v in self.oom.points), default=None)


class OutOfMemory(Rule[OomMeasured]):
    key = "oom"
    title = "Out of memory"
    severities = ("high",)
    uses = (FindingSettings.oom_window_s,)
    metrics = ("cpu.mem", "cpu.mem.limit", "torch.mem.allocated", "gpu.mem")
    summary = (
        "The trial ran out of memory: the kernel's OOM killer ended it, or a CUDA "
        "out-of-memory error did."
    )
    advice = ADVICE_CPU_MEM + ADVICE_GPU_OOM

    def measure(self, c: Case) -> OomMeasured | None:
        window = c.s.oom_window_s
        info = c.d.trial
        error = info.error or ""
        if info.state != "failed":
            return None
        if error.startswith(OOM_KERNEL):
            kind, candidates = "kernel", ["cpu.mem"]
        elif error.startswith(OOM_CUDA):
            kind, candidates = "cuda", ["torch.mem.allocated", "gpu.mem"]
        else:
            return None
        end = info.end if info.end is not None else info.heartbeat or info.start
        best: tuple[float, str, str | None, tuple[tuple[float, float], ...]] | None = None
        for metric in candidates:
            for device in c.d.devices(metric):
                tr = c.d.trace(metric, device)
                if tr is None:
                    continue
                keep = (tr.t >= end - window) & (tr.t <= end + 1.0)
                pts = tuple(
                    (float(t), float(v)) for t, v in zip(tr.t[keep], tr.hi[keep], strict=True)
                )[-MAX_EVIDENCE_POINTS:]
                peak = max((v for _t, v in pts), default=-math.inf)
                if pts and (best is None or peak > best[0]):
                    best = (peak, metric, device, pts)
            if best is not None:
                break  # the allocator's own series, when the trial has it
        limit = None
        if kind == "kernel":
            lim = c.d.trace("cpu.mem.limit")
            if lim is not None and len(lim) and np.isfinite(lim.v[-1]):
                limit = float(lim.v[-1])
        metric = best[1] if best is not None else candidates[0]
        return OomMeasured(
            oom=OomEnd(
                kind=kind,
                reason=error,
                end=end,
                window_s=window,
                points=best[3] if best is not None else (),
                limit_bytes=limit,
            ),
            t0=end - window,
            t1=end,
            metric=metric,
            device=best[2] if best is not None else None,
        )

    def judge(self, m: OomMeasured, s: FindingSettings) -> Severity | None:
        return "high"

    def say(self, m: OomMeasured, s: FindingSettings, severity: Severity) -> Said:
        o = m.oom
        peak = m.peak_bytes
        advice: tuple[str, ...]
        held = f"; in its last minute it held up to {size(peak)}" if peak is not None else ""
        if o.kind == "kernel":
            title = "Out of memory: the kernel's OOM killer ended the trial"
            limit = f" of the {size(o.limit_bytes)} it may use" if o.limit_bytes else ""
            message = (
                f"The trial's memory cgroup ran out and the kernel killed it{held}{limit}. "
                "Nothing of the training's own shutdown ran."
            )
            advice = ADVICE_CPU_MEM
        else:
            title = "Out of memory (CUDA): the GPU memory ran out"
            where = "" if m.device is None else f" on GPU {m.device}"
            message = f"torch.cuda.OutOfMemoryError ended the trial{where}{held} ({o.reason})."
            advice = ADVICE_GPU_OOM
        evidence: dict[str, Any] = {
            "kind": o.kind,
            "reason": o.reason,
            "end": o.end,
            "window_s": o.window_s,
            "metric": m.metric,
            "device": m.device,
            "last_minute": [[t, v] for t, v in o.points],
            "peak_bytes": peak,
            "limit_bytes": o.limit_bytes,
        }
        return Said(title, message, evidence, advice)
