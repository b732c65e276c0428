"""The demo's input-bound setting is found input-bound, and a fast loader is not.

Two checks: the real `tunescope demo` sweep (LoRA fine-tunes of MiniLM through the Hugging
Face Trainer, searched by Optuna), shortened, whose slow-loader trial must be highly
input-bound while its other trials (pre-tokenized examples) get no input-bound finding; and a
demo-like pair in plain PyTorch (an MLP, slow per-sample preprocessing, against a DataLoader
that fetches whole batches at once) where the fast trial must get no input-bound finding.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import tunescope.record as ts
from tunescope.analyze import Finding, findings_for_run, findings_for_trial
from tunescope.cli._demo import run_demo
from tunescope.store import open_store

if TYPE_CHECKING:
    import torch

pytestmark = [pytest.mark.slow, pytest.mark.ml]

FEATURES = 64
CLASSES = 10
PREPROCESS_S = 0.0015  # per sample, in the slow loader: like decoding an image on the fly


def _input_bound(fs: list[Finding]) -> list[Finding]:
    return [f for f in fs if f.rule == "input_bound"]


def test_the_demo_slow_loader_trial_is_input_bound_and_the_others_not(tmp_path: Path) -> None:
    # long enough for the slow trial to time the 20 batches the rule asks for
    url, name = run_demo(str(tmp_path / "demo.db"), seconds_per_trial=15.0, eval_every_s=5.0)
    with open_store(url) as st:
        trials = {t.id: t for t in st.list_trials(st.get_run(name).id)}
        found = findings_for_run(st, name)
    assert [t.state for t in trials.values()][:2] == ["completed", "completed"]
    assert [t.params["slow_loader"] for t in trials.values()] == [0, 1, 0]
    slow = [tid for tid, t in trials.items() if t.params.get("slow_loader")]
    assert slow and len(slow) < len(trials)
    for tid in slow:
        (f,) = _input_bound(found[tid])
        assert f.severity == "high", f.message
    for tid in set(trials) - set(slow):
        assert _input_bound(found[tid]) == [], [g.message for g in found[tid]]


@pytest.fixture
def one_thread() -> Iterator[None]:
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def test_demo_like_slow_loader_is_input_bound_and_fast_loader_is_not(
    sqlite_url: str, one_thread: None
) -> None:
    """A slow trial (MLP 256, batch 64, slow per-sample preprocessing) against a large one
    (MLP 1024, batch 128) fed by a loader that fetches whole batches."""
    import torch
    from torch import nn
    from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

    class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
        """A slow loader: PREPROCESS_S of work per sample."""

        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y = x, y

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            time.sleep(PREPROCESS_S)
            return self.x[i] * 1.0, self.y[i]

    class BatchDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
        """Fetches a whole batch with one indexing operation: nothing to collate."""

        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y = x, y

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
            return self.x[idx], self.y[idx]

    torch.manual_seed(0)
    x, y = torch.randn(8192, FEATURES), torch.randint(0, CLASSES, (8192,))
    setups = {
        "slow-loader": (256, DataLoader(SlowDataset(x, y), batch_size=64, shuffle=True)),
        "fast-loader": (
            1024,
            DataLoader(
                BatchDataset(x, y),
                batch_size=None,
                sampler=(
                    BatchSampler(RandomSampler(range(len(y))), batch_size=128, drop_last=True)
                ),
            ),
        ),
    }
    ids = {}
    with ts.run("demo-like", store=sqlite_url, interval=0.5) as run:
        for name, (hidden, loader) in setups.items():
            with run.trial(name, params={"hidden": hidden}) as trial:
                model = nn.Sequential(
                    nn.Linear(FEATURES, hidden),
                    nn.ReLU(),
                    nn.Linear(hidden, hidden),
                    nn.ReLU(),
                    nn.Linear(hidden, CLASSES),
                )
                opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
                end = time.monotonic() + 4.0
                while time.monotonic() < end:
                    for xb, yb in trial.watch(loader):
                        opt.zero_grad()
                        loss = nn.functional.cross_entropy(model(xb), yb)
                        loss.backward()  # type: ignore[no-untyped-call]
                        opt.step()
                        if time.monotonic() >= end:
                            break
                assert trial.id is not None
                ids[name] = trial.id
    with open_store(sqlite_url) as st:
        slow = _input_bound(findings_for_trial(st, ids["slow-loader"]))
        fast = _input_bound(findings_for_trial(st, ids["fast-loader"]))
    assert len(slow) == 1 and slow[0].severity == "high", slow
    assert fast == [], fast[0].message
