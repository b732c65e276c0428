"""The fault-class matrix (tests/fault_matrix.py): each class crossed with the phase of the
trial it strikes and the store kinds it applies to, each cell counting what was kept against
the targets (samples ≥ 98% of the seconds alive outside recorded gaps, marks and scalars one
for one, the right end, no duplicates, holds of the training thread within the README's
bounds).

The cells share one private PostgreSQL cluster (for the PostgreSQL store and behind the HTTP
store's real tunescope server); each has a fresh database, server and spool. With
$TUNESCOPE_MATRIX_OUT set, each cell's row is appended to matrix.jsonl there, and the table
is written to matrix.md once the module is done (``python tests/fault_matrix.py DIR`` prints
it again).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import fault_matrix as fm
from pg_cluster import PrivateCluster, private_cluster

pytestmark = [pytest.mark.faults, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    with private_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def rows() -> Iterator[list[fm.Row]]:
    """The rows of the cells run in this module; the table is printed (and written to
    $TUNESCOPE_MATRIX_OUT/matrix.md) after the last one."""
    done: list[fm.Row] = []
    yield done
    if done:
        text = fm.table(done)
        print("\n" + text)
        out = os.environ.get("TUNESCOPE_MATRIX_OUT")
        if out:
            (Path(out) / "matrix.md").write_text(text, encoding="utf-8")


@pytest.mark.parametrize("cell", fm.cells(), ids=fm.cell_id)
def test_a_fault_at_a_phase_loses_nothing(
    cell: tuple[fm.Fault, str, str],
    cluster: PrivateCluster,
    rows: list[fm.Row],
    tmp_path: Path,
) -> None:
    fault, phase, store = cell
    with fm.open_cell(store, cluster, tmp_path) as c:
        row = fm.run_cell(fault, phase, c)
    rows.append(row)
    fm.keep(row)
    why = row.open_only()
    if why is not None:
        pytest.xfail(f"{fm.table([row])}{why}")
    assert not row.misses(), fm.table([row])


def test_the_count_sees_a_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counting is not blind: a row short of samples, of a mark, with a duplicate, a wrong
    end or a long hold names each miss."""
    good = fm.Row(
        fault="f", phase="middle", store="sqlite", kept=100, expected=100, marks_made=10,
        marks_kept=10, scalars_made=10, scalars_kept=10, state="completed", reason=None,
        code=None, rc=0, want=fm.End(), enter=0.1, leave=0.2, call=0.01, duplicates=0,
        gaps_s=0.0, lag=0.1,
    )  # fmt: skip
    assert good.misses() == []
    from dataclasses import replace

    bad = replace(
        good, kept=96, marks_kept=9, scalars_kept=11, state="failed", duplicates=1,
        enter=0.51, leave=1.01, call=1.2, hole=1.2,
    )  # fmt: skip
    misses = bad.misses()
    assert len(misses) == 9, misses
    assert bad.open_only() is None  # a lost mark is never an expected failure
    assert replace(good, kept=97).misses() == []  # 2% and one slot of a busy schedule
    assert replace(good, hole=1.2).misses()  # but a lost batch's hole is always seen
    short = replace(good, kept=90)
    assert short.open_only() is None  # nothing is known open here: every miss fails
    monkeypatch.setitem(fm.KNOWN_OPEN, ("f", "middle"), ("samples", "why"))
    assert short.open_only() == "samples: why"
    assert replace(short, marks_kept=9).open_only() is None  # only the kind it names
    assert replace(short, phase="start").open_only() is None  # only the cell it names
    assert "samples 96/100" in misses[0] and "no sample for 1.20 s" in misses[1]
    assert "NO: " in fm.table([bad]) and "| yes |" in fm.table([good])


def test_overlapping_gaps_count_once() -> None:
    """A gap to the trial's end over the gaps of the restarts before it: each second once."""
    assert fm.covered([(1.0, 2.0), (2.0, 10.0), (4.0, 1.0)], 0.0, 8.0) == 7.0
    assert fm.covered([(-5.0, 6.0), (9.0, 3.0)], 0.0, 10.0) == 2.0
    assert fm.covered([], 0.0, 10.0) == 0.0
