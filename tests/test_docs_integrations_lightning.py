"""The examples of docs/integrations_lightning_ddp.md run as written and record what the
page says they record."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tunescope.store import open_store

pytestmark = pytest.mark.slow

DOC = (Path(__file__).resolve().parents[1] / "docs" / "integrations_lightning_ddp.md").read_text(
    encoding="utf-8"
)


def section(title: str) -> str:
    """The text of the ``## title`` section."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert m, f"no section {title!r}"
    return m.group(1)


def example(title: str) -> str:
    """The first python block of a section."""
    m = re.search(r"```python\n(.*?)```", section(title), re.S)
    assert m, f"no example in {title!r}"
    return m.group(1)


def run(cmd: list[str], cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNESCOPE_")}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def steps_and_evaluations(db: Path, run_name: str) -> tuple[list[int | None], list[str | None]]:
    with open_store(str(db)) as store:
        (trial,) = store.list_trials(store.get_run(run_name).id)
        assert trial.state == "completed"
        got = store.events(trial.id, 0.0, time.time() + 60, limit=100_000).events
        assert got is not None
        steps = [e.step for e in got if e.kind == "optimizer_step"]
        return steps, [e.name for e in got if e.kind == "evaluation"]


def test_the_lightning_example(tmp_path: Path) -> None:
    pytest.importorskip("lightning", reason="needs `pip install .[lightning]`")
    (tmp_path / "fit.py").write_text(example("Lightning"))
    run([sys.executable, "fit.py"], tmp_path)
    steps, evals = steps_and_evaluations(tmp_path / "tunescope.db", "lightning-demo")
    assert steps == list(range(1, 13))  # 8 batches / 2 per update x 3 epochs
    assert evals == ["sanity_check"] + ["validation"] * 3


def test_the_torchrun_example(tmp_path: Path) -> None:
    text = section("torchrun")
    assert "`torchrun --nproc_per_node 2 train.py`" in text
    (tmp_path / "train.py").write_text(example("torchrun"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--master_addr", "127.0.0.1"]
    run([*torchrun, "--master_port", port, "--nproc_per_node", "2", "train.py"], tmp_path)
    steps, _ = steps_and_evaluations(tmp_path / "tunescope.db", "ddp-demo")
    assert steps == list(range(1, 51))  # once, not once per rank
