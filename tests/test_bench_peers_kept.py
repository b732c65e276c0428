"""bench-peers' samples-kept share (``bench/bench_peers.py``'s :func:`kept_share`): a sampler
that keeps its interval scores 1.0 whatever the loop's length and its phase; each sample lost,
inside the loop or at its start, lowers the score by one tick."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_peers import kept_share


@pytest.mark.parametrize("loop_s", [12.0, 20.35, 20.999, 59.5])
@pytest.mark.parametrize("phase", [0.0, 0.001, 0.37, 0.999])
@pytest.mark.parametrize("interval", [1.0, 0.1])
def test_a_sampler_that_keeps_its_interval_scores_one(
    loop_s: float, phase: float, interval: float
) -> None:
    t0 = 1_780_000_000.0
    t = np.round(
        t0 - 3 * interval + phase * interval + np.arange(0, loop_s / interval + 6) * interval, 3
    )
    assert kept_share(t, t0, t0 + loop_s, interval) == pytest.approx(1.0)


def test_each_sample_lost_lowers_the_share_by_one_tick() -> None:
    t0, interval = 1_780_000_000.0, 1.0
    t = t0 + 0.4 + np.arange(21.0)  # 20.4 .. in a 20.35 s loop: 20 ticks inside
    t1 = t0 + 20.35
    assert kept_share(t, t0, t1, interval) == pytest.approx(1.0)
    assert kept_share(np.delete(t, 7), t0, t1, interval) == pytest.approx(19 / 20)
    assert kept_share(t[2:], t0, t1, interval) == pytest.approx(18 / 20)  # lost at the start
    assert kept_share(np.array([]), t0, t1, interval) == 0.0
