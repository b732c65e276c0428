"""Docs stay true: every CLI command, option, metric and environment variable is documented,
and the README opens with the two set-up commands."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import typer.main

from tunescope._env import SETTING_PREFIX, VARIABLES
from tunescope.analyze._settings import SETTINGS
from tunescope.cli._app import app
from tunescope.metrics import CATALOG

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
METRICS_MD = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
ENV_MD = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
PKG = ROOT / "src" / "tunescope"
ENV_MODULE = PKG / "_env.py"
VARIABLE = re.compile(r"(?<![A-Za-z0-9_])_?TUNESCOPE_[A-Z0-9_]+")
"""A variable's name as written anywhere (``TUNESCOPE_<SETTING>`` is no name)."""


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


def _env_table(heading: str) -> dict[str, list[str]]:
    """The rows of the table under ``## heading`` of docs/environment.md: name -> cells."""
    section = ENV_MD.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `"):
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_environment_variable_is_documented_as_in_its_module() -> None:
    rows = _env_table("What tunescope reads and sets")
    assert set(rows) == set(VARIABLES), set(rows) ^ set(VARIABLES)
    for name, meaning in VARIABLES.items():
        assert rows[name] == [meaning], f"docs/environment.md's row of {name} must read: {meaning}"


def test_no_module_but_env_spells_a_variable() -> None:
    """Code reads a variable through its constant in ``tunescope/_env.py``: no string of the
    package's code holds a ``TUNESCOPE_`` name but there (docstrings and comments may)."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        if f == ENV_MODULE:
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        docs = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        bad += [
            f"{f.relative_to(PKG)}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and "TUNESCOPE_" in node.value
        ]
    assert not bad, "\n".join(bad)


def _named_in(paths: list[Path]) -> dict[str, set[str]]:
    """Every variable name written in ``paths`` -> the files (relative to the root) naming it."""
    out: dict[str, set[str]] = {}
    for f in paths:
        for name in VARIABLE.findall(f.read_text(encoding="utf-8")):
            out.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    return out


def test_every_variable_named_anywhere_is_listed() -> None:
    """Each ``TUNESCOPE_*`` name the package, its docs, tests and benchmarks write is the
    package's (listed in its module), a finding setting's, or one of the test suite's and
    benchmarks' own, which docs/environment.md lists apart: exactly those the tests, the
    benchmarks and the Makefile write and the package never does."""
    settings = {SETTING_PREFIX + name.upper() for name in SETTINGS}
    ours = set(_env_table("The test suite's and benchmarks' own"))
    package = _named_in([p for p in PKG.rglob("*") if p.suffix in (".py", ".md")])
    docs = _named_in([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    suite = _named_in(
        [
            ROOT / "Makefile",
            *sorted((ROOT / "tests").glob("*.py")),
            *sorted((ROOT / "bench").glob("*.py")),
        ]
    )
    known = set(VARIABLES) | settings
    assert set(package) <= known, {n: package[n] for n in set(package) - known}
    assert set(docs) <= known | ours, {n: docs[n] for n in set(docs) - known - ours}
    assert not ours & (known | set(package)), ours & (known | set(package))
    assert ours == set(suite) - known, ours ^ (set(suite) - known)
