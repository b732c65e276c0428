"""Faults to inject, for real: a SQLite lock held by another process, a memory cgroup, a clock
shim for a trial's processes, a small tmpfs, a read-only bind mount, a file system filled to
the last byte; and small readers that count what a store kept."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from tunescope.collect._loop import STARVED
from tunescope.store import Event, Store, TrialInfo, open_store, pending

_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    print("released", flush=True)
    """
)


class SqliteLock:
    """Another process holds an exclusive lock on a SQLite file (``with`` block, or
    :meth:`hold` / :meth:`release`): every reader and writer of it waits or fails meanwhile."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.proc: subprocess.Popen[str] | None = None

    def hold(self) -> SqliteLock:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"
        return self

    def release(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.stdout.readline()
        p.wait(timeout=30)
        p.stdin.close()
        p.stdout.close()

    def __enter__(self) -> SqliteLock:
        return self.hold()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


# ---------------------------------------------------------------------- mounts (need root)
def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a fresh folder (world-writable), unmounted after."""
    _need_root()
    where = Path(tempfile.mkdtemp(prefix="tunescope-tmpfs-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(where)],
        check=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    """``folder`` bind-mounted read-only on itself (root cannot write there either)."""
    _need_root()
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


class Ballast:
    """Fills a file system to the last byte (:meth:`fill`), frees it again (:meth:`free`)."""

    def __init__(self, where: Path) -> None:
        self.path = where / "ballast"

    def fill(self) -> int:
        n = 0
        chunk = b"\0" * 65536
        with open(self.path, "ab", buffering=0) as f:
            for size in (65536, 4096, 512, 1):
                while True:
                    try:
                        wrote = f.write(chunk[:size])
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC
                        break
                    if not wrote:
                        break
                    n += wrote
        return n

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def wait_for(check: object, timeout: float = 30.0, every: float = 0.05) -> bool:
    """Poll ``check()`` until it is true or ``timeout`` s pass; its last answer."""
    assert callable(check)
    end = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= end:
            return bool(check())
        time.sleep(every)


def only_trial(url: str) -> TrialInfo:
    """The one trial in a store (fails when there are more or none)."""
    with open_store(url, create=False) as st:
        trials = [t for r in st.list_runs() for t in st.list_trials(r.id)]
    assert len(trials) == 1, [t.name for t in trials]
    return trials[0]


def sample_times(st: Store, trial_id: int, metric: str) -> list[float]:
    """Every stored time of one metric of a trial (all devices, sorted)."""
    out: list[float] = []
    for s in st.list_series(trial_id, metric):
        out.extend(st.read_samples(s.id)[0].tolist())
    return sorted(out)


def restarts(gaps: list[Event] | None) -> list[Event]:
    """The ``sampler_gap`` events of sampler restarts: without those a busy machine's
    starved schedule records (``collect/_loop.STARVED``)."""
    return [e for e in gaps or [] if e.name != STARVED]


# ---------------------------------------------------------------------- a training of known shape
TRAINING = """
import json, os, sys, time
import tunescope.record as ts

store, seconds, interval, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]


def now():  # (monotonic s, this thread's wait for a CPU so far, s: schedstat's run delay)
    try:
        with open("/proc/thread-self/schedstat") as f:
            return time.monotonic(), int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return time.monotonic(), 0.0


def held(since):  # seconds since `since` the thread was held, less its wait for a CPU
    t, q = now()
    queued[0] += q - since[1]
    return (t - since[0]) - (q - since[1])


queued = [0.0]
t0 = now()
run = ts.run("faults", store=store or None, interval=interval)
enter_run = held(t0)
t1 = now()
trial = run.trial("t", params={"lr": 0.1}).__enter__()
enter = held(t1)
print("started", trial.key, flush=True)
marks, longest, k = 0, 0.0, 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    a = now()
    trial.mark(f"m{k}")
    trial.log(step=k, loss=float(k))
    longest = max(longest, held(a))
    marks += 1
    k += 1
    time.sleep(0.05)
t2 = now()
trial.__exit__(None, None, None)
leave = held(t2)
print(json.dumps({"marks": marks, "enter_run": enter_run, "enter": enter, "leave": leave,
                  "longest_call": longest, "queued": queued[0], "key": trial.key,
                  "pid": os.getpid()}), flush=True)
if hold == "hold":
    sys.stdin.readline()
"""
"""A training of known shape: ``mark(f"m{k}")`` and ``log(step=k, loss=k)`` every 50 ms for
the given seconds, in trial "t" of run "faults"; it prints ``started KEY``, then a JSON line with
how many marks it made, how long entering and leaving held it, the longest SDK call, and the
trial's key. A hold is the time the call took less the time the thread waited for a CPU
meanwhile (its run-queue delay, ``/proc/thread-self/schedstat``): what a busy machine adds and
no code can bound; that wait, summed over the measured calls, is ``queued``. Arguments: store
URL ('' for $TUNESCOPE_STORE), seconds, interval, and "hold" to wait for a line on stdin before
exiting."""


class Training(subprocess.Popen[str]):
    """A running :data:`TRAINING`; :attr:`key` is its trial's key (known once it started)."""

    key = ""


def start_training(
    url: str, seconds: float, interval: float = 0.2, env: dict[str, str] | None = None
) -> Training:
    """Start :data:`TRAINING` and return once it is inside its trial."""
    p = Training(
        [sys.executable, "-c", TRAINING, url, str(seconds), str(interval), "no"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert p.stdout is not None
    word, _, p.key = p.stdout.readline().strip().partition(" ")
    assert word == "started" and p.key, (word, p.stderr.read() if p.stderr else "")
    return p


def finish_training(p: subprocess.Popen[str], timeout: float = 120) -> dict[str, object]:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    import json

    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    result["stderr"] = err
    return result


COMMAND = """
import signal, sys, time
log, seconds, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def seen(signum, frame):
    with open(log, "a") as f:
        f.write(f"{signum}\\n")
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, seen)
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(0.05)
print("done", flush=True)
end = time.monotonic() + 0.5
while time.monotonic() < end:
    time.sleep(0.05)
sys.exit(code)
"""
"""A command of known shape for `tunescope run`: it prints ``ready``, works for the given
seconds, prints ``done``, shuts down for half a second more, and exits with the given code;
each SIGINT, SIGTERM and SIGHUP it gets meanwhile is appended to a log file (one number a
line), and changes nothing else. Arguments: the log's path, seconds, exit code."""


def gaps(times: list[float]) -> float:
    """The longest time between two neighbouring samples."""
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def samplers_of(key: str | None = None, *, pid: int | None = None) -> list[int]:
    """Pids of the sampler processes recording the trial ``key``, or watching the process
    ``pid`` (found by their command line, which names both)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"tunescope.collect" not in args:
            continue
        watched = args[args.index(b"--pid") + 1] if b"--pid" in args[:-1] else None
        if (key is None or key.encode() in args) and (pid is None or watched == b"%d" % pid):
            out.append(int(entry))
    return out


def wait_samplers_gone(key: str, timeout: float = 60.0) -> None:
    """Wait until no sampler of trial ``key`` runs (they wrote or spooled what they held)."""
    assert wait_for(lambda: not samplers_of(key), timeout), f"samplers {samplers_of(key)} live"


def settled(url: str, key: str, timeout: float = 60.0) -> TrialInfo:
    """Wait for the writers of trial ``key`` in the store at ``url``: its samplers have
    written what they hold and exited, and no spool file waits for the store (in this test's
    $TUNESCOPE_SPOOL); then the trial as stored. Reads that follow a trial's end call this,
    never a sleep: the sampler outlives the training, and on a busy machine for long."""
    wait_samplers_gone(key, timeout)
    assert wait_for(lambda: pending(url)[0] == 0, timeout), f"spool waits: {pending(url)}"
    with open_store(url, create=False) as st:
        return st.trial_by_key(key)


# ---------------------------------------------------------------------- a clock fault
SHIM = textwrap.dedent(
    '''
    """A clock fault for tests: time.time() and time.time_ns() of this process run
    $TS_SHIM_SKEW seconds off, plus the seconds written in the file $TS_SHIM_STEP (read
    every 20 ms: writing it steps the clock). Once the offset is not 0, the process writes
    its pid into $TS_SHIM_PROOF (a folder) to prove it ran."""
    import os, time

    _real, _real_ns, _mono = time.time, time.time_ns, time.monotonic
    _skew = float(os.environ.get("TS_SHIM_SKEW") or 0)
    _file = os.environ.get("TS_SHIM_STEP")
    _proof = os.environ.get("TS_SHIM_PROOF")
    _seen = [0.0, -1.0, False]  # step, read at (monotonic), proved

    def _offset():
        now = _mono()
        if _file and now - _seen[1] > 0.02:
            _seen[1] = now
            try:
                with open(_file) as f:
                    _seen[0] = float(f.read().strip() or 0)
            except (OSError, ValueError):
                _seen[0] = 0.0
        off = _skew + _seen[0]
        if off and _proof and not _seen[2]:
            _seen[2] = True
            try:
                with open(os.path.join(_proof, str(os.getpid())), "w") as f:
                    f.write(repr(off))
            except OSError:
                pass
        return off

    def _time():
        return _real() + _offset()

    def _time_ns():
        return _real_ns() + int(_offset() * 1e9)

    time.time = _time
    time.time_ns = _time_ns
    '''
)


def shimmed(tmp_path: Path, skew: float = 0.0) -> tuple[dict[str, str], Path, Path]:
    """The environment of a trial whose processes run the shim; (env, step file, proofs)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM, encoding="utf-8")
    proofs = tmp_path / "proofs"
    proofs.mkdir()
    step = tmp_path / "step"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH", "")) if p)
    env.update(TS_SHIM_SKEW=repr(skew), TS_SHIM_STEP=str(step), TS_SHIM_PROOF=str(proofs))
    return env, step, proofs


# ---------------------------------------------------------------------- a memory cgroup
@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A new memory cgroup limited to ``limit`` bytes, without swap: v2 where the unified hierarchy
    has the memory controller, else v1. Whatever is left in it is killed, and it is removed."""
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        d = v2 / f"tunescope-test-{uuid.uuid4().hex[:8]}"
        d.mkdir()
        (d / "memory.max").write_text(str(limit))
        if (d / "memory.swap.max").exists():
            (d / "memory.swap.max").write_text("0")
    else:
        d = v2 / "memory" / f"tunescope-test-{uuid.uuid4().hex[:8]}"
        d.mkdir()
        (d / "memory.limit_in_bytes").write_text(str(limit))
    try:
        yield d
    finally:
        for _ in range(100):
            for pid in (d / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                d.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        assert not d.exists()
