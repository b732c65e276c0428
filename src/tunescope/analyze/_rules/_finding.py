"""The finding record: a diagnosis of one trial, with the numbers behind it, the time span it
refers to, what to select on the page, and advice. Plain, immutable, JSON-able."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SEVERITIES", "Finding", "RuleInfo", "Severity", "jsonable"]

Severity = Literal["high", "moderate", "low"]
SEVERITIES: tuple[Severity, ...] = ("high", "moderate", "low")
"""From most to least urgent. ``high``: act before the next run (an out-of-memory failure is
near, or most of the time is lost); ``moderate``: time or money is lost; ``low``: worth a look
(an opportunity, or a weak signal)."""


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, numpy scalars as Python numbers and non-finite floats
    as None (None means missing, also in JSON)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalar
    if callable(item):
        return jsonable(item())
    return str(value)


@dataclass(frozen=True)
class Finding:
    """One diagnosis of one trial.

    rule: the rule's key (``input_bound``…, see :data:`tunescope.analyze.RULES`).
    severity: ``high``, ``moderate`` or ``low`` (:data:`SEVERITIES`).
    title: one line; message: what was measured, with the numbers.
    evidence: the numbers behind it (JSON values; bytes, %, W and s as in the catalog).
    t0, t1: the span it refers to (epoch seconds), None when it has none.
    metric, device: the series to select on the page (catalog key; GPU index or None).
    advice: what to try, most effective first.
    """

    rule: str
    trial_id: int
    severity: Severity
    title: str
    message: str
    evidence: dict[str, Any]
    t0: float | None
    t1: float | None
    metric: str | None
    device: str | None
    advice: tuple[str, ...]

    @property
    def id(self) -> str:
        """Unique within a store: trial, rule, metric and device."""
        return f"{self.trial_id}:{self.rule}:{self.metric or '-'}:{self.device or '-'}"

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON values (the API's and ``report --format json``'s shape)."""
        return {
            "id": self.id,
            "rule": self.rule,
            "trial_id": self.trial_id,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "evidence": jsonable(self.evidence),
            "t0": jsonable(self.t0),
            "t1": jsonable(self.t1),
            "metric": self.metric,
            "device": self.device,
            "advice": list(self.advice),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        """The finding :meth:`to_dict` gave (findings kept in the store, see
        :func:`tunescope.analyze.compact_raw`)."""
        return cls(
            d["rule"],
            int(d["trial_id"]),
            d["severity"],
            d["title"],
            d["message"],
            dict(d["evidence"]),
            d["t0"],
            d["t1"],
            d["metric"],
            d["device"],
            tuple(d["advice"]),
        )


@dataclass(frozen=True)
class RuleInfo:
    """What a rule diagnoses, for the docs and the page: its key, a title, the severities it
    can give, the settings it reads, the metrics it needs and its advice."""

    key: str
    title: str
    severities: tuple[Severity, ...]
    settings: tuple[str, ...]
    metrics: tuple[str, ...]
    summary: str
    advice: tuple[str, ...] = ()
    """The advice it gives (right-size adds the recommended GPU itself)."""
