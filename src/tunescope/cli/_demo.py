"""`tunescope demo`: a real PyTorch sweep on the CPU, recorded by the SDK.

Three trials of an MLP classifier on a synthetic task (labels from a random teacher network),
each training for a fixed wall time, evaluating every few seconds and saving a checkpoint after
each evaluation. The third trial reads its batches through a loader whose per-sample
preprocessing is slow, so it is input-bound by design: its data-wait share is high and the
CPU sits mostly idle.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tunescope.cli._run import absolute_store_url

TRIALS: tuple[dict[str, Any], ...] = (
    {"name": "mlp-512-lr3e-3", "hidden": 512, "lr": 3e-3, "batch_size": 256, "slow_loader": 0},
    {"name": "mlp-1024-lr1e-3", "hidden": 1024, "lr": 1e-3, "batch_size": 128, "slow_loader": 0},
    {"name": "mlp-256-slow-loader", "hidden": 256, "lr": 3e-3, "batch_size": 64, "slow_loader": 1},
)
FEATURES = 64
CLASSES = 10
PREPROCESS_S = 0.0015  # per sample, in the slow loader: like decoding an image on the fly


def run_demo(
    store: str | None, *, seconds_per_trial: float = 35.0, eval_every_s: float = 6.0
) -> tuple[str, str]:
    """Train the sweep; returns (store URL, run name)."""
    import torch
    from torch import nn
    from torch.utils.data import Dataset

    import tunescope.record as ts

    url = absolute_store_url(store)
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(FEATURES, 128), nn.Tanh(), nn.Linear(128, CLASSES))
    with torch.no_grad():
        x_all = torch.randn(24_000, FEATURES)
        y_all = teacher(x_all).argmax(dim=1)
    x_train, y_train = x_all[:20_000], y_all[:20_000]
    x_val, y_val = x_all[20_000:], y_all[20_000:]

    class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
        """Per-sample preprocessing that costs PREPROCESS_S of wall time."""

        def __len__(self) -> int:
            return len(x_train)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            time.sleep(PREPROCESS_S)
            return x_train[i] * 1.0, y_train[i]

    run_name = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    ckpt_root = Path(_store_dir(url)) / "tunescope-demo-checkpoints" / run_name
    print(
        f"tunescope demo: {len(TRIALS)} trials x {seconds_per_trial:.0f} s on the CPU, "
        f"recording to {url}"
    )
    with ts.run(run_name, store=url, interval=1.0) as run:
        for spec in TRIALS:
            params = {k: v for k, v in spec.items() if k != "name"}
            print(f"  trial {spec['name']}: {params}", flush=True)
            with run.trial(spec["name"], params=params) as trial:
                model = nn.Sequential(
                    nn.Linear(FEATURES, spec["hidden"]),
                    nn.ReLU(),
                    nn.Linear(spec["hidden"], spec["hidden"]),
                    nn.ReLU(),
                    nn.Linear(spec["hidden"], CLASSES),
                )
                opt = torch.optim.AdamW(model.parameters(), lr=spec["lr"])
                loss_fn = nn.CrossEntropyLoss()
                loader = _loader(spec, SlowDataset(), (x_train, y_train))
                step = 0
                t_end = time.monotonic() + seconds_per_trial
                next_eval = time.monotonic() + eval_every_s
                while time.monotonic() < t_end:
                    for xb, yb in trial.watch(loader):
                        opt.zero_grad()
                        loss = loss_fn(model(xb), yb)
                        loss.backward()
                        opt.step()
                        step += 1
                        if step % 10 == 0:
                            trial.log(step=step, loss=loss.item(), lr=spec["lr"])
                        now = time.monotonic()
                        if now >= next_eval or now >= t_end:
                            _evaluate(trial, model, x_val, y_val, loss_fn, step)
                            path = ckpt_root / spec["name"] / f"step-{step}.pt"
                            path.parent.mkdir(parents=True, exist_ok=True)
                            torch.save(model.state_dict(), path)
                            trial.checkpoint(path, name="checkpoint")
                            next_eval = now + eval_every_s
                        if now >= t_end:
                            break
                print(f"    {step} optimizer steps", flush=True)
    return url, run_name


def _loader(spec: dict[str, Any], slow: Any, fast: tuple[Any, Any]) -> Any:
    """The slow trial loads sample by sample through its slow dataset; the others slice
    whole shuffled batches out of tensors already in memory, as a tuned pipeline would."""
    import torch
    from torch.utils.data import DataLoader

    if spec["slow_loader"]:
        return DataLoader(slow, batch_size=spec["batch_size"], shuffle=True)
    x, y = fast
    bs = spec["batch_size"]

    class InMemory:
        def __iter__(self) -> Any:
            perm = torch.randperm(len(x))
            for i in range(0, len(x), bs):
                idx = perm[i : i + bs]
                yield x[idx], y[idx]

    return InMemory()


def _evaluate(trial: Any, model: Any, x_val: Any, y_val: Any, loss_fn: Any, step: int) -> None:
    import torch

    with trial.evaluation("validation"), torch.no_grad():
        model.eval()
        logits = model(x_val)
        loss = float(loss_fn(logits, y_val))
        acc = float((logits.argmax(dim=1) == y_val).float().mean())
        model.train()
    trial.log(step=step, **{"eval/loss": loss, "eval/accuracy": acc})


def _store_dir(url: str) -> str:
    if "://" in url:
        return os.getcwd()
    return os.path.dirname(os.path.abspath(url))
