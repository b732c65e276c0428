"""The Lightning callback around real tiny Trainers on CPU: optimizer steps at the global step
(with gradient accumulation), validations one for one, checkpoints with their size, logged
metrics as scalars, and the trial's end state."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import tunescope.record as ts
from tunescope.record import _run
from tunescope.store import Event, Store

if TYPE_CHECKING:
    import lightning.pytorch as pl
    import torch

pytestmark = [
    pytest.mark.ml,
    # Lightning 2.6's own pytree helper calls torch 2.13's deprecated LeafSpec(): not ours.
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
]


@cache
def _tiny() -> Any:
    """The tiny LightningModule's class (Lightning is imported by the tests, not at
    collection)."""
    import lightning.pytorch as pl
    import torch
    from torch import nn

    class Tiny(pl.LightningModule):
        def __init__(self, lr: float = 0.05, fail_at: int | None = None) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = nn.Linear(4, 1)
            self.validations = 0

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if self.hparams.fail_at == batch_idx:
                raise RuntimeError(f"bad batch {batch_idx}")
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

        def on_validation_end(self) -> None:
            if not self.trainer.sanity_checking:
                self.validations += 1

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    return Tiny


class Batches:
    """``n`` batches of a tiny regression, as a plain iterable (a DataLoader with few workers
    draws a PossibleUserWarning on machines with many cores; a list would be read as a list
    of loaders)."""

    def __init__(self, n: int) -> None:
        import torch

        g = torch.Generator().manual_seed(n)
        self.items = []
        for _ in range(n):
            x = torch.randn(8, 4, generator=g)
            self.items.append((x, x.sum(dim=1, keepdim=True)))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def batches(n: int) -> Batches:
    return Batches(n)


def trainer(root: Path, *callbacks: Any, **kw: Any) -> pl.Trainer:
    import lightning.pytorch as pl

    opts: dict[str, Any] = {
        "max_epochs": 2,
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "log_every_n_steps": 1,
        "default_root_dir": str(root),
    }
    opts.update(kw)
    return pl.Trainer(callbacks=list(callbacks), **opts)


def events(store: Store, trial_id: int, kind: str) -> list[Event]:
    got = store.events(trial_id, 0.0, time.time() + 60, kinds=[kind], limit=100_000).events
    assert got is not None
    return got


def only_trial(store: Store, run: str) -> int:
    trials = store.list_trials(store.get_run(run).id)
    assert len(trials) == 1, trials
    return trials[0].id


def test_fit_with_accumulation(sqlite_url: str, db: Store, tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tunescope.integrations.lightning import TunescopeCallback

    Tiny = _tiny()

    cb = TunescopeCallback("lightning", name="accum", store=sqlite_url, sampler=False)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1, every_n_epochs=1)
    model = Tiny()
    tr = trainer(tmp_path, cb, ckpt, accumulate_grad_batches=2, max_epochs=3)
    tr.fit(model, batches(10), batches(3))
    assert cb.trial is None  # closed at the end of fit
    tid = only_trial(db, "lightning")
    info = db.get_trial(tid)
    assert (info.name, info.state, info.error) == ("accum", "completed", None)
    assert info.params == {"lr": 0.05, "fail_at": None}  # the module's hparams

    # one optimizer step per update (10 batches / 2 per update x 3 epochs), at the global step
    assert tr.global_step == 15
    steps = events(db, tid, "optimizer_step")
    assert [e.step for e in steps] == list(range(1, tr.global_step + 1))
    assert {e.name for e in steps} == {"SGD"}

    # validations one for one, the sanity check told apart
    ev = events(db, tid, "evaluation")
    assert model.validations == 3
    assert [e.name for e in ev] == ["sanity_check"] + ["validation"] * model.validations
    assert all(e.duration is not None and e.duration >= 0 for e in ev)
    for e in ev[1:]:  # each validation follows the last step of its epoch
        assert sum(1 for s in steps if s.t <= e.t) % 5 == 0

    # a checkpoint event per file, with its size and global step
    ck = events(db, tid, "checkpoint")
    files = sorted((tmp_path / "ckpt").iterdir())
    assert len(ck) == len(files) == 3
    for e, f in zip(ck, files, strict=True):
        assert e.data == {"path": str(f), "bytes": f.stat().st_size}
    assert [e.step for e in ck] == [5, 10, 15]

    # logged metrics: training ones at each update, validation ones as eval/ at its step
    assert [s.step for s in db.scalars(tid, "train_loss")] == list(range(1, 16))
    assert [s.step for s in db.scalars(tid, "eval/val_loss")] == [5, 10, 15]
    assert db.scalars(tid, "val_loss") == []


def test_an_exception_fails_the_trial(sqlite_url: str, db: Store, tmp_path: Path) -> None:
    from tunescope.integrations.lightning import TunescopeCallback

    Tiny = _tiny()

    cb = TunescopeCallback("boom", store=sqlite_url, sampler=False)
    tr = trainer(tmp_path, cb, num_sanity_val_steps=0, enable_checkpointing=False)
    with pytest.raises(RuntimeError, match="bad batch 3"):
        tr.fit(Tiny(fail_at=3), batches(6), batches(1))
    tid = only_trial(db, "boom")
    info = db.get_trial(tid)
    assert (info.state, info.error) == ("failed", "RuntimeError: bad batch 3")
    assert [e.step for e in events(db, tid, "optimizer_step")] == [1, 2, 3]
    assert cb.trial is None


def test_fit_inside_a_trial_of_the_script(sqlite_url: str, db: Store, tmp_path: Path) -> None:
    """A trial already current is used, not ended; its optimizer hook is back on after fit
    (and never counted a step twice)."""
    import torch
    from torch import nn

    from tunescope.integrations.lightning import TunescopeCallback

    Tiny = _tiny()

    with ts.run("outer", store=sqlite_url, sampler=False) as run, run.trial("mine") as trial:
        tr = trainer(tmp_path, TunescopeCallback(), max_epochs=1, enable_checkpointing=False)
        tr.fit(Tiny(), batches(4), batches(2))
        assert trial.recording and trial.auto_optimizer_steps
        tr.validate(tr.lightning_module, batches(2), verbose=False)  # outside fit: same trial
        opt = torch.optim.Adam(nn.Linear(2, 1).parameters())
        nn.Linear(2, 1)(torch.ones(1, 2)).sum().backward()
        opt.step()  # a plain step after fit: the hook records it again
    assert trial.id is not None
    info = db.get_trial(trial.id)
    assert info.state == "completed" and info.params == {}
    got = [(e.name, e.step) for e in events(db, trial.id, "optimizer_step")]
    assert got == [("SGD", 1), ("SGD", 2), ("SGD", 3), ("SGD", 4), ("Adam", 1)]
    assert [e.name for e in events(db, trial.id, "evaluation")] == [
        "sanity_check",
        "validation",
        "validation",
    ]
    assert [s.step for s in db.scalars(trial.id, "eval/val_loss")] == [4, 4]


def test_joins_the_trial_of_tunescope_run(
    sqlite_url: str, db: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``tunescope run -- python train.py`` the callback records into the command's
    trial and leaves its state to the command."""
    from tunescope.integrations.lightning import TunescopeCallback

    Tiny = _tiny()

    info = db.create_trial(db.ensure_run("cli").id, "cmd")
    for k, v in ts.trial_env(sqlite_url, "cli", info.key, 1.0).items():
        monkeypatch.setenv(k, v)
    cb = TunescopeCallback("ignored", store=os.devnull)
    tr = trainer(tmp_path, cb, max_epochs=1, enable_checkpointing=False)
    tr.fit(Tiny(), batches(3), batches(1))
    joined = ts.current_trial()
    assert joined is not None and joined.id == info.id and joined.attached
    joined.__exit__(None, None, None)  # the final flush, as at interpreter exit
    _run._joined.pop(info.key)  # leave no joined trial behind for other tests
    assert [e.step for e in events(db, info.id, "optimizer_step")] == [1, 2, 3]
    assert db.get_trial(info.id).state == "running"
    assert [r.name for r in db.list_runs()] == ["cli"]


