"""bench-peers' step call (``bench/bench_peers.py``'s :class:`StepCall`): the statement runs
as a user writes it, with ``step`` bound, once per timed or untimed call and ``n`` times in a
batch over consecutive steps; the timings are nanosecond counts of that statement alone."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_peers import FLOORS, StepCall


def test_the_statement_runs_with_its_step_each_way() -> None:
    seen: list[tuple[str, int]] = []
    call = StepCall('seen.append(("loss", step))', {"seen": seen})
    ns = call.timed(7)
    call.call(8)
    batch_ns = call.batched(100, 3)
    assert seen == [("loss", 7), ("loss", 8), ("loss", 100), ("loss", 101), ("loss", 102)]
    assert isinstance(ns, int) and ns >= 0
    assert isinstance(batch_ns, int) and batch_ns >= 0


def test_keywords_reach_the_callee_as_written() -> None:
    got: list[dict[str, Any]] = []

    def log(**values: Any) -> None:
        got.append(values)

    StepCall("log(step=step, loss=1.0 / (step + 1))", {"log": log}).call(3)
    assert got == [{"step": 3, "loss": 0.25}]


def test_the_floors_compile_and_run_on_their_own() -> None:
    for stmt in FLOORS.values():
        assert StepCall(stmt, {}).timed(1) >= 0
