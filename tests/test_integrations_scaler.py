"""A step that the gradient scaler skips gets no optimizer_step event.

Run on the CPU for real: torch's ``GradScaler("cpu")`` with float16 autocast on the CPU. An
inf gradient forced into one update makes ``scaler.step`` skip ``optimizer.step()`` (and
halve the scale); that update must leave no marker, with the SDK's torch hook and with the
Lightning callback (whose ``global_step`` counts the skipped update all the same)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import tunescope.record as ts
from tunescope.store import Event, Store

if TYPE_CHECKING:
    from torch import nn

pytestmark = [
    pytest.mark.ml,
    # Lightning 2.6's own pytree helper calls torch 2.13's deprecated LeafSpec(): not ours.
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]

SKIPPED = 3
"""The update (counted from 1) whose gradients are made infinite."""


def steps(store: Store, trial_id: int) -> list[Event]:
    got = store.events(trial_id, 0.0, time.time() + 60, kinds=["optimizer_step"]).events
    assert got is not None
    return got


def poison(model: nn.Module) -> None:
    """An infinite gradient, as an fp16 overflow leaves it."""
    p = next(model.parameters())
    assert p.grad is not None
    p.grad.view(-1)[0] = float("inf")


def test_the_sdk_hook_skips_a_skipped_step(sqlite_url: str, db: Store) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)  # small: no overflow of its own
    applied: list[float] = []  # when optimizer.step() really ran
    opt.register_step_post_hook(lambda *_: applied.append(time.time()))
    scales = []
    with ts.run("scaler", store=sqlite_url, sampler=False) as run, run.trial() as trial:
        for k in range(1, 7):
            x = torch.randn(16, 8)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x).float(), x.sum(1, keepdim=True))
            scaler.scale(loss).backward()
            if k == SKIPPED:
                poison(model)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
    assert scales[SKIPPED - 1] == scales[SKIPPED - 2] / 2  # the scaler did skip that update
    assert len(applied) == 5
    assert trial.id is not None
    got = steps(db, trial.id)
    assert [e.step for e in got] == [1, 2, 3, 4, 5]  # five real updates, numbered as made
    assert [e.t for e in got] == pytest.approx(applied, abs=0.05)


def test_lightning_skips_a_skipped_global_step(sqlite_url: str, db: Store, tmp_path: Path) -> None:
    import torch
    from torch import nn

    pytest.importorskip("lightning", reason="needs `pip install .[lightning]`")
    import lightning.pytorch as pl
    from lightning.pytorch.plugins import MixedPrecision

    from tunescope.integrations.lightning import TunescopeCallback

    class Poisoned(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.batch_idx = batch_idx
            x, y = batch
            return nn.functional.mse_loss(self.net(x).float(), y)

        def on_after_backward(self) -> None:  # the last micro-batch of update SKIPPED
            if self.batch_idx == 2 * SKIPPED - 1:
                poison(self.net)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, 4, generator=g) for _ in range(12)]
    data = [(x, x.sum(1, keepdim=True)) for x in xs]

    class Loader:
        def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            return iter(data)

        def __len__(self) -> int:
            return len(data)

    # Lightning turns precision="16-mixed" on the CPU into bf16 (no scaler); a plugin given
    # explicitly keeps fp16 autocast with torch's CPU GradScaler.
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)  # small: no overflow of its own
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler=scaler)],
        accumulate_grad_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[TunescopeCallback("lightning-scaler", store=sqlite_url, sampler=False)],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(Poisoned(), Loader())
    assert trainer.global_step == 6  # the skipped update counts in Lightning's global step
    assert scaler.get_scale() == 4.0  # halved once: one update skipped
    run_id = db.get_run("lightning-scaler").id
    (info,) = db.list_trials(run_id)
    assert [e.step for e in steps(db, info.id)] == [1, 2, 4, 5, 6]
