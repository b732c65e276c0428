"""Faults on one machine, for real: a SQLite lock held by another process across a trial's
end, kill -9 of a sampler and of `tunescope run`'s wrapper, Ctrl-C and signals, eight
processes creating one store at once, a burst of logging. Each test counts what was kept."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fault_helpers import (
    SqliteLock,
    finish_training,
    gaps,
    restarts,
    sample_times,
    samplers_of,
    settled,
    start_training,
    wait_for,
)
from tunescope.errors import SchemaError
from tunescope.store import open_store

pytestmark = [pytest.mark.faults, pytest.mark.slow]

INTERVAL = 0.2
HELD_BOUND = 2.5
"""See test_faults_postgres.py: entering and leaving wait at most 0.5 / 1 s."""


def _trial_of(url: str, key: str) -> Any:
    with open_store(url, create=False) as st:
        return st.trial_by_key(key)


def _kept(url: str, result: dict[str, Any], seconds: float, *, max_gap: float = 1.5) -> Any:
    """Everything of a TRAINING run is in the store, once (see fault_helpers.TRAINING)."""
    key = str(result["key"])
    settled(url, key)
    with open_store(url, create=False) as st:
        info = st.trial_by_key(key)
        assert info.state == "completed", (info.state, info.error, result["stderr"])
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
        assert ev is not None
        assert len(ev) == result["marks"] == len({e.name for e in ev})
        assert len(st.scalars(info.id, "loss")) == result["marks"]
        t = sample_times(st, info.id, "cpu.procs")
        assert info.end is not None and info.end - info.start >= seconds
        assert len(t) >= 0.6 * (info.end - info.start) / INTERVAL, len(t)
        assert gaps(t) < max_gap and len(t) == len(set(t)), gaps(t)
    assert result["enter"] < HELD_BOUND and result["leave"] < HELD_BOUND, result
    return info


# ---------------------------------------------------------------------- SQLite locks
def test_a_lock_across_the_trial_end_holds_nothing_and_loses_nothing(sqlite_url: str) -> None:
    """Another process holds the SQLite file locked from mid-trial until seconds after the
    training exited (longer than the 5 s busy timeout): leaving the trial returns within its
    bound; the sampler, outliving the training, writes everything, the end included, after."""
    open_store(sqlite_url).close()
    p = start_training(sqlite_url, 4.0, INTERVAL)
    time.sleep(1.5)
    with SqliteLock(sqlite_url):
        result = finish_training(p)
        time.sleep(6.0)  # past the busy timeout, with the training gone
        assert _trial_of_locked_is_unchanged(sqlite_url)
    _kept(sqlite_url, result, 4.0)


def _trial_of_locked_is_unchanged(url: str) -> bool:
    """While the lock is held, nothing can have been written (the test's own sanity)."""
    conn = sqlite3.connect(url, timeout=0.1)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()
    return False


def test_a_burst_of_logging_keeps_every_call(sqlite_url: str, spool: Path) -> None:
    """300,000 log() calls as fast as they come, while the store is locked: memory stays
    bounded (the writer moves them to the spool) and every call lands once the lock goes."""
    open_store(sqlite_url).close()
    code = """
        import sys, time
        import tunescope.record as ts
        with ts.run("burst", store=sys.argv[1], sampler=False) as run, run.trial() as trial:
            print("in", flush=True)
            sys.stdin.readline()
            t = time.perf_counter()
            for i in range(300_000):
                trial.log(step=i, loss=float(i))
            print(round(time.perf_counter() - t, 3), flush=True)
            time.sleep(3.0)
            w = trial.writer
            print(w.spooled if w else -1, flush=True)
        print(trial.key, flush=True)
    """
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), sqlite_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdin is not None and p.stdout is not None
    assert p.stdout.readline().strip() == "in"
    with SqliteLock(sqlite_url):
        p.stdin.write("go\n")
        p.stdin.flush()
        burst = float(p.stdout.readline())
        spooled = int(p.stdout.readline())
        key = p.stdout.readline().strip()
        assert p.wait(60) == 0
        p.stdin.close()
        p.stdout.close()
    assert spooled > 0  # the writer could not hold them all in memory: the spool took them
    with open_store(sqlite_url) as st:
        from tunescope.store import replay

        replay(sqlite_url, st.write, root=spool)
        info = st.trial_by_key(key)
        steps = [s.step for s in st.scalars(info.id, "loss")]
    assert sorted(steps) == list(range(300_000)), (len(steps), burst)
    assert info.state == "completed"


