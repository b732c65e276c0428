"""Docs stay true: every CLI command, option and metric is documented, and the README opens
with the two set-up commands."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

from tunescope.cli._app import app
from tunescope.metrics import CATALOG

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
METRICS_MD = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")


def _commands() -> dict[str, Any]:
    """Every command by its full name ("runs", "token create"…), groups' subcommands too."""
    out: dict[str, Any] = {}

    def walk(prefix: str, group: Any) -> None:
        for name, cmd in group.commands.items():
            full = f"{prefix}{name}"
            if hasattr(cmd, "commands"):
                walk(f"{full} ", cmd)
            else:
                out[full] = cmd

    walk("", typer.main.get_command(app))
    return out


def test_readme_starts_with_the_two_commands() -> None:
    head = "\n".join(README.splitlines()[:10])
    assert "make demo" in head and "make test" in head


def test_every_command_and_option_is_in_the_readme() -> None:
    for name, cmd in _commands().items():
        rows = [line for line in README.splitlines() if line.startswith(f"| `tunescope {name}")]
        assert rows, f"command {name!r} missing from the README's command table"
        for p in cmd.params:
            opts = [
                o
                for o in [*p.opts, *getattr(p, "secondary_opts", [])]
                if o.startswith("--") and o != "--help"
            ]
            if opts:
                assert any(o in rows[0] for o in opts), (
                    f"option {opts} of {name!r} missing from the README"
                )


def test_every_command_has_help() -> None:
    for name, cmd in _commands().items():
        assert cmd.help and len(cmd.help.split()) >= 5, f"{name!r} has no real help"
        for p in cmd.params:
            if p.param_type_name == "option" and p.name != "help":
                assert p.help, f"option {p.opts} of {name!r} has no help"


def test_every_metric_is_documented_as_in_the_catalog() -> None:
    for m in CATALOG:
        section = re.search(rf"^## `{re.escape(m.key)}` — (.+)$", METRICS_MD, re.M)
        assert section, f"metric {m.key} has no section in docs/metrics.md"
        assert section.group(1) == m.label
        body = METRICS_MD[section.end() :].split("\n## ", 1)[0]
        assert f"- Unit: {m.unit}" in body
        assert m.equivalent in body, f"{m.key}: equivalent differs from the catalog"
        assert m.description in body
    documented = set(re.findall(r"^## `([^`]+)`", METRICS_MD, re.M))
    assert documented == {m.key for m in CATALOG}


def test_headline_metrics_are_the_seeds_four() -> None:
    labels = [m.label for m in CATALOG if m.headline]
    assert labels == [
        "CPU Utilization Percent",
        "GPU Utilization Percent",
        "CPU Memory Usage",
        "GPU Memory Usage",
    ]
