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
    "mlflow",
    "wandb",
    "tensorboard",
    "pandas",
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


# shared leaf modules every part may import: the exception root, the one log-once helper, the
# one bounded cache and the sampler protocol (written once for the processes on both sides)
SHARED = {"errors", "_once", "_kept", "_protocol"}

# part -> parts of ours it may import (design.md, "Parts"), besides SHARED
ALLOWED = {
    "metrics": set(),
    "errors": set(),
    "_once": set(),
    "_kept": set(),
    "_protocol": set(),
    "store": {"metrics"},
    "collect": {"metrics", "store"},
    "record": {"metrics", "store"},
    "integrations": {"record", "metrics", "store", "analyze"},
    "analyze": {"store", "metrics"},
    "server": {"store", "analyze", "metrics"},
    "cli": {"metrics", "store", "collect", "record", "integrations", "analyze", "server"},
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
            shared = set() if part in SHARED else SHARED
            for dep in _imports(f) - allowed - shared - {part}:
                bad.append(f"{f.relative_to(PKG)} imports tunescope.{dep}")
    assert not bad, "\n".join(bad)


def _part_of(path: Path) -> str:
    rel = path.relative_to(PKG).parts
    return rel[0].removesuffix(".py") if len(rel) > 1 else path.stem


def test_parts_use_each_other_by_public_names() -> None:
    """A part uses another only through what that part's package exports (its ``__init__``
    or a public module), never through one of its private ``_`` modules: those may change
    without notice, and the package's ``__all__`` is what tests/test_exported_members.py
    holds steady."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        mine = _part_of(f)
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            private = [
                n
                for n in names
                if n.startswith("tunescope.")
                and len(p := n.split(".")) > 2
                and p[1] != mine
                and p[2].startswith("_")
            ]
            if private:
                bad.append(f"{f.relative_to(PKG)}:{node.lineno} imports {private[0]}")
    assert not bad, "\n".join(bad)


def test_every_module_belongs_to_a_part() -> None:
    tops = {
        p.stem if p.is_file() else p.name
        for p in PKG.iterdir()
        if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")
    }
    assert tops <= set(ALLOWED), tops - set(ALLOWED)


def test_the_architecture_page_states_these_rules() -> None:
    """docs/architecture.md's parts table says what each part may import: the same as ALLOWED
    (its shared leaf modules aside), so the map and the check cannot drift apart."""
    doc = (PKG.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = doc.split("## Parts", 1)[1].split("\n\n", 2)[1]
    stated: dict[str, set[str]] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        part = cells[0].strip("`")
        deps = cells[-1]
        stated[part] = (
            set(ALLOWED) - SHARED - {"errors", part}
            if deps == "everything"
            else {d.strip() for d in deps.split(",") if d.strip() not in ("", "–")}
        )
    expected = {p: a for p, a in ALLOWED.items() if p not in SHARED and p != "errors"}
    assert stated == expected
