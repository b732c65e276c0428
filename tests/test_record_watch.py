"""trial.watch(): data-wait events per batch and the derived train.* samples.

Inside ``tunescope.record._watch`` the clock is a test clock that moves only when the loader
waits or the loop computes, so every wait, step time and request time it records is known
exactly: the tests check what is attributed to what, never how fast this machine is.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import tunescope.record as ts
from tunescope.record import _flush, _watch
from tunescope.store import Event, Store

WAIT = 0.04  # seconds each batch takes to arrive
COMPUTE = 0.02  # seconds the loop works on each batch
EXACT = 1e-9  # float rounding of sums of the steps above


class Clock:
    """Stands in for the ``time`` and ``_clock`` modules of ``tunescope.record._watch``: wall and
    performance-counter time advance together, only through :meth:`advance`. With ``real``
    the real time passes too (for the flusher, which runs on the real clock)."""

    def __init__(self, start: float) -> None:
        self.wall = start
        self.perf = 0.0
        self.real = False

    def time(self) -> float:
        return self.wall

    def now(self) -> float:  # as tunescope._clock.now, the trial's clock
        return self.wall

    def perf_counter(self) -> float:
        return self.perf

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.perf += seconds
        if self.real:
            time.sleep(seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(time.time())
    monkeypatch.setattr(_watch, "time", c)
    monkeypatch.setattr(_watch, "_clock", c)
    return c


class SlowLoader:
    """A data loader whose every batch takes WAIT seconds of ``clock`` to arrive."""

    def __init__(self, clock: Clock, n: int) -> None:
        self.clock = clock
        self.n = n
        self.dataset = list(range(n))

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            self.clock.advance(WAIT)
            yield i


def _waits(db: Store, trial_id: int | None) -> list[Event]:
    assert trial_id is not None
    got = db.events(trial_id, 0.0, time.time() + 60, kinds=["data_wait"], limit=100_000).events
    assert got is not None
    return got


def test_data_wait_durations_and_step_times(sqlite_url: str, db: Store, clock: Clock) -> None:
    loader = SlowLoader(clock, 12)
    seen = []
    start = clock.wall
    with ts.run("watch", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        watched = trial.watch(loader, name="train")
        assert len(watched) == 12  # type: ignore[arg-type]
        assert watched.dataset is loader.dataset  # type: ignore[attr-defined]
        for batch in watched:
            seen.append(batch)
            clock.advance(COMPUTE)
    assert seen == list(range(12))
    got = _waits(db, trial.id)
    assert [e.step for e in got] == list(range(12))
    assert {e.name for e in got} == {"train"}
    # duration: the time inside next() only; value: request to next request (wait + compute)
    assert [e.duration for e in got] == pytest.approx([WAIT] * 12, abs=EXACT)
    assert [e.value for e in got] == pytest.approx([WAIT + COMPUTE] * 12, abs=EXACT)
    # t is when the batch was requested: the first at once, then one step time apart
    assert [e.t for e in got] == pytest.approx(
        [start + k * (WAIT + COMPUTE) for k in range(12)], abs=1e-6
    )


def test_each_pass_counts_from_zero_and_break_records_the_last_batch(
    sqlite_url: str, db: Store, clock: Clock
) -> None:
    with ts.run("passes", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        watched = trial.watch(SlowLoader(clock, 4))
        for _ in range(2):
            for _batch in watched:
                clock.advance(COMPUTE)
        for k, _batch in enumerate(watched):
            clock.advance(COMPUTE)
            if k == 1:
                break
        clock.advance(1.0)  # after the break: not part of the last batch's step
    got = _waits(db, trial.id)
    assert [e.step for e in got] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert [e.duration for e in got] == pytest.approx([WAIT] * 10, abs=EXACT)
    assert [e.value for e in got] == pytest.approx([WAIT + COMPUTE] * 10, abs=EXACT)


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


def test_derived_train_samples(sqlite_url: str, db: Store, clock: Clock) -> None:
    assert _flush.flush_period(0.5) == 0.5
    clock.real = True  # the flusher derives a sample every 0.5 s of real time
    with (
        ts.run("derived", store=sqlite_url, sampler=False, interval=0.5) as run,
        run.trial() as trial,
    ):
        for _ in trial.watch(SlowLoader(clock, 30)):
            clock.advance(COMPUTE)
    assert trial.id is not None
    by_metric = {s.metric: s for s in db.list_series(trial.id)}
    assert {"train.step_time", "train.data_wait"} <= set(by_metric)
    assert "train.throughput" not in by_metric  # no optimizer ever stepped
    _, step_times = db.read_samples(by_metric["train.step_time"].id)
    _, shares = db.read_samples(by_metric["train.data_wait"].id)
    assert len(step_times) >= 2 and len(shares) == len(step_times)
    # every flush: the mean step time and the share of it spent waiting (float32 samples)
    assert step_times.tolist() == pytest.approx([WAIT + COMPUTE] * len(step_times), rel=1e-6)
    assert shares.tolist() == pytest.approx([100 * WAIT / (WAIT + COMPUTE)] * len(shares), rel=1e-6)


def test_watch_outside_a_trial_returns_the_iterable(sqlite_url: str) -> None:
    data = [1, 2, 3]
    with ts.run("unwatched", store=sqlite_url, sampler=False) as run:
        trial = run.trial()
        assert trial.watch(data) is data  # not entered yet
        with trial:
            assert trial.watch(data) is not data
        assert trial.watch(data) is data  # ended
