"""The examples of docs/integrations.md work: each Python block runs as a script, offline, on
the CPU, and leaves a run whose trials all ended, at least one completed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tunescope.store import open_store

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


def _examples() -> list[tuple[str, str]]:
    """(the section's heading, the code) of each ```python block."""
    text = DOC.read_text(encoding="utf-8")
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
        heading = re.findall(r"^## (.+)$", text[: m.start()], re.M)
        out.append((heading[-1] if heading else "intro", m.group(1)))
    return out


def test_every_integration_has_an_example() -> None:
    sections = {h for h, _ in _examples()}
    assert {"Hugging Face Trainer", "Optuna"} <= sections
    for _, code in _examples():
        assert "tunescope.integrations." in code


@pytest.mark.parametrize(("section", "code"), _examples(), ids=[h for h, _ in _examples()])
def test_the_example_runs_and_records(section: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    store = tmp_path / "store.db"
    env = {
        **os.environ,
        "TUNESCOPE_STORE": str(store),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",  # a small shared machine: threads only fight each other
        "TOKENIZERS_PARALLELISM": "false",
    }
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open_store(str(store)) as st:
        runs = st.list_runs()
        assert runs, f"{section}: the example recorded no run"
        trials = [t for r in runs for t in st.list_trials(r.id)]
    assert trials and all(t.state in ("completed", "pruned", "failed") for t in trials)
    assert any(t.state == "completed" for t in trials)
