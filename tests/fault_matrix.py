"""The fault-class matrix: a training of known shape, run under a fault that strikes at a phase
of its trial, recording into a store of one kind; then one count of what was kept.

A *class* is a :class:`Fault`: the store kinds it applies to, how it strikes (:meth:`apply`)
and ends (:meth:`heal`) at a phase, which training it needs (the SDK's
:data:`fault_helpers.TRAINING`, or :data:`fault_helpers.COMMAND` under `tunescope run` for
faults that act on the wrapper), and what the trial's end must then say. Adding a class is
one small subclass and one entry in :data:`CLASSES`.

The phases, timed from the moment the training is inside its trial (``t0``):

- ``start``: applied before the training starts, healed 1.5 s after ``t0``;
- ``middle``: applied 1 s after ``t0``, healed 2 s later;
- ``across-end``: applied 1 s before the training's work ends, healed 1.5 s after it exited;
- ``after-end``: applied as soon as the training exited (its sampler still writing), healed
  2 s later.

:func:`run_cell` runs one cell and returns a :class:`Row`: samples kept against those expected
(the seconds the trial was alive from its first sample on, outside the gaps its samplers
recorded, over the interval), marks and scalars made against kept (one for one), final
state, reason and exit code, the longest holds of the training thread (entering a trial,
leaving it, one SDK call, measured in the training as the other fault tests do), duplicates.
:meth:`Row.misses` names each target the cell missed. :func:`table` renders rows as the
Markdown table the closing note quotes; :func:`keep` appends a row to
``$TUNESCOPE_MATRIX_OUT/matrix.jsonl`` when that is set. :data:`KNOWN_OPEN` lists the kinds of
miss the code makes today (expected failures, with why).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fault_helpers import (
    COMMAND,
    SqliteLock,
    finish_training,
    sample_times,
    samplers_of,
    settled,
    start_training,
    wait_for,
)
from http_helpers import Server, make_token
from pg_cluster import PrivateCluster
from tunescope.store import open_store

sys.modules.setdefault("fault_matrix", sys.modules[__name__])  # as a script: the classes' base

PHASES = ("start", "middle", "across-end", "after-end")
STORES = ("sqlite", "postgresql", "http")
SECONDS = 4.0
"""How long each training works (its trial is this long plus entering and leaving)."""
INTERVAL = 0.2

KEPT_TARGET = 0.98
JITTER_SLOTS = 1
"""Slots a busy machine may cost the sampler's schedule (a wake-up past the next slot skips
it) beyond the 2% the target allows: one. A lost batch costs a second of samples (the sampler
hands over one batch a second: 5 at this interval) and leaves a hole that :data:`HOLE_BOUND_S`
catches, so this cannot hide one."""
HOLE_BOUND_S = 1.1
"""The longest time between two kept samples outside recorded gaps (and from the last to the
end): a lost batch of the sampler leaves at least 1.2 s."""
LAG_BOUND_S = 2.0
"""The first sample comes at most this long after the trial's start. Samples are expected
from the first one on: before it the sampler process was starting (entering the trial waits
for it at most half a second), which no fault causes; a fault that kept sampling from
starting shows here."""
ENTER_BOUND_S = 0.5
LEAVE_BOUND_S = 1.0
"""The README's bounds: entering a run or a trial waits at most half a second, leaving a
second. One SDK call (a mark, a log) is held to the leaving bound: it waits for nothing. Holds
are measured less the training thread's wait for a CPU (see :data:`fault_helpers.TRAINING`),
which a busy machine adds and no code can bound; the table shows that wait beside them."""


# ---------------------------------------------------------------------- a cell's parts
@dataclass
class Cell:
    """One cell's store and training while it runs. ``url``: where the training records;
    ``db_url``: the database behind it (the server's, for an HTTP store); ``server``: the
    tunescope server of an HTTP store; ``env``: the training's environment; ``proc``: the
    running training (the wrapper, under `tunescope run`); ``key``: its trial's key, once
    known; ``stash``: the fault's own state between apply and heal."""

    store: str
    url: str
    db_url: str
    cluster: PrivateCluster
    folder: Path
    env: dict[str, str]
    server: Server | None = None
    proc: subprocess.Popen[str] | None = None
    key: str = ""
    stash: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class End:
    """What the trial's end must say: state, reason (``error``) and exit code as stored."""

    state: str = "completed"
    reason: str | None = None
    code: int | None = None


class Fault:
    """A fault class. Subclasses set :attr:`name` and :attr:`stores` and implement
    :meth:`apply` and :meth:`heal`; :attr:`runner` is ``"sdk"`` (the SDK's TRAINING) or
    ``"cli"`` (COMMAND under `tunescope run`)."""

    name: ClassVar[str] = ""
    stores: ClassVar[tuple[str, ...]] = STORES
    phases: ClassVar[tuple[str, ...]] = PHASES
    """The phases where the class means something (all four unless it says)."""
    runner: ClassVar[str] = "sdk"
    seconds: ClassVar[float] = SECONDS
    """How long the training works under this class."""
    before_start: ClassVar[bool] = True
    """At phase ``start``: applied before the training starts (False: as soon as it is in its
    trial, for faults that need the training, like a signal to it)."""
    at_done: ClassVar[bool] = False
    """At phase ``across-end``: applied when the training says it is done (COMMAND prints
    ``done`` and goes on for half a second), not 1 s before its work ends."""

    def apply(self, cell: Cell, phase: str) -> None:
        raise NotImplementedError

    def heal(self, cell: Cell, phase: str) -> None:
        raise NotImplementedError

    def popen(self, cell: Cell, argv: list[str]) -> subprocess.Popen[str]:
        """Start `tunescope run` (``argv``) for the ``cli`` runner, its output read from pipes
        (a class may start it in a process group or a terminal of its own)."""
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cell.env
        )

    def finish(self, cell: Cell) -> dict[str, Any]:
        """Wait for the training to exit; what it reported (for a command: its code). A class
        whose training never finishes its work says what it made before the fault struck."""
        assert cell.proc is not None
        if self.runner == "sdk":
            return finish_training(cell.proc, timeout=120)
        _, err = cell.proc.communicate(timeout=120)
        return {"rc": cell.proc.returncode, "stderr": err}

    def end(self, cell: Cell, phase: str) -> End:
        """The end the trial must record under this fault at this phase."""
        return End(code=0 if self.runner == "cli" else None)

    def note(self, cell: Cell) -> str:
        """What the fault did, for the table (e.g. how many kills it made)."""
        return ""

    def around(self, cell: Cell) -> contextlib.AbstractContextManager[None]:
        """What the class needs around the whole cell, set up before the training starts and
        torn down once the cell is counted (e.g. the store on a small tmpfs: it may set
        ``cell.url``)."""
        return contextlib.nullcontext()

    def also_count(self, cell: Cell) -> list[str]:
        """Other databases that hold part of the trial (counted with ``cell.url``'s, as one:
        a sample, mark or step in two of them is a duplicate)."""
        return []

    def misses(self, cell: Cell, phase: str) -> list[str]:
        """Targets of this class's own that the cell missed (beyond :meth:`Row.misses`)."""
        return []