# ---------------------------------------------------------------------- one store, many openers
def test_eight_processes_creating_one_new_file_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    code = """
        import sys, tunescope.store as s
        with s.open_store(sys.argv[1]) as st:
            run = st.ensure_run("shared")
            st.create_trial(run.id, sys.argv[2])
        print("ok")
    """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(path), f"p{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    with open_store(path, create=False) as st:
        names = sorted(t.name for t in st.list_trials(st.get_run("shared").id))
    assert names == [f"p{i}" for i in range(8)]


@pytest.mark.parametrize("name", ["x.db?mode=memory", "a#b.db", "c%20d.db", "sp ace.db", "ünï.db"])
def test_store_paths_are_literal(tmp_path: Path, name: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tunescope", "run", "--store", name, "--run", "lit", "--", "true"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    made = sorted(p.name for p in tmp_path.iterdir() if p.name != "spool")
    assert made[0] == name and all(m.startswith(name) for m in made), made  # -wal, -shm
    with open_store(str(tmp_path / name), create=False) as st:
        assert st.get_run("lit").trials == 1


def test_a_foreign_sqlite_file_is_never_touched(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (x TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    out = subprocess.run(
        [sys.executable, "-m", "tunescope", "run", "--store", str(path), "--", "true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "not a tunescope database" in out.stderr
    with pytest.raises(SchemaError):
        open_store(path)
    import tunescope.record as ts

    with pytest.raises(SchemaError):
        ts.run("x", store=path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("theirs")) == [
        "theirs.db"
    ]  # no -wal or -shm: never switched to WAL
    with sqlite3.connect(path) as again:
        assert again.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


# ---------------------------------------------------------------------- a killed sampler
def test_a_killed_sampler_is_restarted_and_the_gap_recorded(sqlite_url: str) -> None:
    p = start_training(sqlite_url, 6.0, INTERVAL)
    time.sleep(1.0)
    key = _key_from_store(sqlite_url)
    (pid,) = samplers_of(key)
    t_kill = time.time()
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: bool(samplers_of(key)) and samplers_of(key) != [pid], 20)
    assert _trial_of(sqlite_url, key).state == "running"  # never lost while training lives
    result = finish_training(p)
    info = _kept(sqlite_url, result, 6.0, max_gap=4.0)
    with open_store(sqlite_url) as st:
        ev = restarts(st.events(info.id, 0, time.time() + 60, kinds=["sampler_gap"]).events)
        t = sample_times(st, info.id, "cpu.procs")
    assert len(ev) == 1
    gap = ev[0]
    assert gap.duration is not None and gap.t <= t_kill <= gap.t + gap.duration
    assert gap.duration < 4.0
    assert any(x > t_kill + 1.0 for x in t)  # sampling went on after the restart


def _key_from_store(url: str) -> str:
    def one() -> str | None:
        try:
            with open_store(url, create=False) as st:
                trials = [t for r in st.list_runs() for t in st.list_trials(r.id)]
        except Exception:
            return None
        return trials[0].key if trials else None

    assert wait_for(lambda: one() is not None, 20)
    key = one()
    assert key is not None
    return key


# ---------------------------------------------------------------------- tunescope run
COUNTER = """
import signal, sys, time
log, seconds, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def seen(signum, frame):
    with open(log, "a") as f:
        f.write(f"{signum}\\n")
signal.signal(signal.SIGINT, seen)
signal.signal(signal.SIGTERM, seen)
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    time.sleep(0.05)
print("done", flush=True)
sys.exit(code)
"""
"""A command that counts the SIGINT and SIGTERM it gets, runs for some seconds, exits with a
given code."""


def _cli_run(
    url: str, tmp_path: Path, seconds: float, code: int, **popen: Any
) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    log = tmp_path / "signals.log"
    p = subprocess.Popen(
        [
            sys.executable, "-m", "tunescope", "run", "--store", url, "--run", "cli",
            "--interval", str(INTERVAL), "--", sys.executable, str(script), str(log),
            str(seconds), str(code),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )  # fmt: skip
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    return p, log


def _end(p: subprocess.Popen[str], timeout: float) -> int:
    """Wait for the wrapper, reading and closing its pipes; its exit code."""
    p.communicate(timeout=timeout)
    return p.returncode


def _signals(log: Path) -> list[int]:
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def _cli_trial(url: str) -> tuple[Any, int | None]:
    """(the one trial of run "cli", its exit code), once its samplers are done."""
    with open_store(url, create=False) as st:
        (info,) = st.list_trials(st.get_run("cli").id)
    settled(url, info.key)
    with open_store(url, create=False) as st:
        return st.get_trial(info.id), st.exit_code(info.id)


def test_run_exit_code_passes_through_a_locked_store(sqlite_url: str, tmp_path: Path) -> None:
    """The store is locked from just after the command started until after it ended: the
    wrapper exits with the command's code at once, and the trial's end lands later."""
    open_store(sqlite_url).close()
    p, _ = _cli_run(sqlite_url, tmp_path, 2.0, 3)
    with SqliteLock(sqlite_url):
        t = time.monotonic()
        assert _end(p, 30) == 3
        assert time.monotonic() - t < 2.0 + HELD_BOUND
        time.sleep(1.0)
    info, code = _cli_trial(sqlite_url)
    assert (info.state, info.error, code) == ("failed", "exited with code 3", 3)


def test_run_survives_kill_9_of_its_wrapper(sqlite_url: str, tmp_path: Path) -> None:
    """kill -9 of `tunescope run`: the command goes on (its parent is the sampler), and the
    trial records its real end and exit code, not a failure at the kill."""
    p, _ = _cli_run(sqlite_url, tmp_path, 3.0, 0)
    time.sleep(0.5)
    t_kill = time.time()
    p.kill()
    _end(p, 10)
    info, code = _cli_trial(sqlite_url)
    assert (info.state, code) == ("completed", 0)
    assert info.end is not None and info.end >= t_kill + 2.0


def test_run_restarts_a_killed_sampler_and_records_the_gap(sqlite_url: str, tmp_path: Path) -> None:
    p, _ = _cli_run(sqlite_url, tmp_path, 4.0, 5)
    with open_store(sqlite_url) as st:
        assert wait_for(lambda: bool(st.list_runs()), 20)
        (trial,) = st.list_trials(st.get_run("cli").id)
    assert wait_for(lambda: bool(samplers_of(trial.key)), 20)
    (first,) = samplers_of(trial.key)
    time.sleep(1.0)
    os.kill(first, signal.SIGKILL)
    assert _end(p, 60) == 5  # the command's code, though its parent died
    info, code = _cli_trial(sqlite_url)
    assert (info.state, code) == ("failed", 5)
    with open_store(sqlite_url) as st:
        gaps_ev = restarts(st.events(info.id, 0, time.time() + 60, kinds=["sampler_gap"]).events)
        t = sample_times(st, info.id, "cpu.procs")
    assert len(gaps_ev) == 1
    assert any(x > gaps_ev[0].t + (gaps_ev[0].duration or 0) for x in t)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sent_to_the_wrapper_reaches_the_command_once(
    sqlite_url: str, tmp_path: Path, sig: int
) -> None:
    p, log = _cli_run(sqlite_url, tmp_path, 2.0, 7)
    p.send_signal(sig)
    assert _end(p, 30) == 7
    assert _signals(log) == [sig]


def test_ctrl_c_in_a_terminal_reaches_the_command_once(sqlite_url: str, tmp_path: Path) -> None:
    """In a real terminal (a pty), Ctrl-C goes to the whole foreground process group: the
    command gets it from the terminal, and the wrapper does not send it a second time."""
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    log = tmp_path / "signals.log"
    argv = [
        sys.executable, "-m", "tunescope", "run", "--store", sqlite_url, "--run", "cli", "--",
        sys.executable, str(script), str(log), "2.0", "7",
    ]  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own on the pty, as a shell would run it
        os.execvp(argv[0], argv)
    try:
        seen = b""
        end = time.monotonic() + 60
        while b"ready" not in seen and time.monotonic() < end:
            if select.select([fd], [], [], 1.0)[0]:
                seen += os.read(fd, 4096)
        assert b"ready" in seen, seen
        os.write(fd, b"\x03")  # Ctrl-C, as typed
        while time.monotonic() < end:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    if not os.read(fd, 4096):
                        break
                except OSError:
                    break
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
        else:
            status = 0
        if not done:
            _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 7
    assert _signals(log) == [signal.SIGINT]


def test_run_output_is_the_commands(sqlite_url: str, tmp_path: Path) -> None:
    """stdin, stdout and stderr are the command's: the wrapper adds one line on stderr."""
    code = "import sys; d = sys.stdin.read(); print(d.upper()); print('err', file=sys.stderr)"
    out = subprocess.run(
        [sys.executable, "-m", "tunescope", "run", "--store", sqlite_url, "--", sys.executable,
         "-c", code],
        input="hello",
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == "HELLO\n"
    lines = out.stderr.splitlines()
    assert "err" in lines and lines[0].startswith("tunescope: run ")
    assert json.dumps(lines)  # nothing binary
