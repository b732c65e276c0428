"""The one bounded cache (`tunescope._kept.Kept`): at most `size` entries, the least recently
used forgotten first, each call atomic across threads; and the long-lived parts that use it
stay bounded and right once it forgets."""

from __future__ import annotations

import threading
import time

import pytest

from tunescope._kept import Kept
from tunescope.store import Batch, TrialSpec, new_key, open_store
from tunescope.store.sql import _sql


def test_it_forgets_the_least_recently_used_first() -> None:
    kept: Kept[str, int] = Kept(3)
    for i, k in enumerate("abc"):
        kept.put(k, i)
    assert kept.get("a") == 0  # a used: b is now the oldest
    kept.put("d", 3)
    assert len(kept) == 3 and "b" not in kept and kept.get("b") is None
    assert [kept.get(k) for k in "acd"] == [0, 2, 3]
    assert kept.setdefault("c", lambda: 99) == 2  # kept: not made again
    assert kept.setdefault("e", lambda: 4) == 4  # a is the oldest now (c, d, then e)
    assert "a" not in kept and len(kept) == 3
    assert kept.pop("e") == 4 and kept.pop("e") is None and len(kept) == 2
    kept.clear()
    assert len(kept) == 0


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        Kept(0)


def test_threads_putting_at_once_never_overfill_it_and_setdefault_makes_one() -> None:
    kept: Kept[int, object] = Kept(50)
    made: list[object] = []
    start = threading.Barrier(8)

    def make() -> object:
        made.append(object())
        return made[-1]

    def work(k: int) -> None:
        start.wait()
        for i in range(2000):
            kept.put(k * 10_000 + i, i)
            kept.setdefault(-1, make)  # the shared key is used constantly: never forgotten
            assert len(kept) <= 50

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(kept) == 50 and len(made) == 1 and kept.get(-1) is made[0]


def test_a_store_with_tiny_caches_still_finds_every_trial_and_series(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store forgets ids once its caches are full (CACHE_SIZE, here 3) and looks them up
    again: many trials written in turn land each in its own series; and what it packed it no
    longer holds for close() (a server's store lives for months)."""
    monkeypatch.setattr(_sql, "CACHE_SIZE", 3)
    url = f"sqlite:///{tmp_path}/kept.db"
    specs = [
        TrialSpec(key=new_key(), run="r", name=f"t{i}", start=1e9, interval=1.0) for i in range(6)
    ]
    with open_store(url) as st:
        assert isinstance(st, _sql.SQLStore)
        for k in range(3):
            for i, sp in enumerate(specs):
                rows = tuple((f"m{j}", None, None, 1e9 + k, float(i * 10 + j)) for j in range(4))
                st.write(Batch(sp.key, spec=sp if k == 0 else None, samples=rows))
        assert len(st._trial_keys) <= 3 and len(st._series_ids) <= 3
        for i, sp in enumerate(specs):
            tid = st.trial_by_key(sp.key).id
            series = st.list_series(tid)
            assert [s.metric for s in series] == ["m0", "m1", "m2", "m3"]
            for j, s in enumerate(series):
                assert st.read_samples(s.id)[1].tolist() == [float(i * 10 + j)] * 3
        written = set(st._written)
        assert len(written) == 24
        first = min(written)
        st.compact(first)
        assert first not in st._written and len(st._written) == 23
        st.compact()
        assert not st._written


def test_a_server_remembers_a_bounded_number_of_tokens_and_clients() -> None:
    from tunescope.server import _auth

    failures = _auth._Failures()
    now, wall = time.monotonic(), time.time()
    counted = [wall] * _auth.MAX_FAILURES  # as the store counts a pair's failures
    failures.note("192.0.2.1", counted, now, wall)
    assert failures.blocked_for("192.0.2.1", now) > 0
    for i in range(_auth._CLIENTS_KEPT):
        failures.note(f"10.0.{i // 256}.{i % 256}", counted, now, wall)
    assert len(failures._until) == _auth._CLIENTS_KEPT
    assert failures.blocked_for("192.0.2.1", now) == 0.0  # the least recent was forgotten