class StoreUnreachable(Fault):
    """The store cannot be reached: the private PostgreSQL cluster stopped (``pg_ctl stop``),
    the tunescope server of an HTTP store killed with SIGKILL (and started again on its port
    to heal), a SQLite file locked by another process (past the 5 s busy timeout when the
    phase lasts)."""

    name = "store unreachable"

    def apply(self, cell: Cell, phase: str) -> None:
        if cell.store == "sqlite":
            cell.stash["lock"] = SqliteLock(cell.url).hold()
        elif cell.store == "postgresql":
            cell.cluster.stop()
        else:
            assert cell.server is not None
            cell.server.kill()

    def heal(self, cell: Cell, phase: str) -> None:
        if cell.store == "sqlite":
            cell.stash.pop("lock").release()
        elif cell.store == "postgresql":
            cell.cluster.start()
        else:
            assert cell.server is not None
            cell.server.start()


class SamplerKilled(Fault):
    """The trial's sampler killed with SIGKILL, then each one started in its place, up to 4
    times in all (one more than the SDK restarts, :data:`tunescope.record.MAX_RESTARTS`). Each
    is killed once it has written: the first once its samples are in the store, each new one
    once the gap it records is. Kills stop when no new sampler appears within 4 s (once the
    training ended, none is restarted)."""

    name = "sampler killed 4x"
    times = 4
    seconds = 7.0  # each sampler needs a second or two to write before it is killed

    def apply(self, cell: Cell, phase: str) -> None:
        killed: list[int] = []

        def kill_them() -> None:
            for i in range(self.times):
                if not wait_for(lambda: bool(_new(cell, killed)), 15.0 if i == 0 else 4.0):
                    return
                pid = _new(cell, killed)[0]
                wait_for(lambda i=i, pid=pid: _written(cell, i) or not _alive(pid), 15.0)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)

        th = threading.Thread(target=kill_them, daemon=True)
        th.start()
        cell.stash["killer"], cell.stash["killed"] = th, killed

    def heal(self, cell: Cell, phase: str) -> None:
        cell.stash["killer"].join(90)

    def note(self, cell: Cell) -> str:
        return f"{len(cell.stash.get('killed', []))} kills"


