"""What a training's writer can keep neither in the store nor in the spool when it leaves is
handed to its sampler (``batch JSON`` lines on the sampler's stdin, ``_protocol``), which
outlives the training and writes it once the store is back: found by the fault-class matrix
(spool unwritable or full, the store away, across the trial's end: the last second's marks
and scalars were lost). The whole path is proved by the matrix's
``spool-unwritable/across-end`` and ``spool-full/across-end`` cells; these tests prove its
two halves."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from fault_helpers import SqliteLock, read_only, wait_for
from test_store_writer import batch, spec, stored
from tunescope._once import Once
from tunescope.collect._loop import StdinWatch, StopSignal
from tunescope.record._launch import end_line
from tunescope.store import Batch, TrialEnd, open_store
from tunescope.store.produce._writer import Writer

pytestmark = [pytest.mark.faults]


@pytest.mark.parametrize("taken", [True, False])
def test_a_writer_hands_over_what_it_cannot_keep_at_close(
    tmp_path: Path, taken: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The store locked and the spool on a read-only mount: at close, the batches go to the
    handoff; only when it refuses them are they lost (and said)."""
    url = str(tmp_path / "store.db")
    open_store(url).close()
    root = tmp_path / "spool"
    root.mkdir()
    sp = spec()
    got: list[Batch] = []

    def handoff(batches: list[Batch]) -> bool:
        got.extend(batches)
        return taken

    with read_only(root), SqliteLock(url), caplog.at_level("WARNING", "tunescope"):
        w = Writer(
            url, spec=sp, spool_root=root, store_factory=lambda u: open_store(u, timeout=0.1)
        )
        made = [batch(sp, i) for i in range(5)]
        for b in made:
            w.put(b)
        assert w.close(0.3, handoff=handoff) is False
    assert [b.id for b in got] == [b.id for b in made]
    lost = [r.getMessage() for r in caplog.records if "could not keep" in r.getMessage()]
    assert (w.dropped, len(lost)) == ((0, 0) if taken else (10, 1)), (w.dropped, lost)
    assert w.handed == (5 if taken else 0)


def test_a_sampler_writes_the_batches_handed_after_the_end(tmp_path: Path) -> None:
    """``end JSON`` then ``batch JSON`` lines on the sampler's stdin: the end stops it, the
    batches go to its writer once attached (kept till then), and land once."""
    url = str(tmp_path / "store.db")
    sp = spec()
    r, wfd = os.pipe()
    stop = StopSignal()
    watch = StdinWatch(r, stop, Once(logging.getLogger("test")))
    watch.start()
    lines = [end_line(TrialEnd("completed", 1_700_000_010.0))]
    lines += [f"batch {batch(sp, i).to_json().decode()}" for i in range(3)]
    lines += ["batch {not json"]
    os.write(wfd, ("\n".join(lines) + "\n").encode())
    assert wait_for(lambda: stop.reason == "end" and len(stop._handed) == 3, 10)
    writer = Writer(url, spec=sp, spool_root=tmp_path / "spool")
    stop.attach(writer)
    os.write(wfd, f"batch {batch(sp, 3).to_json().decode()}\n".encode())
    os.close(wfd)
    watch.join(10)
    assert stop.eof and not watch.is_alive()
    assert writer.flush(30) and writer.close(5)
    os.close(r)
    assert stored(url, sp.key) == ([0.0, 1.0, 2.0, 3.0], 4)
