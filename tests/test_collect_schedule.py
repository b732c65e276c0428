"""The sampler's schedule (``collect/_loop.py``, ``Sampler.run``) on a clock the test moves:
wake-ups that come late and samples that take long, as a busy machine makes them. Every slot
of the schedule gets a sample or lies inside a recorded ``sampler starved`` gap, and a gap is
recorded only where a slot got none."""

from __future__ import annotations

import itertools
import math
import os
import random
from typing import Any

from tunescope.collect._loop import SPACING, STARVED, Sampler
from tunescope.store import Batch

INTERVAL = 0.2
T0 = 1000.0


class Clock:
    """The sampler's monotonic clock, moved by the test (its wall clock too)."""

    def __init__(self) -> None:
        self.t = T0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.t


class Stop:
    """A stop event whose waits pass on ``clock``: each wait ends ``late()`` seconds after
    its delay; set once the clock reaches ``until``."""

    def __init__(self, clock: Clock, late: Any, until: float) -> None:
        self.clock, self.late, self.until = clock, late, until

    def is_set(self) -> bool:
        return self.clock.t >= self.until

    def wait(self, delay: float) -> bool:
        self.clock.t += delay + self.late()
        return self.is_set()


class Sink:
    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def put(self, batch: Batch) -> None:
        self.batches.append(batch)


def run(late: Any, takes: Any, seconds: float) -> tuple[list[float], list[tuple[float, float]]]:
    """Run a sampler of this process for ``seconds`` on the test's clock, each sample taking
    ``takes()`` seconds; its sample times and its starved gaps (start, end), on the
    monotonic axis."""
    clock, sink = Clock(), Sink()
    s = Sampler(sink, "k", os.getpid(), INTERVAL, wall=clock.wall, mono=clock.mono)
    read = s.host.sample

    def slow(mono: float) -> dict[str, float]:
        out = read(mono)
        clock.t += takes()
        return out

    s.host.sample = slow  # type: ignore[method-assign]
    s.run(Stop(clock, late, T0 + seconds))  # type: ignore[arg-type]
    s.host.close()
    times = sorted({r[3] for b in sink.batches for r in b.samples})
    gaps = [
        (e[1], e[1] + (e[4] or 0.0))
        for b in sink.batches
        for e in b.events
        if e[0] == "sampler_gap"
    ]
    assert all(e[2] == STARVED for b in sink.batches for e in b.events)
    return times, gaps


def slots(times: list[float]) -> list[int]:
    return [math.floor((t - T0) / INTERVAL + 1e-6) for t in times]


def assert_accounted(times: list[float], gaps: list[tuple[float, float]]) -> None:
    """Every slot from the first sample's to the last's got a sample or lies inside a gap,
    each gap spans two samples with at least one empty slot between them, and no sample
    follows another by less than SPACING intervals."""
    got = slots(times)
    assert len(got) == len(set(got)), "two samples in one slot"
    for k in range(got[-1] + 1):
        start = T0 + k * INTERVAL
        assert k in got or any(a < start and start + INTERVAL <= b + 1e-9 for a, b in gaps), (
            f"slot {k} has no sample and no gap"
        )
    for a, b in gaps:
        assert a in times and b in times
        assert slots([b])[0] - slots([a])[0] >= 2, (a, b)
    spacing = [b - a for a, b in itertools.pairwise(times)]
    assert min(spacing) >= SPACING * INTERVAL - 1e-9


def test_late_wake_ups_and_slow_samples_cost_no_slot() -> None:
    """Every other wake-up 0.9 of an interval late and each sample taking 0.15 of one (the
    late sample ends in the next slot): each slot still gets its sample, and nothing is
    recorded as starved."""
    lates = iter([0.0, 0.9 * INTERVAL] * 1000)
    times, gaps = run(lambda: next(lates), lambda: 0.15 * INTERVAL, 20.0)
    assert gaps == []
    assert slots(times) == list(range(len(times)))
    assert len(times) >= 0.9 * 20.0 / INTERVAL
    assert_accounted(times, gaps)


def test_a_stall_is_recorded_over_the_slots_it_cost() -> None:
    """One wake-up 3.5 intervals late: the slots it passes over lie in one starved gap from
    the sample before it to the sample after; the schedule goes on after it, every slot
    sampled."""
    lates = iter([0.0] * 10 + [3.5 * INTERVAL] + [0.0] * 1000)
    times, gaps = run(lambda: next(lates), lambda: 0.0, 6.0)
    assert len(gaps) == 1
    a, b = gaps[0]
    assert (slots([a])[0], slots([b])[0]) == (10, 14)
    assert math.isclose(b - a, INTERVAL * 4.5)
    assert_accounted(times, gaps)
    assert slots(times)[-1] - 14 == len([t for t in times if t > b])


def test_a_busy_machine_leaves_no_slot_unaccounted() -> None:
    """Random lateness (mostly small, now and then a whole interval or three) and random
    sample durations over 2,000 slots: every slot is sampled or inside a gap, every gap
    holds a slot with no sample, samples never crowd."""
    rng = random.Random(7)

    def late() -> float:
        return INTERVAL * rng.choice([0.0, 0.05, 0.3, 0.8, 0.99, 1.2, 3.1])

    times, gaps = run(late, lambda: INTERVAL * rng.uniform(0.0, 0.6), 2000 * INTERVAL)
    assert gaps, "the lateness drawn must pass over some slots"
    assert_accounted(times, gaps)
