"""A trial's objective: the value(s) a hyperparameter search scored it with, and whether the
search minimizes or maximizes each.

Where they are stored (no field of their own): the value as the scalar ``eval/objective``
(``eval/objective_<i>``, i = 0, 1…, for each value of a multi-objective search), the latest
one counting; the direction as the trial param ``optuna.direction`` (``"minimize"`` or
``"maximize"``; a list of them for a multi-objective search). The Optuna integration writes
both; any code may (``trial.log(**{"eval/objective": v})``, ``params={"optuna.direction":
"minimize"}``). A param of that name that is not a direction is left alone as a plain param.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tunescope.store import Store, TrialInfo

__all__ = ["DIRECTIONS", "DIRECTION_PARAM", "OBJECTIVE_SCALAR", "Objective", "trial_objective"]

OBJECTIVE_SCALAR = "eval/objective"
"""The scalar holding a trial's objective value; ``eval/objective_<i>`` for value i."""
DIRECTION_PARAM = "optuna.direction"
"""The trial param holding the search's direction(s) (a param of the study, not a
hyperparameter, kept under a name no Optuna search space is expected to use)."""
DIRECTIONS = ("minimize", "maximize")

_NUMBERED = re.compile(re.escape(OBJECTIVE_SCALAR) + r"_(\d+)")


@dataclass(frozen=True)
class Objective:
    """``values``: the latest value of each objective (empty when none was recorded);
    ``directions``: ``minimize``/``maximize`` for each (empty when unknown)."""

    values: tuple[float, ...] = ()
    directions: tuple[str, ...] = ()

    def text(self) -> str:
        """``0.0123 (minimize)``; ``0.1, 0.9 (minimize, maximize)``; ``-`` without a value."""
        if not self.values:
            return "-"
        shown = ", ".join(f"{v:.6g}" for v in self.values)
        return f"{shown} ({', '.join(self.directions)})" if self.directions else shown


def _directions(trial: TrialInfo) -> tuple[str, ...]:
    raw = trial.params.get(DIRECTION_PARAM)
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    if not items or not all(isinstance(d, str) and d in DIRECTIONS for d in items):
        return ()
    return tuple(items)


def trial_objective(store: Store, trial: TrialInfo) -> Objective:
    """The trial's objective value(s), the latest of each, and direction(s)."""
    names = store.scalar_names(trial.id)
    numbered = sorted(
        (int(m.group(1)), n) for n in names if (m := _NUMBERED.fullmatch(n)) is not None
    )
    if OBJECTIVE_SCALAR in names:
        chosen = [OBJECTIVE_SCALAR]
    else:  # eval/objective_0, _1… in order, while they run without a hole
        chosen = [n for k, (i, n) in enumerate(numbered) if i == k]
    values = []
    for name in chosen:
        latest = max(store.scalars(trial.id, name), key=lambda s: s.t, default=None)
        if latest is not None:
            values.append(latest.value)
    directions = _directions(trial)
    if directions and len(directions) != len(values) and values:
        directions = ()  # they do not describe these values: say nothing rather than wrong
    return Objective(tuple(values), directions)
