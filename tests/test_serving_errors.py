"""`tunescope load` on bad input and failing servers, run as a user runs it (the real CLI):
a usage error is one line and exit 2 before anything is written; a server that fails in the
middle of a sweep leaves the partial sweep, the level's trial failed with its reason, exit 1.
The faults come from a scripted real server (tests/scripted_server.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from cli_helpers import cli, one_line_error
from scripted_server import Script, scripted
from tunescope.cli import main
from tunescope.store import open_store


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_url_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    p = cli("load", f"http://127.0.0.1:{closed_port()}", "--store", str(db))
    one_line_error(p, "cannot be reached")
    assert not db.exists()


def test_a_server_that_is_not_openai_compatible_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with scripted(Script(models_status=404)) as srv:
        p = cli("load", srv.url, "--store", str(db))
        assert srv.completions == 0
    assert "404" in one_line_error(p, "not an OpenAI-compatible server")
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--slo", "ttft"], "malformed --slo item 'ttft': expected KEY=VALUE"),
        (["--slo", "ttft=fast"], "--slo ttft: 'fast' is not a time > 0"),
        (["--slo", "latency=1s"], "unknown --slo key 'latency'"),
        (["--slo", "ttft=1s,ttft=2s"], "--slo key 'ttft' given twice"),
        (["--slo", "tpot=-5ms"], "--slo tpot: '-5ms' is not a time > 0"),
        (["--concurrency", "0,2"], "out of range"),
        (["--concurrency", "1.5"], "not a whole number"),
        (["--concurrency", "2,2"], "given twice"),
        (["--concurrency", "1", "--rate", "1"], "not both"),
        (["--concurrency", "1", "--burstiness", "2"], "--rate levels only"),
        (["--output-tokens", "lots"], "--output-tokens"),
        (["--prompt-tokens", "9-3"], "--prompt-tokens"),
        (["--timeout", "0"], "--timeout"),
        (["--prompts", "/nonexistent/p.jsonl"], "cannot be read"),
    ],
)
def test_malformed_options_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    with scripted(Script()) as srv:  # the CLI's entry point in this process (many cases)
        code = main(["load", srv.url, *args, "--store", str(db)])
        assert srv.completions == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert says in err[0]
    assert not db.exists()


def test_a_malformed_prompts_file_names_its_line(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hi"}\n{"prompt": 3}\n')
    with scripted(Script()) as srv:
        p = cli("load", srv.url, "--prompts", str(f), "--store", str(tmp_path / "s.db"))
    one_line_error(p, "line 2")
    assert not (tmp_path / "s.db").exists()


def trials(db: Path, run: str) -> dict[str, object]:
    with open_store(str(db)) as st:
        out = {}
        for t in st.list_trials(st.get_run(run).id):
            out[t.name] = (t, st.all_events(t.id, kinds=["request"]))
        return out


def test_5xx_from_mid_sweep_keeps_what_ran_and_fails_the_level(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with scripted(Script(fail_from=5)) as srv:
        p = cli(
            "load",
            srv.url,
            "--concurrency",
            "1,2,4",
            "--requests",
            "5",
            "--run",
            "r",
            "--store",
            str(db),
        )
    assert p.returncode == 1
    assert "level c2 failed: no request succeeded: HTTP 500: scripted failure 500" in p.stderr
    got = trials(db, "r")
    assert set(got) == {"c1", "c2"}  # the sweep stopped at the failed level
    c1, ev1 = got["c1"]  # type: ignore[misc]
    assert c1.state == "completed" and all(e.name == "ok" for e in ev1) and len(ev1) == 5
    c2, ev2 = got["c2"]  # type: ignore[misc]
    assert c2.state == "failed"
    assert c2.error == "no request succeeded: HTTP 500: scripted failure 500"
    assert len(ev2) == 5
    for e in ev2:
        assert e.name == "error" and e.data["status"] == 500 and e.value is None
        assert e.data["ttft"] is None and e.data["completion_tokens"] is None


def test_some_4xx_are_recorded_per_request_and_the_level_completes(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with scripted(Script(fail_every=3, fail_status=429)) as srv:
        p = cli("load", srv.url, "--requests", "6", "--run", "r", "--store", str(db))
    assert p.returncode == 0, p.stderr
    t, events = trials(db, "r")["c1"]  # type: ignore[misc]
    assert t.state == "completed"
    errors = sorted(e.step for e in events if e.name == "error")
    assert errors == [2, 5]
    for e in events:
        if e.name == "error":
            assert e.data["status"] == 429
            assert e.data["error"] == "HTTP 429: scripted failure 429"
        else:
            assert e.data["completion_tokens"] == 4 and e.data["error"] is None


def test_a_stream_that_never_ends_meets_the_per_request_timeout(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with scripted(Script(hang=True)) as srv:
        p = cli(
            "load",
            srv.url,
            "--requests",
            "2",
            "--timeout",
            "0.5",
            "--run",
            "r",
            "--store",
            str(db),
        )
    assert p.returncode == 1
    t, events = trials(db, "r")["c1"]  # type: ignore[misc]
    assert t.state == "failed" and "per-request timeout of 0.5 s" in t.error
    assert len(events) == 2
    for e in events:
        assert e.name == "error" and e.data["ttft"] is not None  # the one token came
        assert e.duration >= 0.5


def test_a_server_gone_mid_sweep_fails_its_level(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with scripted(Script(close_from=3)) as srv:
        p = cli(
            "load",
            srv.url,
            "--concurrency",
            "1,2",
            "--requests",
            "3",
            "--run",
            "r",
            "--store",
            str(db),
        )
    assert p.returncode == 1
    got = trials(db, "r")
    assert got["c1"][0].state == "completed"  # type: ignore[index]
    c2 = got["c2"][0]  # type: ignore[index]
    assert c2.state == "failed" and "cannot be reached" in c2.error