def _written(cell: Cell, restarts: int) -> bool:
    """Whether the trial's sampler number ``restarts`` (0: the first) has written: samples
    are stored, and as many recorded gaps as restarts."""
    try:
        with open_store(cell.db_url, create=False) as st:
            info = st.trial_by_key(cell.key)
            if not st.list_series(info.id, "cpu.procs"):
                return False
            ev = st.events(info.id, 0, time.time() + 3600, kinds=["sampler_gap"]).events
            return ev is not None and len(ev) >= restarts
    except Exception:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _new(cell: Cell, killed: list[int]) -> list[int]:
    return [p for p in samplers_of(cell.key) if p not in killed] if cell.key else []


class SignalByPid(Fault):
    """SIGTERM sent by pid to `tunescope run`'s wrapper (as ``kill PID`` does): the command
    gets it exactly once and ends as it chooses (COMMAND finishes its work and exits 0); sent
    after the wrapper exited, it reaches nothing and changes nothing. The store plays no part,
    so one store kind is enough."""

    name = "signal by pid"
    stores = ("sqlite",)
    runner = "cli"
    before_start = False
    at_done = True
    sig: ClassVar[int] = signal.SIGTERM
    """The signal the command must get (once) when it is sent."""

    def apply(self, cell: Cell, phase: str) -> None:
        assert cell.proc is not None
        sent = cell.proc.poll() is None
        if sent:
            cell.proc.send_signal(signal.SIGTERM)
        cell.stash["sent"] = sent

    def heal(self, cell: Cell, phase: str) -> None:
        pass

    def note(self, cell: Cell) -> str:
        log = cell.folder / "signals.log"
        got = log.read_text().split() if log.exists() else []
        return f"sent {int(cell.stash.get('sent', False))}, command got {len(got)}"

    def misses(self, cell: Cell, phase: str) -> list[str]:
        log = cell.folder / "signals.log"
        got = [int(x) for x in log.read_text().split()] if log.exists() else []
        want = [self.sig] if cell.stash.get("sent") else []
        if phase != "after-end" and not cell.stash.get("sent"):
            return ["the wrapper had exited before the signal was sent"]
        return [] if got == want else [f"the command got signals {got}, not {want}"]


