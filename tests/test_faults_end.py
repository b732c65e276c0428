"""The end of a trial, for real (issue 18, rules 4, 6 and 7): the end is never lost (handed to
the sampler when the store and the spool cannot take it; written by `tunescope run`'s wrapper
when its samplers died past their restarts), states say what happened (the kernel's OOM
killer in a real memory cgroup, a CUDA out-of-memory error, an exec()), and a signal reaches
the command once however it is sent (a terminal's Ctrl-C and hang-up, a kill of the wrapper,
a SIGTERM to the wrapper's process group), sparing the sampler.

Each test with a training counts what was kept: its marks and scalars one for one, samples
against the seconds the sampler was alive, the final state, reason and exit code."""

from __future__ import annotations

import json
import math
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fault_helpers
from fault_helpers import SqliteLock, sample_times, samplers_of, settled, wait_for
from tunescope._protocol import OOM_CUDA, OOM_KERNEL
from tunescope.analyze import findings_for_trial
from tunescope.record import EXIT_WAIT_S, MAX_RESTARTS
from tunescope.store import TrialInfo, open_store

pytestmark = [pytest.mark.faults, pytest.mark.slow]

INTERVAL = 0.5
"""The signal tests' sampling interval: on this 2-core machine, shared, a process may wait a
few hundred ms for a CPU, which at 0.2 s would skip slots the fault had nothing to do with."""
FAST = 0.2
"""The interval where the count of samples is not asserted (OOM, exec)."""
SAMPLES_KEPT = 0.98
"""Samples kept against the sampler's schedule over the seconds it was alive (issue 18)."""

# ---------------------------------------------------------------------- a counting command
COMMAND = """
import json, os, signal, sys, time
import tunescope.record as ts

out, seconds, code = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
os.dup2(os.open(out + ".err", os.O_WRONLY | os.O_CREAT | os.O_APPEND), 2)  # what a tty loses
seen = []
def count(signum, frame):
    seen.append(signum)
    with open(out + ".signals", "a") as f:
        f.write(f"{signum}\\n")
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, count)
trial = ts.current_trial()  # the trial of `tunescope run`, joined
print("ready", flush=True)
marks, k = 0, 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    trial.mark(f"m{k}")
    trial.log(step=k, loss=float(k))
    marks += 1
    k += 1
    time.sleep(0.05)
try:
    fg = os.tcgetpgrp(0)
except OSError:  # no terminal, or one hung up
    fg = None
with open(out, "w") as f:
    json.dump({"marks": marks, "pid": os.getpid(), "pgid": os.getpgrp(), "fg": fg}, f)
sys.exit(code)
"""
"""Joins `tunescope run`'s trial, counts SIGINT, SIGTERM and SIGHUP in OUT.signals, marks and
logs every 50 ms for SECONDS, writes what it did to OUT (never to the terminal, which a
hang-up takes away) and exits with CODE. Arguments: OUT SECONDS CODE."""


def _argv(url: str, tmp_path: Path, seconds: float, code: int) -> list[str]:
    script = tmp_path / "command.py"
    script.write_text(COMMAND)
    return [
        sys.executable, "-m", "tunescope", "run", "--store", url, "--run", "cli",
        "--interval", str(INTERVAL), "--", sys.executable, str(script),
        str(tmp_path / "did.json"), str(seconds), str(code),
    ]  # fmt: skip


def _signals(tmp_path: Path) -> list[int]:
    f = tmp_path / "did.json.signals"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def _did(tmp_path: Path) -> dict[str, Any]:
    did: dict[str, Any] = json.loads((tmp_path / "did.json").read_text())
    return did


def _cli_trial(url: str) -> TrialInfo:
    with open_store(url, create=False) as st:
        assert wait_for(lambda: bool(st.list_runs()), 30)
        (info,) = st.list_trials(st.get_run("cli").id)
    return info


def _ended(url: str, key: str) -> tuple[TrialInfo, int | None]:
    """The trial once its samplers are done, and its exit code."""
    settled(url, key)
    with open_store(url, create=False) as st:
        info = st.trial_by_key(key)
        return info, st.exit_code(info.id)


