"""docs/performance.md is the output of `make bench-peers`: it says so, names the machine and
the tools' versions it was measured with, and compares the three tools side by side."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"


def _text() -> str:
    assert DOC.is_file(), "docs/performance.md is missing: run make bench-peers"
    return DOC.read_text(encoding="utf-8")


def test_performance_doc_names_its_command_and_machine() -> None:
    text = _text()
    assert "make bench-peers" in text
    machine = re.search(r"^- Machine: (.+)$", text, re.MULTILINE)
    assert machine, "no '- Machine:' line"
    assert re.search(r"\d+ logical cores", machine.group(1)), machine.group(1)
    assert re.search(r"Python 3\.\d+", machine.group(1)), machine.group(1)
    versions = re.search(r"^- Versions: (.+)$", text, re.MULTILINE)
    assert versions, "no '- Versions:' line"
    for tool in ("tunescope", "wandb", "mlflow"):
        assert re.search(rf"\b{tool} \d+\.\d+", versions.group(1)), tool
    assert re.search(r"^- Date: \d{4}-\d{2}-\d{2}", text, re.MULTILINE)


def test_performance_doc_has_the_side_by_side_table() -> None:
    rows = [line for line in _text().splitlines() if line.startswith("|")]
    assert rows and all(k in rows[0] for k in ("W&B", "MLflow", "tunescope", "target")), rows[:1]
    body = [r for r in rows[2:] if r.strip("|- ")]
    assert len(body) >= 10
    for r in body:
        cells = [c.strip() for c in r.strip().strip("|").split("|")]
        assert len(cells) == 5 and all(cells), r  # a label, one figure per tool, the target
    for work in ("A", "B", "F"):  # the three workloads, each with its monitors' cost
        assert any(r.startswith(f"| {work}: monitor total") for r in body), work


def test_bench_peers_target_writes_the_doc_and_is_documented() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    target = re.search(r"^bench-peers:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert target, "no bench-peers target in the Makefile"
    assert "bench/bench_peers.py --write-docs" in target.group(1)
    assert re.search(r"^\.PHONY:.*\bbench-peers\b", makefile, re.MULTILINE)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make bench-peers" in readme and "docs/performance.md" in readme