from fault_classes_process import PROCESS_CLASSES  # noqa: E402 (it builds on the classes above)
from fault_classes_store import STORE_CLASSES  # noqa: E402

CLASSES: list[Fault] = [
    StoreUnreachable(),
    SamplerKilled(),
    SignalByPid(),
    *STORE_CLASSES,
    *PROCESS_CLASSES,
]
"""Every class the matrix crosses with the phases (and the stores each applies to)."""


def cells() -> list[tuple[Fault, str, str]]:
    """(class, phase, store) for every cell of the matrix."""
    return [(f, ph, st) for f in CLASSES for st in f.stores for ph in f.phases]


def cell_id(cell: tuple[Fault, str, str]) -> str:
    f, ph, st = cell
    return f"{f.name.replace(' ', '-')}/{ph}/{st}"


# ---------------------------------------------------------------------- the stores
@contextlib.contextmanager
def open_cell(store: str, cluster: PrivateCluster, folder: Path) -> Any:
    """A fresh store of kind ``store`` for one cell (a SQLite file; a database of the private
    cluster; a tunescope server over such a database, with a project and a write token of its
    own), torn down after (the cluster is left running, with its default settings)."""
    env = dict(os.environ)
    before = os.environ.get("TUNESCOPE_TOKEN")
    server = None
    try:
        if store == "sqlite":
            url = db_url = str(folder / "store.db")
            open_store(url).close()
        else:
            cluster.reset()
            db_url = cluster.fresh_database(f"m{uuid.uuid4().hex[:10]}")
            url = db_url
            if store == "http":
                server = Server(db_url, folder / "server.log").start()
                env["TUNESCOPE_TOKEN"] = make_token(db_url, "matrix")
                url = server.url("matrix")
                os.environ["TUNESCOPE_TOKEN"] = env["TUNESCOPE_TOKEN"]  # to read it back
        yield Cell(store, url, db_url, cluster, folder, env, server=server)
    finally:
        if before is None:
            os.environ.pop("TUNESCOPE_TOKEN", None)
        else:
            os.environ["TUNESCOPE_TOKEN"] = before
        if server is not None:
            server.stop()
        if not cluster.running():
            cluster.start()


# ---------------------------------------------------------------------- one cell
def run_cell(fault: Fault, phase: str, cell: Cell) -> Row:
    """Run the training under ``fault`` at ``phase`` (see the module doc), heal, wait for the
    trial's writers (:func:`fault_helpers.settled`), and count."""
    assert phase in PHASES, phase
    with fault.around(cell):
        return _run_cell(fault, phase, cell)


def _run_cell(fault: Fault, phase: str, cell: Cell) -> Row:
    if phase == "start" and fault.before_start:
        fault.apply(cell, phase)
    _start(fault, cell)
    t0 = time.monotonic()
    try:
        if phase == "start":
            if not fault.before_start:
                fault.apply(cell, phase)
            _until(t0 + 1.5)
            fault.heal(cell, phase)
        elif phase == "middle":
            _until(t0 + 1.0)
            fault.apply(cell, phase)
            _until(t0 + 3.0)
            fault.heal(cell, phase)
        elif phase == "across-end":
            if fault.at_done:
                _wait_done(cell)
            else:
                _until(t0 + fault.seconds - 1.0)
            fault.apply(cell, phase)
        result = fault.finish(cell)
        if phase == "across-end":
            time.sleep(1.5)  # the fault outlasts the training by this much, on purpose
            fault.heal(cell, phase)
        elif phase == "after-end":
            fault.apply(cell, phase)
            time.sleep(2.0)  # the fault lasts this long, on purpose
            fault.heal(cell, phase)
    finally:
        if cell.proc is not None and cell.proc.poll() is None:
            cell.proc.kill()
            cell.proc.communicate()
    return count(fault, phase, cell, result)


def _until(at: float) -> None:
    time.sleep(max(0.0, at - time.monotonic()))


