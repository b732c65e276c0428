"""What a finding is, once: a :class:`Rule` holds its metadata (key, title, severities, the
metrics it reads, its advice), the settings it uses (typed references to
:class:`FindingSettings` fields, which carry their sources), how it measures one subject into a
typed result (a :class:`Measured` dataclass), how it judges that result, and the words it says
about it (title, message, evidence, advice: made from the measurement in one place).

A rule runs once per subject: the trial (``each = "trial"``), each GPU the trial holds
(``"gpu"``), or each memory series: CPU memory, then each GPU's (``"memory"``). It finds
nothing when the trial lacks the data it needs: a rule never guesses. Registering a rule is one
line of :data:`FINDINGS` in ``analyze/_rules/__init__.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

from tunescope.analyze._data import TrialData
from tunescope.analyze._gpu_catalog import GpuType
from tunescope.analyze._rules._finding import Finding, RuleInfo, Severity
from tunescope.analyze._settings import FindingSettings, Setting

__all__ = ["Case", "Each", "Measured", "Rule", "Said", "gpu_devices"]

Each = Literal["trial", "gpu", "memory"]
"""What a rule judges one at a time: the trial, each GPU, or each memory series."""


@dataclass(frozen=True, kw_only=True)
class Measured:
    """What every measurement carries: the span it refers to (epoch seconds, None for none)
    and the series the page should select (catalog key, GPU index or None)."""

    t0: float | None
    t1: float | None
    metric: str | None
    device: str | None


@dataclass(frozen=True)
class Said:
    """What a finding says about its measurement: one line, the message with the numbers,
    the evidence (JSON values) and the advice, most effective first."""

    title: str
    message: str
    evidence: dict[str, Any]
    advice: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    """One subject of a rule: the trial's data, the settings, the GPU catalog, and the memory
    series (``metric``) and GPU (``device``) it is about, when it is about one."""

    d: TrialData
    s: FindingSettings
    catalog: tuple[GpuType, ...]
    metric: str | None = None
    device: str | None = None


def gpu_devices(d: TrialData) -> list[str]:
    """GPU indices the trial has series for (utilization or memory), sorted."""
    devs = {x for m in ("gpu.util", "gpu.mem") for x in d.devices(m) if x is not None}
    return sorted(devs, key=lambda x: (len(x), x))


M = TypeVar("M", bound=Measured)


class Rule(ABC, Generic[M]):
    """One finding: its metadata, settings, measurement, judgement and words (module doc)."""

    key: ClassVar[str]
    """The finding's ``rule`` (``input_bound``…); its section in docs/findings.md."""
    title: ClassVar[str]
    severities: ClassVar[tuple[Severity, ...]]
    uses: ClassVar[tuple[Setting, ...]]
    """The settings it reads: ``(FindingSettings.min_samples, ...)``."""
    metrics: ClassVar[tuple[str, ...]]
    summary: ClassVar[str]
    advice: ClassVar[tuple[str, ...]]
    """Every advice it can give (docs/findings.md lists them in its section)."""
    each: ClassVar[Each] = "trial"
    yields_to: ClassVar[tuple[str, ...]] = ()
    """Rules that say it better: a finding of this rule is left out when one of these found
    something on the same device."""

    @property
    def settings(self) -> tuple[str, ...]:
        """The names of the settings it uses."""
        return tuple(s.name for s in self.uses)

    def info(self) -> RuleInfo:
        """The rule as the docs and the page describe it."""
        return RuleInfo(
            self.key,
            self.title,
            self.severities,
            self.settings,
            self.metrics,
            self.summary,
            self.advice,
        )

    def cases(self, d: TrialData, s: FindingSettings, catalog: tuple[GpuType, ...]) -> list[Case]:
        """The subjects it judges in this trial (see :data:`Each`)."""
        if self.each == "trial":
            return [Case(d, s, catalog)]
        gpus = [Case(d, s, catalog, "gpu.mem", x) for x in gpu_devices(d)]
        if self.each == "gpu":
            return gpus
        return [Case(d, s, catalog, "cpu.mem"), *gpus]

    @abstractmethod
    def measure(self, c: Case) -> M | None:
        """The numbers behind the finding; None when the data to judge is missing."""

    @abstractmethod
    def judge(self, m: M, s: FindingSettings) -> Severity | None:
        """The severity of what was measured; None when there is nothing to report."""

    @abstractmethod
    def say(self, m: M, s: FindingSettings, severity: Severity) -> Said:
        """The title, message, evidence and advice of a finding on ``m``."""

    def find(self, c: Case) -> Finding | None:
        """The finding on one subject, None when there is none."""
        m = self.measure(c)
        if m is None:
            return None
        severity = self.judge(m, c.s)
        if severity is None:
            return None
        said = self.say(m, c.s, severity)
        return Finding(
            rule=self.key,
            trial_id=c.d.trial.id,
            severity=severity,
            title=said.title,
            message=said.message,
            evidence=said.evidence,
            t0=m.t0,
            t1=m.t1,
            metric=m.metric,
            device=m.device,
            advice=said.advice,
        )

    def findings(
        self, d: TrialData, s: FindingSettings, catalog: tuple[GpuType, ...]
    ) -> list[Finding]:
        """Its findings in one trial, one per subject at most."""
        return [f for c in self.cases(d, s, catalog) if (f := self.find(c)) is not None]
