"""The sampler as a process: start and stop protocol, schedule, failures, import cost."""

from __future__ import annotations

import ast
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tunescope.collect
from collect_helpers import (
    Proc,
    StoreSink,
    clean_env,
    make_trial,
    python,
    sampler_args,
    series,
    start_sampler,
    stop_sampler,
)
from tunescope.collect import MIN_INTERVAL, Sampler, failure_message
from tunescope.collect._loop import STARVED
from tunescope.errors import ConfigError
from tunescope.store import open_store

COLLECT_DIR = Path(tunescope.collect.__file__).parent


# ---------------------------------------------------------------------- helpers
def sleeper(procs: list[Proc]) -> Proc:
    p = Proc(["sleep", "120"])
    procs.append(p)
    return p


# ---------------------------------------------------------------------- (e) start and stop
def test_first_sample_at_once_ready_after_it_and_prompt_stop(
    sqlite_url: str, procs: list[Proc]
) -> None:
    """With a 5 s interval the first sample is stored before 'ready' (well within one
    interval of the launch), and 'stop' ends the process in under interval + 1 s: the wait is
    interrupted, not slept out. The trial's state is left alone."""
    trial = make_trial(sqlite_url)
    root = sleeper(procs)
    t_launch = time.time()
    s = Proc(sampler_args(sqlite_url, trial, root.p.pid, 5.0), env=clean_env(sqlite_url))
    procs.append(s)
    assert s.expect() == "ready"
    t, _ = series(sqlite_url, trial, "cpu.procs")  # already in the store at 'ready'
    assert len(t) == 1
    assert t_launch <= t[0] + 0.001 and t[0] - t_launch < 5.0
    time.sleep(0.5)
    t_stop = time.time()
    s.send("stop")
    assert s.p.wait(timeout=30) == 0
    assert time.time() - t_stop < 5.0 + 1.0
    assert s.expect() == "<eof>"  # nothing but 'ready' was printed
    t, _ = series(sqlite_url, trial, "cpu.procs")
    assert len(t) == 2  # the final sample
    with open_store(sqlite_url) as st:
        info = st.get_trial(trial)
        extent = st.series_extent(st.list_series(trial, "cpu.mem")[0].id)
    assert info.state == "running" and info.error is None and info.end is None
    assert info.heartbeat is not None and root.p.pid in info.pids
    assert extent is not None and extent[2] == 2


# ---------------------------------------------------------------------- (f) busy training
def test_busy_or_stopped_training_does_not_skew_sampling(
    sqlite_url: str, procs: list[Proc]
) -> None:
    """The watched process spins in pure Python, then is frozen with SIGSTOP: samples keep
    coming on the 0.2 s schedule throughout. Bounds are loose on purpose (at least half the
    due samples, no gap over 1 s) since other work shares the two cores."""
    trial = make_trial(sqlite_url)
    busy = Proc([sys.executable, "-c", "while True: pass"])
    procs.append(busy)
    s = Proc(sampler_args(sqlite_url, trial, busy.p.pid, 0.2), env=clean_env(sqlite_url))
    procs.append(s)
    assert s.expect() == "ready"
    t_ready = time.time()
    time.sleep(1.5)
    t_freeze = time.time()
    os.kill(busy.p.pid, signal.SIGSTOP)
    time.sleep(1.2)
    t_thaw = time.time()
    os.kill(busy.p.pid, signal.SIGCONT)
    time.sleep(0.3)
    s.send("stop")
    assert s.p.wait(timeout=30) == 0
    t, _ = series(sqlite_url, trial, "cpu.capacity")
    span = t[-1] - t[0]
    assert len(t) >= 0.5 * span / 0.2
    assert np.diff(t).max() < 1.0
    tu, util = series(sqlite_url, trial, "cpu.util")
    _, cap = series(sqlite_url, trial, "cpu.capacity")
    cores = util / 100.0 * cap[1:]
    spinning = cores[(tu > t_ready + 0.3) & (tu < t_freeze)]
    frozen = cores[(tu > t_freeze + 0.5) & (tu < t_thaw)]
    assert len(frozen) >= 2  # sampling went on while the training was stopped
    assert float(np.mean(spinning)) > 0.2  # seen busy (a fair share of a core at least)
    assert float(np.max(frozen)) < 0.05  # and seen frozen


