"""The real `tunescope` command, run as a subprocess the way a user runs it."""

from __future__ import annotations

import csv
import http.client
import io
import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import cli, one_line_error
from store_helpers import damage_chunk
from tunescope.store import CHUNK_SAMPLES, Event, open_store
from tunescope.store.sql._schema import SCHEMA_VERSION


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["runs", "--store", "mysql://db"], "unknown store URL 'mysql://db'"),
        (["runs", "--store", "/proc/nope/x.db"], "no store at /proc/nope/x.db"),
        (["run", "--param", "lr", "--", "true"], "malformed --param 'lr'"),
        (["run", "--param", "=3", "--", "true"], "malformed --param '=3'"),
        (["run", "--"], "no command given"),
        (["run", "--", "no-such-command-xyz"], "command not found: no-such-command-xyz"),
        (["run", "--interval", "0.01", "--", "true"], "--interval 0.01 is out of range"),
        (["export", "nope"], "no store at"),  # read commands never create a store
        (["export", "nope", "--format", "xml"], "unknown --format 'xml'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    p = cli(*args, cwd=tmp_path)
    one_line_error(p, needle)
    assert list(tmp_path.iterdir()) == []


def test_corrupt_and_newer_databases_are_refused_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"\x00garbage" * 512)
    p = cli("runs", "--store", str(bad))
    one_line_error(p, "not a tunescope database or is corrupt")
    assert bad.read_bytes() == b"\x00garbage" * 512
    newer = tmp_path / "newer.db"
    open_store(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
    )
    conn.commit()
    conn.close()
    p = cli("run", "--store", str(newer), "--", "true")
    one_line_error(p, "newer than this tunescope understands")
    with sqlite3.connect(newer) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


def test_export_skips_a_damaged_chunk_with_one_warning_and_exit_0(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    n = 2 * CHUNK_SAMPLES + 88  # two chunks and pending samples
    with open_store(db) as st:
        tid = st.create_trial(st.ensure_run("r", start=1e9).id, "t", start=1e9).id
        cpu = st.series(tid, "cpu.util").id
        gpu = st.series(tid, "gpu.util", "0").id
        st.append_samples((sid, 1e9 + k, float(k)) for k in range(n) for sid in (cpu, gpu))
    lo, hi = damage_chunk(str(db), cpu, 1)
    p = cli("export", "r", "--store", str(db))
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        "tunescope: warning: series cpu.util of trial 't' in run 'r': 1 damaged chunk could "
        "not be decoded and was skipped; the rest is used"
    ]
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    gpu_t = [float(r["t"]) for r in rows if r["metric"] == "gpu.util"]
    cpu_t = [float(r["t"]) for r in rows if r["metric"] == "cpu.util"]
    assert gpu_t == [1e9 + k for k in range(n)]
    assert cpu_t == [1e9 + k for k in range(n) if not lo <= 1e9 + k <= hi]
    assert len(cpu_t) == n - CHUNK_SAMPLES
    js = cli("export", "r", "--store", str(db), "--format", "json")
    assert js.returncode == 0 and len(js.stderr.splitlines()) == 1
    assert len(json.loads(js.stdout)["samples"]) == 2 * n - CHUNK_SAMPLES
    healthy = cli("export", "r", "--store", str(db), "--metric", "gpu.util")
    assert healthy.returncode == 0 and healthy.stderr == ""


def test_help_lists_every_command() -> None:
    p = cli("--help")
    assert p.returncode == 0
    for name in ("run", "runs", "trials", "export", "metrics", "demo", "ui"):
        assert name in p.stdout


