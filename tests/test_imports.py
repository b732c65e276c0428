"""Importing is cheap, and the parts import each other only in the allowed direction."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "tunescope"

HEAVY = [
    "torch",
    "transformers",
    "lightning",
    "pynvml",
    "psycopg",
    "fastapi",
    "uvicorn",
    "optuna",
    "peft",
]


@pytest.mark.parametrize(
    "module",
    [
        "tunescope",
        "tunescope.record",
        "tunescope.store",
        "tunescope.metrics",
        "tunescope.collect",
        "tunescope.integrations",
    ],
)
def test_import_pulls_in_no_heavy_library(module: str) -> None:
    code = f"import sys, {module}\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import {module} imported {out}"


# part -> parts of ours it may import (design.md, "Parts")
ALLOWED = {
    "metrics": set(),
    "errors": set(),
    "store": {"metrics", "errors"},
    "collect": {"metrics", "store", "errors"},
    "record": {"metrics", "store", "errors"},
    "integrations": {"record", "errors", "metrics", "store"},
    "analyze": {"store", "metrics", "errors"},
    "server": {"store", "analyze", "metrics", "errors"},
    "cli": {"metrics", "store", "errors", "collect", "record", "integrations", "analyze", "server"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for n in names:
            parts = n.split(".")
            if parts[0] == "tunescope" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_layering() -> None:
    bad = []
    for part, allowed in ALLOWED.items():
        files = (
            [PKG / f"{part}.py"]
            if (PKG / f"{part}.py").exists()
            else sorted((PKG / part).rglob("*.py"))
        )
        for f in files:
            for dep in _imports(f) - allowed - {part}:
                bad.append(f"{f.relative_to(PKG)} imports tunescope.{dep}")
    assert not bad, "\n".join(bad)


def test_every_module_belongs_to_a_part() -> None:
    tops = {
        p.stem if p.is_file() else p.name
        for p in PKG.iterdir()
        if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")
    }
    assert tops <= set(ALLOWED), tops - set(ALLOWED)
