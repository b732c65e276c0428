"""trial.watch(): data-wait events per batch and the derived train.* samples.

Timing tolerance: ``time.sleep(s)`` sleeps at least ``s``; on a loaded CI machine it may
overrun, so a measured wait must lie in [s - 1 ms, s + 40 ms] and the median within 10 ms.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Iterator

import pytest

import tunescope.record as ts
from tunescope.record import _flush
from tunescope.store import Event, Store

WAIT = 0.04
COMPUTE = 0.02
LOW, HIGH, MEDIAN_TOL = 0.001, 0.040, 0.010


class SlowLoader:
    """A data loader whose every batch takes WAIT seconds to arrive."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.dataset = list(range(n))

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            time.sleep(WAIT)
            yield i


def _waits(db: Store, trial_id: int | None) -> list[Event]:
    assert trial_id is not None
    got = db.events(trial_id, 0.0, time.time() + 60, kinds=["data_wait"], limit=100_000).events
    assert got is not None
    return got


def _near(x: float | None, target: float) -> bool:
    return x is not None and target - LOW <= x <= target + HIGH


def test_data_wait_durations_and_step_times(sqlite_url: str, db: Store) -> None:
    loader = SlowLoader(12)
    seen = []
    with ts.run("watch", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        watched = trial.watch(loader, name="train")
        assert len(watched) == 12  # type: ignore[arg-type]
        assert watched.dataset is loader.dataset  # type: ignore[attr-defined]
        for batch in watched:
            seen.append(batch)
            time.sleep(COMPUTE)
    assert seen == list(range(12))
    got = _waits(db, trial.id)
    assert [e.step for e in got] == list(range(12))
    assert {e.name for e in got} == {"train"}
    assert all(_near(e.duration, WAIT) for e in got), [e.duration for e in got]
    assert all(_near(e.value, WAIT + COMPUTE) for e in got), [e.value for e in got]
    durations = [e.duration for e in got if e.duration is not None]
    values = [e.value for e in got if e.value is not None]
    assert abs(statistics.median(durations) - WAIT) < MEDIAN_TOL
    assert abs(statistics.median(values) - (WAIT + COMPUTE)) < MEDIAN_TOL
    # t is when the batch was requested: consecutive requests one step time apart
    gaps = [b.t - a.t for a, b in itertools.pairwise(got)]
    assert all(_near(g, WAIT + COMPUTE) for g in gaps)


def test_each_pass_counts_from_zero_and_break_records_the_last_batch(
    sqlite_url: str, db: Store
) -> None:
    with ts.run("passes", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        watched = trial.watch(SlowLoader(4))
        for _ in range(2):
            for _batch in watched:
                time.sleep(COMPUTE)
        for k, _batch in enumerate(watched):
            time.sleep(COMPUTE)
            if k == 1:
                break
    got = _waits(db, trial.id)
    assert [e.step for e in got] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert all(_near(e.value, WAIT + COMPUTE) for e in got), [e.value for e in got]


def test_loader_errors_propagate_unchanged(sqlite_url: str, db: Store) -> None:
    def broken() -> Iterator[int]:
        yield 1
        raise OSError("disk gone")

    with ts.run("broken", store=sqlite_url, sampler=False) as run:
        trial = run.trial()
        with pytest.raises(OSError, match="disk gone"), trial:
            for _ in trial.watch(broken()):
                pass
    assert trial.id is not None
    assert db.get_trial(trial.id).state == "failed"
    assert len(_waits(db, trial.id)) == 1


def test_derived_train_samples(sqlite_url: str, db: Store) -> None:
    assert _flush.flush_period(0.5) == 0.5
    with (
        ts.run("derived", store=sqlite_url, sampler=False, interval=0.5) as run,
        run.trial() as trial,
    ):
        for _ in trial.watch(SlowLoader(30)):
            time.sleep(COMPUTE)
    assert trial.id is not None
    by_metric = {s.metric: s for s in db.list_series(trial.id)}
    assert {"train.step_time", "train.data_wait"} <= set(by_metric)
    assert "train.throughput" not in by_metric  # no optimizer ever stepped
    _, step_times = db.read_samples(by_metric["train.step_time"].id)
    _, shares = db.read_samples(by_metric["train.data_wait"].id)
    assert len(step_times) >= 2
    assert abs(statistics.median(step_times.tolist()) - (WAIT + COMPUTE)) < MEDIAN_TOL
    expected_share = 100 * WAIT / (WAIT + COMPUTE)
    assert abs(statistics.median(shares.tolist()) - expected_share) < 15.0
    assert all(0.0 <= s <= 100.0 for s in shares.tolist())


def test_watch_outside_a_trial_returns_the_iterable(sqlite_url: str) -> None:
    data = [1, 2, 3]
    with ts.run("unwatched", store=sqlite_url, sampler=False) as run:
        trial = run.trial()
        assert trial.watch(data) is data  # not entered yet
        with trial:
            assert trial.watch(data) is not data
        assert trial.watch(data) is data  # ended