def _start(fault: Fault, cell: Cell) -> None:
    """Start the training; return once it is inside its trial, its key known."""
    if fault.runner == "sdk":
        p = start_training(cell.url, fault.seconds, INTERVAL, env=cell.env)
        cell.proc, cell.key = p, p.key
        return
    log = cell.folder / "signals.log"
    cell.proc = fault.popen(
        cell,
        [
            sys.executable, "-m", "tunescope", "run", "--store", cell.url, "--run", "faults",
            "--interval", str(INTERVAL), "--", sys.executable, "-c", COMMAND, str(log),
            str(fault.seconds), "0",
        ],
    )  # fmt: skip
    assert cell.proc.stdout is not None
    line = cell.proc.stdout.readline().strip()
    assert line == "ready", (line, cell.proc.stderr.read() if cell.proc.stderr else "")
    with open_store(cell.db_url, create=False) as st:
        assert wait_for(lambda: bool(_trials(st)), 30), "the trial never appeared"
        (cell.key,) = (t.key for t in _trials(st))


def _trials(st: Any) -> list[Any]:
    try:
        return [t for r in st.list_runs() for t in st.list_trials(r.id)]
    except Exception:
        return []


def _wait_done(cell: Cell) -> None:
    """Read the command's output up to its ``done``."""
    assert cell.proc is not None and cell.proc.stdout is not None
    line = cell.proc.stdout.readline().strip()
    assert line == "done", line


# ---------------------------------------------------------------------- counting
@dataclass
class Row:
    """One cell's count (see the module doc)."""

    fault: str
    phase: str
    store: str
    kept: int
    expected: int
    marks_made: int | None
    marks_kept: int | None
    scalars_made: int | None
    scalars_kept: int | None
    state: str
    reason: str | None
    code: int | None
    rc: int
    want: End
    enter: float | None
    leave: float | None
    call: float | None
    duplicates: int
    gaps_s: float
    lag: float
    hole: float = 0.0
    """The longest time with no kept sample inside the trial, outside recorded gaps."""
    note: str = ""
    own_misses: list[str] = field(default_factory=list)
    queued: float | None = None
    """How long the training thread waited for a CPU during the holds measured (left out of
    them)."""

    @property
    def ratio(self) -> float:
        # no second outside recorded gaps: nothing was to be kept
        return self.kept / self.expected if self.expected > 0 else 1.0

    def misses(self) -> list[str]:
        """Each target this cell missed, in words (empty: it held)."""
        return [text for _kind, text in self.graded()]

    def graded(self) -> list[tuple[str, str]]:
        """(kind, words) of each target missed; kinds: samples, marks, scalars, end,
        duplicates, lag, entering, leaving, call, and ``own`` for the class's own."""
        out = []
        if self.kept < KEPT_TARGET * self.expected - JITTER_SLOTS:
            out.append(
                ("samples", f"samples {self.kept}/{self.expected} = {self.ratio:.3f} < 0.98")
            )
        if self.hole > HOLE_BOUND_S:
            out.append(("samples", f"no sample for {self.hole:.2f} s outside recorded gaps"))
        if self.marks_made is not None and self.marks_kept != self.marks_made:
            out.append(("marks", f"marks {self.marks_kept} kept of {self.marks_made}"))
        if self.scalars_made is not None and self.scalars_kept != self.scalars_made:
            out.append(("scalars", f"scalars {self.scalars_kept} kept of {self.scalars_made}"))
        got = End(self.state, self.reason, self.code)
        if got != self.want:
            out.append(("end", f"end {got} instead of {self.want}"))
        if self.lag > LAG_BOUND_S:
            out.append(("lag", f"the first sample came {self.lag:.2f} s after the start"))
        if self.duplicates:
            out.append(("duplicates", f"{self.duplicates} duplicates"))
        if self.enter is not None and self.enter > ENTER_BOUND_S:
            out.append(("entering", f"entering held {self.enter:.3f} s > {ENTER_BOUND_S}"))
        if self.leave is not None and self.leave > LEAVE_BOUND_S:
            out.append(("leaving", f"leaving held {self.leave:.3f} s > {LEAVE_BOUND_S}"))
        if self.call is not None and self.call > LEAVE_BOUND_S:
            out.append(("call", f"one call held {self.call:.3f} s > {LEAVE_BOUND_S}"))
        return out + [("own", m) for m in self.own_misses]

    def open_only(self) -> str | None:
        """When this cell's class and phase are in :data:`KNOWN_OPEN` and every miss is of
        the kind it names: why (the test then reports the cell as an expected failure, its
        row in the table all the same); else None."""
        kinds = {k for k, _ in self.graded()}
        known = KNOWN_OPEN.get((self.fault, self.phase))
        if not kinds or known is None or not kinds <= {known[0]}:
            return None
        return f"{known[0]}: {known[1]}"


