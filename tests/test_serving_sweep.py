"""`tunescope load`'s sweep shapes against a scripted real server (tests/scripted_server.py):
rate levels, the chat API, prompts from a file, the --seconds bound."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import cli
from scripted_server import Script, scripted
from tunescope.store import open_store


def test_rate_levels_send_in_order_with_their_params(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with scripted(Script(tokens=3)) as srv:
        p = cli("load", srv.url, "--rate", "50,100", "--burstiness", "0.5", "--requests", "10",
                "--run", "r", "--store", db)  # fmt: skip
    assert p.returncode == 0, p.stderr
    with open_store(db) as st:
        trials = st.list_trials(st.get_run("r").id)
        assert [t.name for t in trials] == ["r50", "r100"]
        for t in trials:
            assert t.params["load.mode"] == "rate"
            assert t.params["load.level"] == float(t.name[1:])
            assert t.params["load.burstiness"] == 0.5
            events = sorted(st.all_events(t.id, kinds=["request"]), key=lambda e: e.step)
            assert [e.step for e in events] == list(range(10))
            sent = [e.t for e in events]
            assert sent == sorted(sent)  # arrivals in index order
            assert all(e.name == "ok" and e.data["completion_tokens"] == 3 for e in events)


def test_chat_api_and_prompts_from_a_file(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"messages": [{"role": "user", "content": "first"}], "output_tokens": 2})
        + "\n\n"
        + json.dumps({"prompt": "second"})
        + "\n"
    )
    with scripted(Script(tokens=4)) as srv:
        p = cli("load", srv.url, "--api", "chat", "--prompts", str(prompts), "--requests", "3",
                "--output-tokens", "4", "--run", "c", "--store", db)  # fmt: skip
        bodies = srv.bodies
    assert p.returncode == 0, p.stderr
    assert [b["messages"] for b in bodies] == [
        [{"role": "user", "content": "first"}],
        [{"role": "user", "content": "second"}],
        [{"role": "user", "content": "first"}],
    ]
    assert [b["max_tokens"] for b in bodies] == [2, 4, 2]
    assert all(b["stream"] and b["stream_options"] == {"include_usage": True} for b in bodies)
    with open_store(db) as st:
        (t,) = st.list_trials(st.get_run("c").id)
        assert t.params["load.api"] == "chat"
        tokens = sorted(e.data["completion_tokens"] for e in st.all_events(t.id))
        assert tokens == [2, 2, 4]
        for e in st.all_events(t.id):
            assert len(e.data["itl"]) == e.data["completion_tokens"] - 1


def test_seconds_bounds_a_level(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    with scripted(Script(tokens=4, token_delay=0.01)) as srv:
        p = cli("load", srv.url, "--concurrency", "2", "--seconds", "0.5", "--requests", "1000",
                "--run", "s", "--store", db)  # fmt: skip
    assert p.returncode == 0, p.stderr
    with open_store(db) as st:
        (t,) = st.list_trials(st.get_run("s").id)
        events = st.all_events(t.id)
        assert 2 <= len(events) < 1000
        assert t.params["load.seconds"] == 0.5 and t.params["load.requests"] == 1000
        # none was sent after the level's time was up (slack for a busy machine's wakeups)
        assert max(e.t for e in events) < t.start + 0.5 + 2.0