def _kept(url: str, info: TrialInfo, marks: int, *, samples: bool = True) -> None:
    """Every mark and scalar of the command, once; samples on the sampler's schedule over the
    trial's life (outside recorded gaps)."""
    with open_store(url, create=False) as st:
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"], limit=10**6).events
        assert ev is not None
        assert len(ev) == marks == len({e.name for e in ev}), (len(ev), marks)
        steps = [s.step for s in st.scalars(info.id, "loss")]
        assert sorted(steps) == list(range(marks)), len(steps)
        if not samples:
            return
        t = sample_times(st, info.id, "cpu.procs")
        gaps = st.events(info.id, 0, time.time() + 60, kinds=["sampler_gap"]).events or []
    assert len(t) == len(set(t))  # no duplicates
    assert info.end is not None
    span = t[-1] - t[0] - sum(g.duration or 0.0 for g in gaps)
    expected = (
        math.floor(span / INTERVAL) + 1
    )  # the slots of the schedule (the final one at the end)
    assert len(t) >= SAMPLES_KEPT * expected, (len(t), expected)


def _start(
    url: str, tmp_path: Path, seconds: float, code: int, **popen: Any
) -> tuple[subprocess.Popen[str], str]:
    """`tunescope run` of the counting command, once it is ready; (the wrapper, trial key)."""
    p = subprocess.Popen(
        _argv(url, tmp_path, seconds, code),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    _wait_ready(p)
    return p, _cli_trial(url).key


def _wait_ready(p: subprocess.Popen[str]) -> None:
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    assert line == "ready", (line, p.stderr.read() if p.stderr else "")


# ---------------------------------------------------------------------- rule 7: signals
def test_a_group_sigterm_reaches_the_command_once_and_spares_the_sampler(
    sqlite_url: str, tmp_path: Path
) -> None:
    """SIGTERM to the wrapper's whole process group (systemd's stop, Slurm's scancel,
    `timeout`): the command, in a group of its own, gets it once (forwarded), the sampler is
    not stopped by it and records the command's end and code."""
    # the wrapper leads a group, as a shell's job or a unit's main process
    p, key = _start(sqlite_url, tmp_path, 5.0, 7, process_group=0)
    assert wait_for(lambda: bool(samplers_of(key)), 20)
    (sampler,) = samplers_of(key)
    assert os.getpgid(sampler) != p.pid  # the sampler is not in the group signalled
    os.killpg(p.pid, signal.SIGTERM)
    time.sleep(0.5)
    assert samplers_of(key) == [sampler]  # alive after the group's SIGTERM
    p.communicate(timeout=60)
    assert p.returncode == 7
    assert _signals(tmp_path) == [signal.SIGTERM]
    did = _did(tmp_path)
    assert did["pgid"] == did["pid"] != p.pid  # the command leads its own group
    info, code = _ended(sqlite_url, key)
    assert (info.state, info.error, code) == ("failed", "exited with code 7", 7)
    _kept(sqlite_url, info, did["marks"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_wrappers_pid_reaches_the_command_once(
    sqlite_url: str, tmp_path: Path, sig: int
) -> None:
    p, key = _start(sqlite_url, tmp_path, 4.0, 0)
    p.send_signal(sig)
    p.communicate(timeout=60)
    assert p.returncode == 0
    assert _signals(tmp_path) == [sig]
    info, code = _ended(sqlite_url, key)
    assert (info.state, code) == ("completed", 0)
    _kept(sqlite_url, info, _did(tmp_path)["marks"])


def _in_a_terminal(argv: list[str], act: str) -> tuple[int, bytes]:
    """Run ``argv`` as a shell would in a terminal of its own (a pty; it leads the session
    and the foreground group); once it printed ``ready``, type Ctrl-C (``act`` "ctrl-c") or
    hang the terminal up (``act`` "hangup": the master side closes). Its exit code and what
    it printed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own on the pty
        os.execvp(argv[0], argv)
    seen = b""
    closed = False
    try:
        end = time.monotonic() + 60
        while b"ready\r\n" not in seen and time.monotonic() < end:  # the whole line written
            if select.select([fd], [], [], 1.0)[0]:
                seen += os.read(fd, 4096)
        assert b"ready\r\n" in seen, seen
        if act == "ctrl-c":
            os.write(fd, b"\x03")  # as typed
        else:
            os.close(fd)
            closed = True
        while time.monotonic() < end:
            if not closed and select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    pass
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), seen
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"the wrapper did not end: {seen!r}")
    finally:
        if not closed:
            os.close(fd)


@pytest.mark.parametrize("act", ["ctrl-c", "hangup"])
def test_a_terminals_ctrl_c_and_hangup_reach_the_command_once(
    sqlite_url: str, tmp_path: Path, act: str
) -> None:
    """In a real terminal: the command's group is the terminal's foreground group, so Ctrl-C
    reaches the command alone (once); a hang-up reaches the session leader, the wrapper,
    which forwards it (once)."""
    code, seen = _in_a_terminal(_argv(sqlite_url, tmp_path, 4.0, 4), act)
    err = tmp_path / "did.json.err"
    assert code == 4, (seen, err.read_text() if err.exists() else None)
    want = signal.SIGINT if act == "ctrl-c" else signal.SIGHUP
    assert _signals(tmp_path) == [want]
    did = _did(tmp_path)
    if act == "ctrl-c":
        assert did["fg"] == did["pgid"] == did["pid"]  # the command held the terminal
    info, ec = _ended(sqlite_url, _cli_trial(sqlite_url).key)
    assert (info.state, info.error, ec) == ("failed", "exited with code 4", 4)
    _kept(sqlite_url, info, did["marks"])


# ---------------------------------------------------------------------- rule 4: the end is kept
def test_the_wrapper_records_the_exit_code_once_its_samplers_died_past_their_restarts(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Every sampler of the trial is killed as soon as it appears, past the restarts: no
    sampler is left when the command ends, and the wrapper writes the end and code itself,
    exiting with the command's code at once."""
    p, key = _start(sqlite_url, tmp_path, 6.0, 5)
    killed: set[int] = set()
    deadline = time.monotonic() + 30
    while len(killed) < MAX_RESTARTS + 1 and time.monotonic() < deadline:
        for pid in samplers_of(key):
            if pid not in killed:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.05)
    assert len(killed) == MAX_RESTARTS + 1  # the run-mode sampler and each restart
    time.sleep(1.0)
    assert not samplers_of(key)  # none restarted past the limit
    assert p.poll() is None  # the command still runs
    _out, err = p.communicate(timeout=60)
    held = time.time() - (tmp_path / "did.json").stat().st_mtime  # the command's last act
    assert p.returncode == 5, err
    assert "keeps dying" in err
    assert held < EXIT_WAIT_S + 1.5, held  # the wrapper's own write is bounded like an exit
    with open_store(sqlite_url, create=False) as st:
        info = st.trial_by_key(key)
        code = st.exit_code(info.id)
    assert (info.state, info.error, code) == ("failed", "exited with code 5", 5)
    _kept(sqlite_url, info, _did(tmp_path)["marks"], samples=False)


SDK_END = """
import sys, time
import tunescope.record as ts
store, sampler = sys.argv[1], sys.argv[2] == "sampler"
run = ts.run("end", store=store, interval=0.2, sampler=sampler)
t = run.trial("t").__enter__()
for k in range(20):
    t.mark(f"m{k}")
    time.sleep(0.02)
print("in", flush=True)
sys.stdin.readline()
a = time.monotonic()
t.__exit__(None, None, None)
print(round(time.monotonic() - a, 3), flush=True)
print(t.key, flush=True)
"""


@pytest.mark.parametrize("sampler", ["sampler", "none"])
def test_a_trials_end_the_store_and_spool_cannot_take_is_handed_to_the_sampler(
    sqlite_url: str, tmp_path: Path, sampler: str
) -> None:
    """The store is locked across the trial's end and the spool cannot be written: leaving
    the trial still returns within its bound; the end is handed to the sampler, which writes
    it once the store is back. Without a sampler nothing can keep it, and the training says
    so on stderr."""
    open_store(sqlite_url).close()
    env = dict(os.environ, TUNESCOPE_SPOOL="/dev/null/spool", TUNESCOPE_LINGER="60")
    p = subprocess.Popen(
        [sys.executable, "-c", SDK_END, sqlite_url, sampler],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert p.stdin is not None and p.stdout is not None
    assert p.stdout.readline().strip() == "in"
    time.sleep(1.5)  # the marks and the trial are in the store
    with SqliteLock(sqlite_url):
        p.stdin.write("\n")
        p.stdin.flush()
        leave = float(p.stdout.readline())
        key = p.stdout.readline().strip()
        _out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        time.sleep(1.0)
    assert leave <= 1.0
    lost = "the end of trial t (completed) was not kept"
    if sampler == "none":
        assert lost in err, err
        with open_store(sqlite_url) as st:
            assert st.trial_by_key(key).state == "running"
        return
    assert lost not in err, err
    info, _code = _ended(sqlite_url, key)
    assert info.state == "completed" and info.error is None
    assert info.end is not None and info.end < time.time() - 1.0  # the end's own time


# ---------------------------------------------------------------------- rule 6: states
@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A new memory cgroup limited to 96 MiB (see :func:`fault_helpers.memory_cgroup`)."""
    with fault_helpers.memory_cgroup(96 << 20) as d:
        yield d


HOG = """
import sys, time
time.sleep(float(sys.argv[1]))  # the sampler sees the process in its cgroup first
held = []
while True:
    held.append(b"x" * (2 << 20))
    time.sleep(0.02)
"""


def _oom_finding(url: str, info: TrialInfo, kind: str) -> dict[str, Any]:
    with open_store(url, create=False) as st:
        found = [f for f in findings_for_trial(st, info) if f.rule == "oom"]
    assert len(found) == 1
    f = found[0]
    assert f.severity == "high" and f.evidence["kind"] == kind
    return f.to_dict()  # type: ignore[no-any-return]


def test_a_command_the_oom_killer_ends_is_failed_out_of_memory(
    sqlite_url: str, tmp_path: Path, memory_cgroup: Path
) -> None:
    """`tunescope run -- sh -c 'move into a 96 MiB cgroup; exec python hog'`: the kernel's
    OOM killer ends the command (an exec()'d one: the same pid); the trial ends failed, out
    of memory (killed by the kernel), code 137, and the oom finding shows the last minute of
    its memory."""
    hog = tmp_path / "hog.py"
    hog.write_text(HOG)
    sh = f"echo $$ > {memory_cgroup}/cgroup.procs && exec {sys.executable} {hog} 1.5"
    out = subprocess.run(
        [sys.executable, "-m", "tunescope", "run", "--store", sqlite_url, "--run", "cli",
         "--interval", str(FAST), "--", "sh", "-c", sh],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 128 + signal.SIGKILL, out.stderr
    info, code = _ended(sqlite_url, _cli_trial(sqlite_url).key)
    assert (info.state, info.error, code) == ("failed", OOM_KERNEL, 137)
    f = _oom_finding(sqlite_url, info, "kernel")
    points = f["evidence"]["last_minute"]
    assert len(points) >= 5 and f["metric"] == "cpu.mem"
    assert max(v for _t, v in points) > 32 << 20  # it held memory before the kill
    assert all(info.end - 61 <= t <= info.end + 1 for t, _v in points)
    assert f["advice"][0].startswith("Raise the trial's memory limit")


SDK_OOM = """
import os, sys, time
import tunescope.record as ts
store, cgroup = sys.argv[1], sys.argv[2]
run = ts.run("sdk", store=store, interval=0.2)
with run.trial("t") as t:
    for k in range(10):
        t.mark(f"m{k}")
    time.sleep(1.5)  # flushed
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:  # the sampler stays out
        f.write(str(os.getpid()))
    print(t.key, flush=True)
    time.sleep(3.0)  # the sampler reads the cgroup again (at most every second; a busy machine)
    held = []
    while True:
        held.append(b"x" * (2 << 20))
        time.sleep(0.02)
"""


def test_an_sdk_training_the_oom_killer_ends_is_failed_out_of_memory(
    sqlite_url: str, memory_cgroup: Path
) -> None:
    """The SDK's training moves itself into a 96 MiB cgroup once its trial started and is
    killed there by the kernel: its sampler (outside) records the end: failed, out of memory
    (killed by the kernel); the marks before are kept."""
    p = subprocess.Popen(
        [sys.executable, "-c", SDK_OOM, sqlite_url, str(memory_cgroup)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    key = p.stdout.readline().strip()
    assert key, p.stderr.read() if p.stderr else ""
    # the training's parent (this test) reaps it only once the trial ended
    with open_store(sqlite_url) as st:
        assert wait_for(lambda: st.trial_by_key(key).state != "running", 60)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL
    info, code = _ended(sqlite_url, key)
    assert (info.state, info.error, code) == ("failed", OOM_KERNEL, 137)
    with open_store(sqlite_url) as st:
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"]).events
    assert ev is not None and len(ev) == 10
    _oom_finding(sqlite_url, info, "kernel")


CUDA_OOM = """
import sys, torch
import tunescope.record as ts
with ts.run("cuda", store=sys.argv[1], interval=0.2) as run, run.trial("t") as t:
    print(t.key, flush=True)
    for k in range(5):
        t.mark(f"m{k}")
    if torch.cuda.is_available():  # the real thing: ask for more than the device has
        x = torch.empty(1 << 20, device="cuda")
        torch.empty(torch.cuda.get_device_properties(0).total_memory * 2, dtype=torch.uint8,
                    device="cuda")
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
"""


def test_a_cuda_out_of_memory_error_ends_the_trial_failed_out_of_memory(
    sqlite_url: str,
) -> None:
    """torch.cuda.OutOfMemoryError leaving the trial (raised for real on a GPU; on the CPU
    the error torch's CPU build has): failed, out of memory (CUDA), the allocator's peak when
    CUDA ran, and an oom finding with the GPU advice."""
    out = subprocess.run(
        [sys.executable, "-c", CUDA_OOM, sqlite_url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 1 and "OutOfMemoryError" in out.stderr, out.stderr
    key = out.stdout.strip().splitlines()[0]
    info, _code = _ended(sqlite_url, key)
    assert info.state == "failed" and info.error is not None
    assert info.error.startswith(OOM_CUDA + "; "), info.error
    assert "OutOfMemoryError: CUDA out of memory" in info.error
    import torch

    if torch.cuda.is_available():
        assert "allocator peak" in info.error
    with open_store(sqlite_url) as st:
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"]).events
    assert ev is not None and len(ev) == 5
    f = _oom_finding(sqlite_url, info, "cuda")
    assert f["advice"][0].startswith("Lower the per-device batch size")


@pytest.mark.ml
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_cuda_oom_in_the_hf_trainer_ends_its_trial_out_of_memory(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The Trainer callback's trial sees the CUDA OOM a training step raised."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from test_integrations_hf import _model, _trainer
    from tunescope.integrations.hf import TunescopeCallback

    class Oom(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")

    tokenizer = AutoTokenizer.from_pretrained(_model())
    trainer = _trainer(
        tokenizer, tmp_path, [TunescopeCallback("hf-oom", store=sqlite_url, sampler=False), Oom()]
    )
    with pytest.raises(torch.cuda.OutOfMemoryError):
        trainer.train()
    with open_store(sqlite_url) as st:
        (info,) = st.list_trials(st.get_run("hf-oom").id)
    assert info.state == "failed" and info.error is not None
    assert info.error.startswith(OOM_CUDA), info.error


EXEC_SDK = """
import os, sys, time
import tunescope.record as ts
run = ts.run("exec", store=sys.argv[1], interval=0.2)
t = run.trial("t").__enter__()
for k in range(10):
    t.mark(f"m{k}")
time.sleep(1.5)  # drained by the flusher
t.writer.flush(10)
print(t.key, flush=True)
os.execvp("sh", ["sh", "-c", "sleep 2; exit 3"])
"""

EXEC_CLI = """
import os, sys
import tunescope.record as ts
t = ts.current_trial()
for k in range(10):
    t.mark(f"m{k}")
t.__exit__(None, None, None)  # a joined trial's last flush, as at exit
os.execvp("sh", ["sh", "-c", "sleep 2; exit 3"])
"""


@pytest.mark.parametrize("how", ["sdk", "tunescope run"])
def test_a_training_that_execs_ends_as_the_new_program_ends(sqlite_url: str, how: str) -> None:
    """exec() keeps the pid: the trial goes on while the new program runs and ends with its
    end and exit code, not failed at the exec."""
    t_exec = time.time()
    if how == "sdk":
        p = subprocess.Popen(
            [sys.executable, "-c", EXEC_SDK, sqlite_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert p.stdout is not None
        key = p.stdout.readline().strip()
        assert key, p.stderr.read() if p.stderr else ""
        t_exec = time.time()
        time.sleep(1.0)
        with open_store(sqlite_url) as st:
            assert st.trial_by_key(key).state == "running"  # not ended at the exec
            # the parent (this test) reaps it once the sampler saw its end
            assert wait_for(lambda: st.trial_by_key(key).state != "running", 60)
        p.communicate(timeout=30)
        assert p.returncode == 3
    else:
        out = subprocess.run(
            [sys.executable, "-m", "tunescope", "run", "--store", sqlite_url, "--run", "cli",
             "--interval", str(FAST), "--", sys.executable, "-c", EXEC_CLI],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert out.returncode == 3, out.stderr
        key = _cli_trial(sqlite_url).key
    info, code = _ended(sqlite_url, key)
    assert (info.state, info.error, code) == ("failed", "exited with code 3", 3)
    assert info.end is not None and info.end >= t_exec + 1.5  # the new program's end
    with open_store(sqlite_url) as st:
        ev = st.events(info.id, 0, time.time() + 60, kinds=["mark"]).events
        t = sample_times(st, info.id, "cpu.procs")
    assert ev is not None and len(ev) == 10
    assert any(x > t_exec + 1.0 for x in t)  # sampled the new program too


def test_the_end_line_carries_what_the_sampler_needs() -> None:
    """The protocol's ``end JSON`` line, both sides: what the launcher writes is what the
    sampler reads, as a copy that changes nothing once the trial ended."""
    from tunescope.collect._loop import parse_end
    from tunescope.record._launch import end_line
    from tunescope.store import TrialEnd

    end = TrialEnd("failed", 1700000000.25, OOM_CUDA + "; x", exit_code=None)
    word, _, arg = end_line(end).partition(" ")
    assert word == "end"
    back = parse_end(arg)
    assert (back.state, back.t, back.error, back.exit_code) == (end.state, end.t, end.error, None)
    assert back.only_if_running
    for bad in ('{"state": "lost", "t": 1}', '{"state": "failed"}', "[1]", "nan"):
        with pytest.raises((ValueError, KeyError, TypeError)):
            parse_end(bad)


def test_the_oom_counter_is_read_from_v1_and_v2_files() -> None:
    from tunescope.collect._cgroup import parse_oom_kill

    v2 = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"
    assert parse_oom_kill(v2) == 2 and parse_oom_kill(v1) == 5
    assert parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n") is None  # before Linux 4.13


def test_the_oom_finding_shows_the_allocators_last_minute_on_the_fullest_gpu(db: Any) -> None:
    """The rule on stored data: the CUDA kind reads torch.mem.allocated (before gpu.mem) on
    the GPU that held the most, only the window before the end, and finds nothing for a
    trial that failed otherwise."""
    from tunescope.analyze import FindingSettings

    t0 = 1_700_000_000.0
    run = db.ensure_run("oom", start=t0)
    tr = db.create_trial(run.id, "t", {}, start=t0, interval=1.0)
    for dev, top in (("0", 2.0), ("1", 9.0)):
        sid = db.series(tr.id, "torch.mem.allocated", dev).id
        db.append_samples([(sid, t0 + k, top * 2**30 * k / 120) for k in range(121)])
    other = db.create_trial(run.id, "u", {}, start=t0, interval=1.0)
    db.update_trial(other.id, state="failed", end=t0 + 120, error="RuntimeError: no")
    db.update_trial(tr.id, state="failed", end=t0 + 120, error=OOM_CUDA + "; x")
    assert [f for f in findings_for_trial(db, other.id) if f.rule == "oom"] == []
    (f,) = [f for f in findings_for_trial(db, tr.id) if f.rule == "oom"]
    assert (f.metric, f.device, f.t0, f.t1) == ("torch.mem.allocated", "1", t0 + 60, t0 + 120)
    pts = f.evidence["last_minute"]
    assert [t for t, _v in pts] == [t0 + k for k in range(60, 121)]
    assert f.evidence["peak_bytes"] == 9.0 * 2**30
    short = FindingSettings(oom_window_s=10)
    (g,) = [g for g in findings_for_trial(db, tr.id, short) if g.rule == "oom"]
    assert len(g.evidence["last_minute"]) == 11