_KILLED_LATE = (
    "samples",
    "a sampler killed (kill -9) after its training exited loses the samples it held (up to its "
    "last second) with no gap recorded: no process is left to see it die (docs/reliability.md, "
    "what is not guaranteed)",
)
KNOWN_OPEN: dict[tuple[str, str], tuple[str, str]] = {
    ("sampler killed 4x", "across-end"): _KILLED_LATE,
    ("sampler killed 4x", "after-end"): _KILLED_LATE,
}
"""(class, phase) -> (the kind of miss, why) for what is documented as not guaranteed: such a
cell whose only misses are of that kind is an expected failure (xfail, with the reason); any
other miss, or a miss in any other cell, fails it."""


def count(fault: Fault, phase: str, cell: Cell, result: dict[str, Any]) -> Row:
    """Wait for the trial's writers, then count what its store kept (see :class:`Row`)."""
    settled(cell.url, cell.key, timeout=180)
    t: list[float] = []
    window: list[Any] = []
    scalars: list[Any] = []
    ends: list[tuple[Any, int | None]] = []  # (the trial, its exit code) in each store
    duplicates = 0  # within each store: a batch the old database committed but whose answer
    # never came (its server killed in between) is sent again to the new one and is then in
    # both, which no reader sees twice (none reads both); counted once in the union
    for url in [cell.url, *fault.also_count(cell)]:
        with open_store(url, create=False) as st:
            one = st.trial_by_key(cell.key)
            here = sample_times(st, one.id, "cpu.procs")
            got = st.events(one.id, 0, time.time() + 3600, limit=10**6).events
            assert got is not None
            kept = st.scalars(one.id, "loss") if fault.runner == "sdk" else []
            names = [e.name for e in got if e.kind == "mark"]
            duplicates += (len(here) - len(set(here))) + (len(names) - len(set(names)))
            duplicates += len(kept) - len({s.step for s in kept})
            t += here
            window += got
            scalars += kept
            ends.append((one, st.exit_code(one.id)))
    # the trial's end as the first store holding one has it (else as the first store has it)
    info, code = next((e for e in ends if e[0].end is not None), ends[0])
    t.sort()
    marks = [e.name for e in window if e.kind == "mark"]
    gaps = [(e.t, e.duration or 0.0) for e in window if e.kind == "sampler_gap"]
    end = info.end if info.end is not None else time.time()
    first = min(t) if t else end  # before it, the sampler was starting (see LAG_BOUND_S)
    gap_s = covered(gaps, first, end)
    # the sampler's slots in [first, end] outside the gaps (each gap may cost a slot at its
    # edge, so with gaps this expects a little less than the schedule had); samples after the
    # end (the sampler's final one, a lingering sampler's) are not counted: they would hide
    # a loss inside the trial. No second outside the gaps: nothing expected.
    span = end - first - gap_s
    expected = int(span / INTERVAL) + 1 if span > 1e-6 else 0
    distinct = set(t)
    # a gap spans the time between two samples (a restarted sampler's first one, or those
    # around a starved schedule's hole): those two are kept, not inside it
    outside = {x for x in distinct if x <= end + 1e-6 and not any(a < x < a + d for a, d in gaps)}
    hole = 0.0
    for a, b in itertools.pairwise([*sorted(outside), end]):
        if not any(g < b and g + d > a for g, d in gaps):  # a recorded gap explains it
            hole = max(hole, b - a)
    sdk = fault.runner == "sdk"
    made = int(result["marks"]) if sdk else None
    return Row(
        fault=fault.name,
        phase=phase,
        store=cell.store,
        kept=len(outside),
        expected=expected,
        marks_made=made,
        marks_kept=len(set(marks)) if sdk else None,
        scalars_made=made,
        scalars_kept=len({s.step for s in scalars}) if sdk else None,
        state=info.state,
        reason=info.error,
        code=code,
        rc=int(cell.proc.returncode if cell.proc is not None else -1),
        want=fault.end(cell, phase),
        enter=max(float(result["enter"]), float(result["enter_run"])) if sdk else None,
        leave=_opt(result.get("leave")) if sdk else None,
        call=float(result["longest_call"]) if sdk else None,
        queued=_opt(result.get("queued")) if sdk else None,
        duplicates=duplicates,
        gaps_s=gap_s,
        hole=hole,
        lag=first - info.start,
        note=fault.note(cell),
        own_misses=fault.misses(cell, phase),
    )