def test_a_locked_store_delays_writes_not_samples(sqlite_url: str, procs: list[Proc]) -> None:
    """Another process holds the SQLite write lock for 2 s (a long transaction in the
    training process): samples keep their 0.2 s schedule and all land once it is released."""
    import sqlite3

    trial = make_trial(sqlite_url)
    root = sleeper(procs)
    s = Proc(sampler_args(sqlite_url, trial, root.p.pid, 0.2), env=clean_env(sqlite_url))
    procs.append(s)
    assert s.expect() == "ready"
    conn = sqlite3.connect(sqlite_url, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        t_lock = time.time()
        time.sleep(2.0)
        t_unlock = time.time()
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    time.sleep(0.3)
    s.send("stop")
    assert s.p.wait(timeout=60) == 0
    t, _ = series(sqlite_url, trial, "cpu.capacity")
    locked = t[(t > t_lock) & (t < t_unlock)]
    assert len(locked) >= 0.5 * 2.0 / 0.2
    assert np.diff(t).max() < 1.0


def test_a_starved_sampler_records_the_slots_it_missed(sqlite_url: str, procs: list[Proc]) -> None:
    """The sampler itself frozen for 1.2 s (SIGSTOP: what a machine too busy to run it does
    to its schedule): the hole it leaves is recorded as a ``sampler_gap`` ("sampler
    starved") spanning it, so every slot is sampled or accounted for; the schedule goes on
    after it."""
    trial = make_trial(sqlite_url)
    root = sleeper(procs)
    s = start_sampler(procs, sqlite_url, trial, root.p.pid, 0.2)
    time.sleep(0.8)
    t_freeze = time.time()
    os.kill(s.p.pid, signal.SIGSTOP)
    time.sleep(1.2)
    t_thaw = time.time()
    os.kill(s.p.pid, signal.SIGCONT)
    time.sleep(0.8)
    stop_sampler(s)
    t, _ = series(sqlite_url, trial, "cpu.capacity")
    with open_store(sqlite_url) as st:
        gaps = [e for e in st.all_events(trial, kinds=["sampler_gap"]) if e.name == STARVED]
    # the hole over the freeze: the longest between two samples (found on the sampler's own
    # axis: the test's clock and the trial's anchor need not agree to the millisecond)
    i = int(np.argmax(np.diff(t)))
    before, after = t[i], t[i + 1]
    assert after - before >= t_thaw - t_freeze - 0.2
    assert any(
        g.t == pytest.approx(before, abs=2e-3)
        and g.t + (g.duration or 0) == pytest.approx(after, abs=2e-3)
        for g in gaps
    ), (before, after, [(g.t, g.duration) for g in gaps])
    # every other hole is between samples of neighbouring slots (a slot passed over would be
    # recorded too): under two intervals
    covered = [(g.t, g.t + (g.duration or 0)) for g in gaps]
    for a, b in itertools.pairwise(t):
        if not any(x - 2e-3 <= a and b <= y + 2e-3 for x, y in covered):
            assert b - a < 2 * 0.2 + 0.05
    assert (t > t_thaw).sum() >= 2  # sampling went on


# ---------------------------------------------------------------------- (g) parent death
HARNESS = """
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
url, trial = sys.argv[1], sys.argv[2]
training = '''
import os, subprocess, sys, time
s = subprocess.Popen([sys.executable, "-m", "tunescope.collect",
                      "--trial", sys.argv[2], "--pid", str(os.getpid()), "--interval", "0.2"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     env=dict(os.environ, TUNESCOPE_STORE=sys.argv[1]))
print(s.pid, s.stdout.readline().decode().strip(), flush=True)
while True:
    time.sleep(1)
'''
t = subprocess.Popen([sys.executable, "-c", training, url, trial], stdout=subprocess.PIPE)
spid, word = t.stdout.readline().split()
time.sleep(0.6)
os.kill(t.pid, signal.SIGKILL)
t.wait()
deadline = time.time() + 30
while True:
    pid, status = os.waitpid(int(spid), os.WNOHANG)
    if pid:
        break
    if time.time() > deadline:
        os.kill(int(spid), signal.SIGKILL)
        status = -1
        break
    time.sleep(0.05)
print(json.dumps({"training": t.pid, "ready": word.decode(),
                  "exit": os.waitstatus_to_exitcode(status) if status != -1 else None}))
"""


def test_killed_training_marks_the_trial_failed(sqlite_url: str) -> None:
    """SIGKILL of the training process (the sampler's parent and the trial's root): the
    sampler sees the root end without a 'stop', takes a final sample, marks the running trial
    failed with the message, and exits 0."""
    trial = make_trial(sqlite_url)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HARNESS), sqlite_url, str(trial)],
        capture_output=True,
        timeout=90,
        env=clean_env(sqlite_url),
        check=True,
    )
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert result["ready"] == "ready"
    assert result["exit"] == 0
    with open_store(sqlite_url) as st:
        info = st.get_trial(trial)
    assert info.state == "failed"
    assert info.error == failure_message(result["training"])
    assert f"training process {result['training']} ended without closing" in info.error
    assert info.end is not None and info.end >= info.start
    t, _ = series(sqlite_url, trial, "cpu.procs")
    assert t[-1] <= info.end


