"""Framework integrations: one line in the code a fine-tune already has records it.

==============================  ==========================================================
module                          the one line
==============================  ==========================================================
:mod:`.hf`                      ``Trainer(..., callbacks=[TunescopeCallback()])``
:mod:`.optuna`                  ``study.optimize(track(objective), n_trials=20)``
:mod:`.ray`                     ``Tuner(track(train_fn), ...callbacks=[TunescopeCallback()])``
:mod:`.lightning`               ``Trainer(..., callbacks=[TunescopeCallback()])`` (Lightning)
:mod:`.mlflow`                  ``log_summary(trial)`` inside ``with mlflow.start_run():``
:mod:`.wandb`                   ``log_summary(trial)`` into ``wandb.run.summary``
:mod:`.tensorboard`             ``log_summary(trial, writer)`` (a ``SummaryWriter`` or log dir)
==============================  ==========================================================

Each module imports its framework when it is imported; importing this package imports none
(``tunescope.integrations.hf`` is loaded on first use of the attribute). The integrations are
written over the SDK (:mod:`tunescope.record`): a framework that knows its own optimizer step
numbers turns the SDK's torch hook off for its trial (``Trial.auto_optimizer_steps``) and
records each real step with ``Trial.optimizer_step(step)``. The trackers' modules (MLflow,
W&B, TensorBoard) go the other way: after a trial they put its summary (peaks and means of the
headline metrics, findings by severity, a link to its page; built once, in ``_summary``) into
the tracker a team already reads. Examples: ``docs/integrations.md``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["hf", "lightning", "mlflow", "optuna", "ray", "tensorboard", "wandb"]


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