def covered(gaps: list[tuple[float, float]], first: float, end: float) -> float:
    """Seconds of [first, end] that the gaps (start, duration) cover, each second once: a
    sampler whose restarts are used up records a gap to the trial's end, which may overlap
    the gaps of the restarts before it."""
    spans = sorted((max(a, first), min(a + d, end)) for a, d in gaps if min(a + d, end) > first)
    total, reach = 0.0, first
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


# ---------------------------------------------------------------------- the table
def keep(row: Row) -> None:
    """Append ``row`` to ``$TUNESCOPE_MATRIX_OUT/matrix.jsonl`` when that is set."""
    out = os.environ.get("TUNESCOPE_MATRIX_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        with open(Path(out) / "matrix.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(row)) + "\n")


def _opt(x: Any) -> float | None:
    """A hold the training measured; None where it never got there (killed, or raised)."""
    return None if x is None else float(x)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(rows: list[Row]) -> str:
    """The class × phase table (one line per cell), in Markdown."""
    head = (
        "| class | phase | store | samples kept / expected | marks, scalars | end (state, "
        "reason, code) | dups | enter / leave / call s (CPU wait) | first sample s | note | "
        "held |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for r in rows:
        ev = (
            "-"
            if r.marks_made is None
            else f"{r.marks_kept}/{r.marks_made}, {r.scalars_kept}/{r.scalars_made}"
        )
        misses = r.misses()
        lines.append(
            f"| {r.fault} | {r.phase} | {r.store} | {r.kept}/{r.expected} ({r.ratio:.1%}) | "
            f"{ev} | {r.state}, {r.reason or '-'}, {'-' if r.code is None else r.code} | "
            f"{r.duplicates} | {_s(r.enter)} / {_s(r.leave)} / {_s(r.call)} ({_s(r.queued)}) | "
            f"{r.lag:.2f} | "
            f"{r.note} | "
            f"{'yes' if not misses else 'NO: ' + '; '.join(misses)} |"
        )
    return head + "\n".join(lines) + "\n"


def read_rows(path: Path) -> list[Row]:
    """The rows :func:`keep` wrote."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        d["want"] = End(**d["want"])
        rows.append(Row(**d))
    return rows


if __name__ == "__main__":  # python tests/fault_matrix.py DIR: the table of DIR/matrix.jsonl
    print(table(read_rows(Path(sys.argv[1]) / "matrix.jsonl")), end="")