def test_sigint_is_ignored_and_sigterm_stops_in_order(sqlite_url: str, procs: list[Proc]) -> None:
    trial = make_trial(sqlite_url)
    root = sleeper(procs)
    s = Proc(sampler_args(sqlite_url, trial, root.p.pid, 0.2), env=clean_env(sqlite_url))
    procs.append(s)
    assert s.expect() == "ready"
    s.p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert s.p.poll() is None  # Ctrl-C of the training must not end the sampler
    n_before = len(series(sqlite_url, trial, "cpu.procs")[0])
    s.p.send_signal(signal.SIGTERM)
    assert s.p.wait(timeout=30) == 0
    assert len(series(sqlite_url, trial, "cpu.procs")[0]) > n_before
    with open_store(sqlite_url) as st:
        info = st.get_trial(trial)
    assert info.state == "running" and info.error is None


def test_eof_alone_stops_nothing_and_a_finished_trial_keeps_its_state(
    sqlite_url: str, procs: list[Proc]
) -> None:
    """End of input is not a stop (the launcher may have died while the training lives on):
    the sampler goes on while the root lives. When the root ends, a trial someone already
    finished keeps its state."""
    trial = make_trial(sqlite_url)
    root = sleeper(procs)
    s = Proc(sampler_args(sqlite_url, trial, root.p.pid, 0.2), env=clean_env(sqlite_url))
    procs.append(s)
    assert s.expect() == "ready"
    assert s.p.stdin is not None
    s.p.stdin.close()
    n = len(series(sqlite_url, trial, "cpu.procs")[0])
    time.sleep(1.5)
    assert s.p.poll() is None
    assert len(series(sqlite_url, trial, "cpu.procs")[0]) > n  # still sampling
    with open_store(sqlite_url) as st:
        st.update_trial(trial, state="completed", end=time.time())
    root.kill()
    assert s.p.wait(timeout=30) == 0
    with open_store(sqlite_url) as st:
        info = st.get_trial(trial)
    assert info.state == "completed" and info.error is None


DAEMONIZING = """
import os, sys, time
if os.fork() == 0:  # a daemon that outlives the training, holding what it inherited
    os.setsid()
    time.sleep(60)
    os._exit(0)
time.sleep(1.0)
"""


def test_the_trial_ends_with_its_root_even_if_a_forked_daemon_lingers(
    sqlite_url: str, procs: list[Proc]
) -> None:
    trial = make_trial(sqlite_url)
    root = Proc(python(DAEMONIZING))
    procs.append(root)
    s = Proc(sampler_args(sqlite_url, trial, root.p.pid, 0.2), env=clean_env(sqlite_url))
    procs.append(s)
    assert s.expect() == "ready"
    # the root stays a zombie until reaped: the sampler reads its exit code from /proc
    assert s.p.wait(timeout=30) == 0  # the daemon still runs; the sampler is done
    assert root.p.wait(timeout=30) == 0
    with open_store(sqlite_url) as st:
        info = st.get_trial(trial)
        daemons = [p for p in info.pids if p != root.p.pid]
        code = st.exit_code(trial)
    assert (info.state, info.error, code) == ("completed", None, 0)
    for pid in daemons:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------- (k) arguments