DDP_TRAIN = """
    import json, os, sys, warnings
    warnings.simplefilter("error")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    import lightning.pytorch as pl
    import torch
    from torch import nn
    from tunescope.integrations.lightning import TunescopeCallback

    store, out = sys.argv[1], sys.argv[2]

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.net(x), y), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    class Batches:
        def __init__(self, n):
            g = torch.Generator().manual_seed(n)
            xs = [torch.randn(8, 4, generator=g) for _ in range(n)]
            self.items = [(x, x.sum(1, keepdim=True)) for x in xs]

        def __iter__(self):
            return iter(self.items)

        def __len__(self):
            return len(self.items)

    cb = TunescopeCallback("lightning-ddp", store=store, interval=0.2)

    class Spy(pl.Callback):
        def on_train_end(self, trainer, pl_module):
            t = cb.trial
            info = {"pid": os.getpid(), "trial": t.id, "replica": t.replica,
                    "global_step": trainer.global_step}
            with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
                json.dump(info, f)

    trainer = pl.Trainer(
        max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", accumulate_grad_batches=2,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=1, use_distributed_sampler=False,
        callbacks=[cb, Spy()], default_root_dir=out,
    )
    trainer.fit(Tiny(), Batches(8), Batches(2))
"""


@pytest.mark.slow
def test_ddp_under_torchrun(sqlite_url: str, db: Store, tmp_path: Path) -> None:
    """Two ranks (gloo, CPU) under torchrun: one trial holding both ranks' processes, each
    update and validation recorded once (by rank 0)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(DDP_TRAIN))
    out = tmp_path / "out"
    out.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    cmd += ["--master_addr", "127.0.0.1", "--master_port", str(port)]
    cmd += [str(script), sqlite_url, str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNESCOPE_")}
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**env, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))
    tid = only_trial(db, "lightning-ddp")
    info = db.get_trial(tid)
    assert info.state == "completed"
    assert r0["trial"] == r1["trial"] == tid and (r0["replica"], r1["replica"]) == (False, True)
    assert {r0["pid"], r1["pid"]} <= set(info.pids)
    assert r0["global_step"] == 8
    assert [e.step for e in events(db, tid, "optimizer_step")] == list(range(1, 9))
    assert [e.name for e in events(db, tid, "evaluation")] == ["sanity_check"] + ["validation"] * 2
    assert [s.step for s in db.scalars(tid, "eval/val_loss")] == [4, 8]
    (cpu,) = db.list_series(tid, "cpu.util")
    assert db.series_extent(cpu.id) is not None


@pytest.mark.slow
def test_integrations_import_their_own_framework_only() -> None:
    """distributed imports no framework (torch only when used); the Lightning callback
    imports nothing beyond what Lightning itself imports (torchmetrics, a Lightning
    dependency, imports transformers when that is installed)."""
    code = """
        import sys
        heavy = ("torch", "lightning", "transformers", "optuna", "peft")
        import tunescope.integrations.distributed
        assert not [m for m in heavy if m in sys.modules], "distributed imported a framework"
        import lightning.pytorch
        before = {m for m in heavy if m in sys.modules}
        import tunescope.integrations.lightning
        assert {m for m in heavy if m in sys.modules} == before
        assert "optuna" not in before
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