def test_names_with_control_characters_print_as_escapes(tmp_path: Path) -> None:
    """A run named with an escape sequence and a newline, a trial with a tab and a param
    with a terminal-title sequence: every command prints them escaped, each table row on
    one line, and no control byte reaches the terminal."""
    db = tmp_path / "t.db"
    t0 = 1_700_000_000.0
    with open_store(db) as st:
        evil = st.ensure_run("evil\x1b[2J\nname", start=t0)
        tr = st.create_trial(evil.id, "tab\tbed", {"note": "a\x1b]0;pwned\x07b"}, start=t0)
        st.update_trial(tr.id, state="completed", end=t0 + 60)
        st.ensure_run("plain", start=t0 - 100)

    def clean(text: str) -> str:
        assert all(c == "\n" or c.isprintable() for c in text), repr(text)
        return text

    runs = cli("runs", "--store", str(db))
    assert runs.returncode == 0, runs.stderr
    head, rule, *rows = clean(runs.stdout).splitlines()
    assert set(rule) == {"-", " "} and len(rows) == 2  # one line per run
    assert rows[0].startswith("evil\\x1b[2J\\nname  ") and rows[1].startswith("plain  ")
    col = head.index("state")
    assert rows[0].index("completed") == col and rows[1].index("empty") == col
    trials = cli("trials", str(evil.id), "--store", str(db))
    assert trials.returncode == 0, trials.stderr
    head, rule, *rows = clean(trials.stdout).splitlines()
    assert set(rule) == {"-", " "} and len(rows) == 1 and rows[0].startswith("tab\\tbed  ")
    assert rows[0].index("completed") == head.index("state")
    assert rows[0].endswith("note=a\\x1b]0;pwned\\x07b")
    report = cli("report", str(evil.id), "--store", str(db))
    assert report.returncode == 0, report.stderr
    assert "Trial tab\\tbed [completed]" in clean(report.stdout)
    assert "params: note=a\\x1b]0;pwned\\x07b" in report.stdout
    # an error message that quotes a name as it was given
    bad = cli("runs", "--store", str(tmp_path / "gone\x1b[2J" / "x.db"))
    one_line_error(bad, "gone\\x1b[2J")
    clean(bad.stderr)


