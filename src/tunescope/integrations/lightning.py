"""Lightning: a callback that records a ``Trainer.fit`` as a trial.

::

    from tunescope.integrations.lightning import TunescopeCallback

    trainer = L.Trainer(callbacks=[TunescopeCallback(run="lora-search")])
    trainer.fit(model, datamodule=dm)

What it records, in the trial it opens at ``setup("fit")`` (or in the trial already current:
one the script entered, or the one ``tunescope run -- CMD`` names; that one it neither opens
nor ends):

* ``optimizer_step`` events numbered by ``trainer.global_step`` (right with
  ``accumulate_grad_batches``), one per update the optimizer really made: a step that a
  gradient scaler skips (inf/NaN gradients under ``16-mixed``) advances ``global_step`` but
  calls no ``optimizer.step()``, and gets no event. The automatic torch hook is off for the
  trial meanwhile, so no step is counted twice.
* ``evaluation`` intervals: each validation run (``"validation"``; the sanity check as
  ``"sanity_check"``) and each test run (``"test"``).
* ``checkpoint`` events for every save made through ``trainer.save_checkpoint``
  (``ModelCheckpoint``'s included), with path, size and global step.
* scalars: the metrics Lightning hands to its loggers (what ``self.log`` logs, at the loggers'
  cadence, ``log_every_n_steps``), at their step (else the global step); those logged during
  validation or test are named ``eval/<name>``. They are taken where Lightning's logger
  connector sends them (a private seam: when a Lightning version lacks it, scalars are skipped
  with one warning).
* the end: ``completed`` after ``fit``; ``failed`` with the exception (``KeyboardInterrupt``
  included) when fit raises.

``params`` default to the module's ``hparams``. Under DDP (torchrun or Lightning's own
launcher) every rank joins one trial, see :mod:`tunescope.integrations.distributed`. Nothing
here raises into training.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

import tunescope.record as ts
from tunescope.integrations._common import LOG, safe
from tunescope.integrations.distributed import DistributedTrial

__all__ = ["TunescopeCallback"]


class TunescopeCallback(Callback):
    """Records ``Trainer.fit`` as a tunescope trial (see the module doc).

    ``run``, ``name``, ``params``, ``store``, ``interval`` and ``sampler`` mean what they mean
    to :func:`tunescope.record.run` and :meth:`~tunescope.record.Run.trial` (``params``
    default to ``pl_module.hparams``); ``timeout``: seconds the ranks of a DDP training wait
    for rank 0 to open the trial."""

    def __init__(
        self,
        run: str | None = None,
        *,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        store: str | os.PathLike[str] | None = None,
        interval: float = 1.0,
        sampler: bool = True,
        timeout: float = 300.0,
    ) -> None:
        self._args: dict[str, Any] = {
            "run": run,
            "name": name,
            "store": store,
            "interval": interval,
            "sampler": sampler,
            "timeout": timeout,
        }
        self._params = params
        self._own: DistributedTrial | None = None
        self._trial: ts.Trial | None = None
        self._auto = True
        self._handles: list[Any] = []
        self._stepped: list[str] = []
        """Names of the optimizers that really stepped since the last batch end."""
        self._last_step = 0
        self._eval: AbstractContextManager[None] | None = None
        self._undo: list[Callable[[], None]] = []

    @property
    def trial(self) -> ts.Trial | None:
        """The trial being recorded, None outside ``fit``."""
        return self._trial

    # ------------------------------------------------------------------ open and close
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._trial is not None:
            return
        t = ts.current_trial()
        if t is None and stage == "fit":
            params = self._params
            if params is None:
                params = dict(getattr(pl_module, "hparams", None) or {})
            self._own = DistributedTrial(params=params, **self._args)
            t = self._own.open()
        if t is not None:
            self._trial = t
            self._start(trainer, t)

    @safe
    def _start(self, trainer: pl.Trainer, t: ts.Trial) -> None:
        self._auto = t.auto_optimizer_steps
        t.auto_optimizer_steps = False
        self._patch(trainer)

    @safe
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._close(trainer, None)

    @safe
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._close(trainer, exception)

    def _close(self, trainer: pl.Trainer, exc: BaseException | None) -> None:
        """Record the last steps, undo what :meth:`_start` did, end an own trial."""
        t = self._trial
        if t is None:
            return
        own, self._own = self._own, None
        try:
            self._steps(trainer)
            self._end_eval(exc)
        finally:
            self._trial = None
            for handle in self._handles:
                handle.remove()
            self._handles.clear()
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()
            t.auto_optimizer_steps = self._auto
            if own is not None:
                own.close(exc)

    # ------------------------------------------------------------------ optimizer steps
    @safe
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._trial is None:
            return
        self._last_step = trainer.global_step
        stepped = self._stepped
        for opt in trainer.optimizers:
            name = type(opt).__name__

            def hook(o: object, args: object, kwargs: object, name: str = name) -> None:
                stepped.append(name)

            self._handles.append(opt.register_step_post_hook(hook))

    @safe
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._steps(trainer)

    def _steps(self, trainer: pl.Trainer) -> None:
        """One event per real update since the last call, numbered up to the global step
        (updates that a scaler skipped advanced the global step without a real one)."""
        t = self._trial
        step = trainer.global_step
        if t is None or step <= self._last_step:
            return
        names, self._stepped[:] = self._stepped[:], []
        names = names[-(step - self._last_step) :]
        for k, name in enumerate(names):
            t.optimizer_step(step - len(names) + 1 + k, name)
        self._last_step = step

    # ------------------------------------------------------------------ evaluations
    @safe
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_eval("sanity_check" if trainer.sanity_checking else "validation")

    @safe
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_eval(None)

    @safe
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_eval("test")

    @safe
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_eval(None)

    def _start_eval(self, name: str) -> None:
        if self._trial is None or self._eval is not None:
            return
        cm = self._trial.evaluation(name)
        cm.__enter__()
        self._eval = cm

    def _end_eval(self, exc: BaseException | None) -> None:
        cm, self._eval = self._eval, None
        if cm is not None:
            cm.__exit__(None if exc is None else type(exc), exc, None)

    # ------------------------------------------------------------------ checkpoints, scalars
    def _patch(self, trainer: pl.Trainer) -> None:
        """Wrap ``trainer.save_checkpoint`` and the logger connector's ``log_metrics`` on these
        instances; :meth:`_close` undoes it."""
        save = trainer.save_checkpoint

        def save_checkpoint(filepath: Any, *args: Any, **kwargs: Any) -> None:
            save(filepath, *args, **kwargs)
            self._checkpoint(trainer, filepath)

        setattr(trainer, "save_checkpoint", save_checkpoint)  # noqa: B010 - an instance attribute
        self._undo.append(lambda: _unset(trainer, "save_checkpoint", save_checkpoint))

        connector = getattr(trainer, "_logger_connector", None)
        log_metrics = getattr(connector, "log_metrics", None)
        if connector is None or not callable(log_metrics):
            LOG.warning(
                "tunescope: this Lightning version has no logger connector to read logged "
                "metrics from; scalars are not recorded"
            )
            return
        original: Callable[..., None] = log_metrics

        def logged(metrics: Mapping[str, Any], step: int | None = None) -> None:
            self._scalars(trainer, metrics, step)
            original(metrics, step)

        setattr(connector, "log_metrics", logged)  # noqa: B010 - an instance attribute
        self._undo.append(lambda: _unset(connector, "log_metrics", logged))

    @safe
    def _checkpoint(self, trainer: pl.Trainer, filepath: Any) -> None:
        t = self._trial
        if t is not None and trainer.is_global_zero:
            t.checkpoint(os.fspath(filepath), step=trainer.global_step)

    @safe
    def _scalars(self, trainer: pl.Trainer, metrics: Mapping[str, Any], step: int | None) -> None:
        t = self._trial
        if t is None or not metrics:
            return
        values = dict(metrics)
        given = values.pop("step", None) if step is None else None
        at = step if step is not None else trainer.global_step
        if given is not None:
            at = int(given)
        if self._eval is not None:  # logged during a validation or test run
            values = {k if k.startswith("eval/") else f"eval/{k}": v for k, v in values.items()}
        t.log(step=at, **values)


def _unset(obj: object, attr: str, ours: object) -> None:
    """Remove the instance attribute ``attr`` if it is still ``ours`` (the class's returns)."""
    if vars(obj).get(attr) is ours:
        delattr(obj, attr)