def test_interval_under_a_tenth_of_a_second_is_rejected(sqlite_url: str) -> None:
    trial = make_trial(sqlite_url)
    out = subprocess.run(
        sampler_args(sqlite_url, trial, os.getpid(), 0.05),
        env=clean_env(sqlite_url),
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2
    assert out.stdout == b""
    assert b"--interval must be at least 0.1" in out.stderr
    with open_store(sqlite_url) as st:
        assert st.list_series(trial) == []
        with pytest.raises(ConfigError, match=r"at least 0\.1"):
            Sampler(StoreSink(st), "k", os.getpid(), 0.05)
    assert MIN_INTERVAL == 0.1


def test_unknown_trial_exits_1_without_ready(sqlite_url: str) -> None:
    make_trial(sqlite_url)
    out = subprocess.run(
        sampler_args(sqlite_url, 999, os.getpid(), 1.0),
        env=clean_env(sqlite_url),
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 1
    assert out.stdout == b""
    assert b"cannot start" in out.stderr and len(out.stderr.splitlines()) == 1


def test_the_sampler_reads_the_command_line_its_launchers_write() -> None:
    """Both launchers (the SDK's trials, ``tunescope run``) take the sampler's command line
    from ``_protocol.sampler_command``; the sampler's parser reads every field back, and a
    command after ``--exec`` stays whole, options of its own included."""
    from tunescope import _protocol as protocol
    from tunescope.collect._main import parser, split_command

    watch = protocol.sampler_command("k1", 0.5, pid=42, gap_since=12.25, node=True)
    assert watch[:3] == [sys.executable, "-m", "tunescope.collect"]
    own, command = split_command(watch[3:])
    args = parser().parse_args(own)
    assert command is None
    assert (args.trial_key, args.pid, args.interval, args.gap_since) == ("k1", 42, 0.5, 12.25)
    assert args.node and not args.foreground and not args.run_mode
    assert args.status_fd is None and args.stderr_fd is None

    cmd = ["python", "train.py", "--exec", "--pid", "3"]
    run = protocol.sampler_command("k2", 2, status_fd=7, stderr_fd=8, foreground=True, command=cmd)
    own, command = split_command(run[3:])
    args = parser().parse_args(own)
    assert command == cmd
    assert (args.trial_key, args.pid, args.interval, args.gap_since) == ("k2", None, 2.0, None)
    assert (args.status_fd, args.stderr_fd) == (7, 8)
    assert args.foreground and args.run_mode and not args.node


# ---------------------------------------------------------------------- package hygiene
def test_importing_the_package_is_cheap() -> None:
    code = (
        "import sys, tunescope.collect as c; "
        "heavy = [m for m in ('pynvml', 'torch', 'numpy', 'psutil') if m in sys.modules]; "
        "assert not heavy, heavy; "
        "assert c.Sampler.__name__ == 'Sampler' and 'pynvml' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_first_sample_needs_no_heavy_import() -> None:
    """The sampler process takes its first sample before the store (numpy) and the GPU
    library load: its modules and one sample import none of them."""
    code = (
        "import sys, os, time; "
        "from tunescope.collect._main import main; "
        "from tunescope.collect._loop import Sampler; "
        "s = Sampler(None, 'k', os.getpid(), 1.0); s.sample(); "
        "heavy = [m for m in ('pynvml', 'torch', 'numpy', 'psutil') if m in sys.modules]; "
        "assert s.samples == 1 and not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_collect_imports_only_metrics_store_and_errors() -> None:
    allowed = (
        "tunescope.collect",
        "tunescope.metrics",
        "tunescope.store",
        "tunescope.errors",
        "tunescope._once",
        "tunescope._env",
        "tunescope._protocol",
        "tunescope._gpuid",
        "tunescope._clock",
    )
    for path in COLLECT_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name == "tunescope" or name.startswith("tunescope."):
                    assert name.startswith(allowed), f"{path.name} imports {name}"


def test_every_emitted_metric_is_in_the_catalog() -> None:
    from tunescope.collect._gpuprobe import GPU_METRICS
    from tunescope.collect._host import HOST_METRICS
    from tunescope.metrics import metric

    for key in (*HOST_METRICS, *GPU_METRICS):
        assert metric(key).key == key
    assert {metric(k).scope for k in GPU_METRICS} == {"gpu"}
    assert {metric(k).scope for k in HOST_METRICS} <= {"trial", "host", "netns"}


def test_public_names_resolve() -> None:
    for name in tunescope.collect.__all__:
        assert getattr(tunescope.collect, name) is not None
    with pytest.raises(AttributeError):
        _ = tunescope.collect.no_such_name  # type: ignore[attr-defined]