def _status(port: int, host: str) -> int:
    """The status of GET /api/health at 127.0.0.1:port sent with this Host header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/api/health", headers={"Host": host})
        return conn.getresponse().status
    finally:
        conn.close()


def test_ui_on_a_wildcard_answers_localhost_and_allowed_names_only(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    open_store(db).close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    args = ["ui", "--store", str(db), "--host", "0.0.0.0", "--port", str(port)]
    args += ["--allow-host", "gpubox", "--allow-host", "GPUbox.lab.example"]
    with (tmp_path / "server.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tunescope", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        assert proc.stdout is not None
        # the URL to open names localhost: the wildcard address names no host
        assert proc.stdout.readline().startswith(f"Open http://localhost:{port}/ ")
        deadline = time.monotonic() + 60
        while True:
            try:
                first = _status(port, f"localhost:{port}")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "server.log"
                ).read_text()
                time.sleep(0.2)
        assert first == 200
        for host in (f"127.0.0.1:{port}", f"gpubox:{port}", "gpubox.lab.example"):
            assert _status(port, host) == 200, host
        for host in (f"evil.example:{port}", f"0.0.0.0:{port}", f"gpubox.evil.example:{port}"):
            assert _status(port, host) == 400, host
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


CHILD = """
import sys, time
buf = bytearray(200 * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
t = time.process_time()
while time.process_time() - t < 1.0:
    pass
time.sleep(1.0)
sys.exit(int(sys.argv[1]))
"""


def _wakeups_and_ticks(pid: int) -> tuple[int, int]:
    """(context switches of every thread of ``pid``, its user + system CPU in clock ticks)."""
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                switches += int(line.split()[1])
    fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    return switches, int(fields[11]) + int(fields[12])


def test_run_wrapper_sleeps_while_the_command_runs(tmp_path: Path) -> None:
    """While the command runs, `tunescope run`'s wrapper sleeps on descriptors (signals, the
    sampler's status pipe, its pidfd): over 3 s it wakes a handful of times at most, where
    polling every 50 ms woke about 60 times. Counted in context switches (each wake-up is one,
    a loaded machine adds none to a sleeping process) and CPU ticks, never in wall time; it
    still passes the command's exit code."""
    script = tmp_path / "sleeper.py"
    script.write_text("import sys, time\nprint('ready', flush=True)\ntime.sleep(5)\nsys.exit(4)\n")
    p = subprocess.Popen(
        [sys.executable, "-m", "tunescope", "run", "--store", str(tmp_path / "t.db"), "--run",
         "r", "--", sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        time.sleep(0.5)  # the sampler's first lines to the wrapper (pid) are read by now
        switches, ticks = _wakeups_and_ticks(p.pid)
        time.sleep(3.0)
        switches2, ticks2 = _wakeups_and_ticks(p.pid)
        assert switches2 - switches <= 10, switches2 - switches
        assert ticks2 - ticks <= 5, ticks2 - ticks
        _, err = p.communicate(timeout=60)
        assert p.returncode == 4, err
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()


def test_run_records_a_command_and_passes_its_exit_code(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    ok = cli(
        "run",
        "--store",
        str(db),
        "--run",
        "r",
        "--trial",
        "good",
        "--param",
        "lr=0.001",
        "--param",
        "tag=base",
        "--interval",
        "0.25",
        "--",
        sys.executable,
        str(script),
        "0",
    )
    assert ok.returncode == 0, ok.stderr
    bad = cli("run", "--store", str(db), "--run", "r", "--", sys.executable, str(script), "3")
    assert bad.returncode == 3
    with open_store(db) as st:
        run = st.get_run("r")
        good, failed = st.list_trials(run.id)
        assert (good.name, good.state, good.params) == (
            "good",
            "completed",
            {"lr": 0.001, "tag": "base"},
        )
        assert (failed.name, failed.state, failed.error) == (
            "trial-1",
            "failed",
            "exited with code 3",
        )
        assert st.exit_code(failed.id) == 3
        mem = st.list_series(good.id, "cpu.mem")[0]
        _, values = st.read_samples(mem.id)
        # the child touched 200 MiB; the sampler saw it in its process tree
        assert values.max() > 200 * 1024**2
        cpu = st.list_series(good.id, "cpu.util")[0]
        assert st.read_samples(cpu.id)[1].max() > 10
    again = cli("run", "--store", str(db), "--run", "r", "--trial", "good", "--", "true")
    one_line_error(again, "already has a trial named 'good'")

    runs = cli("runs", "--store", str(db))
    assert runs.returncode == 0 and "r" in runs.stdout and "failed" in runs.stdout
    table = cli("trials", "r", "--store", str(db))
    assert table.returncode == 0
    assert "good" in table.stdout and "completed" in table.stdout and "lr=0.001" in table.stdout

    exp = cli("export", "r", "--store", str(db), "--trial", "good", "--metric", "cpu.mem")
    assert exp.returncode == 0, exp.stderr
    rows = list(csv.DictReader(io.StringIO(exp.stdout)))
    assert rows and list(rows[0]) == [
        *("run", "trial", "metric", "host", "device", "t", "elapsed_s", "value")
    ]
    assert {r["host"] for r in rows} == {socket.gethostname()}  # the sampler's host
    assert {r["metric"] for r in rows} == {"cpu.mem"} and {r["trial"] for r in rows} == {"good"}
    assert max(float(r["value"]) for r in rows) > 200 * 1024**2
    js = cli("export", "r", "--store", str(db), "--format", "json")
    data = json.loads(js.stdout)
    assert {s["trial"] for s in data["samples"]} == {"good", "trial-1"}
    assert data["events"] == []


def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    open_store(db).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = cli("ui", "--store", str(db), "--port", str(port))
    one_line_error(p, f"cannot listen on 127.0.0.1:{port}")
    assert p.stdout == ""  # no "Open http://…" for a page that never came up


def test_damaged_json_in_a_trial_row_degrades_every_read(tmp_path: Path) -> None:
    """A trial row whose params, pids or an event's data no longer parse (a hand edit, a
    damaged page): every read command still answers, showing what could not be read."""
    db = tmp_path / "s.db"
    with open_store(db) as st:
        tid = st.create_trial(st.ensure_run("r").id, "t", {"lr": 0.1}).id
        st.add_events([Event(tid, "mark", 1.0, "m", data={"k": 1})])
    conn = sqlite3.connect(db)
    conn.execute("UPDATE trials SET params = '{broken', pids = 'nope'")
    conn.execute("UPDATE events SET data = '[unfinished'")
    conn.commit()
    conn.close()
    for args in (["runs"], ["trials", "r"], ["export", "r", "--what", "events"], ["report", "r"]):
        p = cli(*args, "--store", str(db))
        assert p.returncode == 0, (args, p.stderr)
        assert "Traceback" not in p.stderr
    assert "(unreadable)" in cli("trials", "r", "--store", str(db)).stdout
