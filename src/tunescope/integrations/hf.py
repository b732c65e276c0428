"""Hugging Face Trainer: one callback records each training as a tunescope trial.

::

    from tunescope.integrations.hf import TunescopeCallback

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                      callbacks=[TunescopeCallback(run="lora-search")])
    trainer.train()

It records into the trial that is current when training starts (a trial of an Optuna
objective wrapped by :func:`tunescope.integrations.optuna.track`, a ``with run.trial():``
block, a script under ``tunescope run --``), else into a trial of its own that
``trainer.train()`` opens and ends:

* ``optimizer_step`` at the Trainer's ``state.global_step``, once per real optimizer step
  (micro-batches of a gradient-accumulation window are not steps; a step the gradient scaler
  skipped is not recorded). The SDK's torch hook is off for the trial meanwhile
  (``Trial.auto_optimizer_steps``), so no step is counted twice.
* ``data_wait`` per micro-batch: the wait in the train loader's ``next()``, timed as
  ``trial.watch()`` does, inside ``Trainer.get_batch_samples`` (transformers 4.47 and later).
* ``evaluation`` per evaluation: its interval from ``eval_runtime``, named after the metric
  prefix (``eval``), at the global step.
* ``checkpoint`` per checkpoint save, at the global step, with its size on disk; named
  ``adapter`` when the checkpoint holds a PEFT adapter (``adapter_config.json``).
* scalars from the Trainer's logs at the global step: ``loss``, ``grad_norm``,
  ``learning_rate``, ``epoch``…, and ``eval_<x>`` as ``eval/<x>`` (the Evaluation tab). Run
  times and sample rates are left out: tunescope measures time itself.

A trial the callback opens is named ``name`` (default: ``trial-<number>`` of the Optuna trial
given to ``train(trial=…)``, else the store's ``trial-<k>``), has ``params`` (default: the
training arguments that set the trial up — learning rate, batch size, gradient accumulation,
steps or epochs, seed, optimizer, precision — the rank, alpha and dropout of a LoRA adapter,
and the hyperparameter-search params), belongs to the run ``run`` (a name, or a
:class:`~tunescope.record.Run`; default: ``args.run_name``, else the SDK's default) in
``store``, and ends ``completed``, ``failed`` when ``train()`` raises, or ``pruned`` when it
raises Optuna's ``TrialPruned`` (``hyperparameter_search`` does).

How: at ``on_init_end`` the callback finds its Trainer (the caller of the callback handler)
and wraps that instance's ``train`` (so the trial spans the whole call and an exception ends
it) and ``get_batch_samples``. A callback added after the Trainer was built
(``trainer.add_callback``) opens its trial at ``on_train_begin`` and ends it at
``on_train_end``; when training raises instead, the trial ends ``failed`` at the next
``on_train_begin`` or at interpreter exit. Only the world's
process zero records (``args.process_index == 0``). A failure inside the callback logs one
warning on ``tunescope.integrations`` and never stops training.
"""

from __future__ import annotations

import atexit
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

import tunescope.record as ts
from tunescope import _clock
from tunescope.integrations._common import safe

__all__ = ["TunescopeCallback"]

_SKIPPED_LOG_SUFFIXES = ("_runtime", "_per_second")
_SKIPPED_LOG_KEYS = frozenset({"total_flos"})


class _BatchTimer:
    """Times each ``next()`` on the Trainer's epoch iterator through ``trial.watch()``: one
    watched pass per epoch iterator, kept across the ``get_batch_samples`` calls of the
    epoch and closed (recording the last batch) when the epoch or the training ends."""

    def __init__(self) -> None:
        self._source: object = None
        self._watched: Iterator[Any] | None = None

    def wrap(self, trial: ts.Trial, epoch_iterator: Iterator[Any]) -> Iterator[Any]:
        if epoch_iterator is not self._source or self._watched is None:
            self.close()
            self._source = epoch_iterator
            self._watched = iter(trial.watch(epoch_iterator))
        return self._watched

    def close(self) -> None:
        watched, self._watched, self._source = self._watched, None, None
        close = getattr(watched, "close", None)
        if close is not None:
            close()


class _Patched:
    """A method of one Trainer instance, wrapped. It pickles (and copies) as the plain
    method, so a Trainer sent to another process (Ray Tune's hyperparameter search does) works
    there, unrecorded."""

    __tunescope__ = True

    def __init__(self, trainer: Trainer, name: str, call: Callable[..., Any]) -> None:
        self._trainer, self._name, self._call = trainer, name, call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_plain_method, (self._trainer, self._name))


def _plain_method(trainer: Trainer, name: str) -> Any:
    """The class's own method ``name`` bound to ``trainer`` (what :class:`_Patched` wraps)."""
    return types.MethodType(getattr(type(trainer), name), trainer)


def _find_trainer() -> Trainer | None:
    """The Trainer whose callback handler is calling us (a few frames up), if any."""
    frame = sys._getframe(1)
    for _ in range(12):
        obj = frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
        if frame.f_back is None:
            return None
        frame = frame.f_back
    return None


def _optuna_name(hp_trial: Any) -> str | None:
    number = getattr(hp_trial, "number", None)
    return f"trial-{number}" if isinstance(number, int) else None


def _hp_params(hp_trial: Any) -> dict[str, Any]:
    if isinstance(hp_trial, dict):
        return dict(hp_trial)
    params = getattr(hp_trial, "params", None)
    return dict(params) if isinstance(params, dict) else {}


def _training_params(args: TrainingArguments, model: Any, hp_trial: Any) -> dict[str, Any]:
    """What sets a training up, as trial params (see the module doc)."""
    p: dict[str, Any] = {
        "learning_rate": args.learning_rate,
        "batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
    }
    if args.max_steps is not None and args.max_steps > 0:
        p["max_steps"] = args.max_steps
    else:
        p["epochs"] = args.num_train_epochs
    p["seed"] = args.seed
    p["optim"] = str(getattr(args.optim, "value", args.optim))
    if args.bf16 or args.fp16:
        p["precision"] = "bf16" if args.bf16 else "fp16"
    configs = getattr(model, "peft_config", None)
    if isinstance(configs, dict) and configs:
        active = getattr(model, "active_adapter", None)
        cfg = configs.get(active) if isinstance(active, str) else None
        cfg = cfg or next(iter(configs.values()))
        peft_type = getattr(cfg, "peft_type", None)
        if peft_type is not None:
            p["peft"] = str(getattr(peft_type, "value", peft_type))
        for attr, key in (
            ("r", "lora_r"),
            ("lora_alpha", "lora_alpha"),
            ("lora_dropout", "lora_dropout"),
        ):
            value = getattr(cfg, attr, None)
            if isinstance(value, (int, float)):
                p[key] = value
    p.update(_hp_params(hp_trial))
    return p


def _log_scalars(logs: dict[str, Any]) -> dict[str, float]:
    """The Trainer's log entries as tunescope scalars (see the module doc)."""
    is_eval = any(k.startswith("eval_") for k in logs)
    out: dict[str, float] = {}
    for key, value in logs.items():
        if key in _SKIPPED_LOG_KEYS or key.endswith(_SKIPPED_LOG_SUFFIXES):
            continue
        if key == "epoch" and is_eval:
            continue  # the training log of the same step has it
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        out["eval/" + key[5:] if key.startswith("eval_") else key] = float(value)
    return out


def _checkpoint_dir(output_dir: str | None, step: int) -> Path | None:
    """The folder the Trainer just saved checkpoint ``step`` to: ``output_dir/checkpoint-N``,
    or ``output_dir/<run>/checkpoint-N`` under a hyperparameter search (the newest)."""
    if not output_dir:
        return None
    base = Path(output_dir)
    folder = f"checkpoint-{step}"
    found = [p for p in (base / folder, *base.glob(f"*/{folder}")) if p.is_dir()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


class TunescopeCallback(TrainerCallback):  # type: ignore[misc]
    """Record each ``trainer.train()`` as a tunescope trial (see the module doc)."""

    def __init__(
        self,
        run: str | ts.Run | None = None,
        *,
        store: str | None = None,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        interval: float = 1.0,
        sampler: bool = True,
    ) -> None:
        self._run_arg = run
        self._store = store
        self._name = name
        self._params = params
        self._interval = interval
        self._sampler = sampler
        self._stack: ExitStack | None = None
        self._trial: ts.Trial | None = None
        self._owned = False
        self._from_callbacks = False  # opened at on_train_begin, not by a wrapped train()
        self._step_name: str | None = None
        self._timer = _BatchTimer()
        self._atexit = False

    @property
    def trial(self) -> ts.Trial | None:
        """The trial being recorded while ``train()`` runs, else None."""
        return self._trial

    # ------------------------------------------------------------------ the trial
    def _begin(self, args: TrainingArguments, model: Any, hp_trial: Any) -> None:
        stack = ExitStack()
        try:
            trial = ts.current_trial()
            owned = trial is None or not trial.recording
            if owned:
                if isinstance(self._run_arg, ts.Run):
                    run = self._run_arg
                else:
                    run = stack.enter_context(
                        ts.run(
                            self._run_arg or args.run_name or None,
                            store=self._store,
                            interval=self._interval,
                            sampler=self._sampler,
                        )
                    )
                params = self._params
                if params is None:
                    params = _training_params(args, model, hp_trial)
                trial = stack.enter_context(
                    run.trial(self._name or _optuna_name(hp_trial), params=params)
                )
            assert trial is not None
            before = trial.auto_optimizer_steps
            trial.auto_optimizer_steps = False
            stack.callback(setattr, trial, "auto_optimizer_steps", before)
            stack.callback(self._timer.close)
        except BaseException:
            stack.close()
            raise
        self._stack, self._trial, self._owned = stack, trial, owned
        self._step_name = None

    def _end(self, exc: BaseException | None) -> None:
        stack, self._stack = self._stack, None
        self._trial = None
        self._from_callbacks = False
        if stack is not None:
            if exc is None:
                stack.close()
            else:
                stack.__exit__(type(exc), exc, exc.__traceback__)

    def _target(self, state: TrainerState) -> ts.Trial | None:
        """Where an event goes: the training's trial, else (an ``evaluate()`` outside
        training) the trial current in this thread."""
        if not state.is_world_process_zero:
            return None
        if self._trial is not None:
            return self._trial
        trial = ts.current_trial()
        return trial if trial is not None and trial.recording else None

    # ------------------------------------------------------------------ wrapping the Trainer
    def _wrap(self, trainer: Trainer) -> None:
        """Wrap the instance's ``train`` and ``get_batch_samples`` (once)."""
        if getattr(trainer.train, "__tunescope__", False):
            return
        train = trainer.train

        def wrapped_train(*args: Any, **kwargs: Any) -> Any:
            if self._stack is not None or trainer.args.process_index != 0:
                return train(*args, **kwargs)
            self._begin(trainer.args, trainer.model, kwargs.get("trial"))
            try:
                result = train(*args, **kwargs)
            except BaseException as exc:
                self._end(exc)
                raise
            self._end(None)
            return result

        setattr(trainer, "train", _Patched(trainer, "train", wrapped_train))  # noqa: B010
        self._wrap_batches(trainer)

    def _wrap_batches(self, trainer: Trainer) -> None:
        original: Callable[..., Any] | None = getattr(trainer, "get_batch_samples", None)
        if original is None or getattr(original, "__tunescope__", False):
            return  # transformers before 4.47, or done

        def wrapped_get_batch_samples(epoch_iterator: Any, *args: Any, **kwargs: Any) -> Any:
            trial = self._trial
            if trial is not None:
                try:
                    epoch_iterator = self._timer.wrap(trial, epoch_iterator)
                except Exception:
                    pass
            return original(epoch_iterator, *args, **kwargs)

        patched = _Patched(trainer, "get_batch_samples", wrapped_get_batch_samples)
        setattr(trainer, "get_batch_samples", patched)  # noqa: B010

    def _close_at_exit(self) -> None:
        if self._stack is not None:
            self._end(RuntimeError("training ended without on_train_end (it raised)"))

    # ------------------------------------------------------------------ callback events
    @safe
    def on_init_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if args.process_index == 0:
            trainer = _find_trainer()
            if trainer is not None:
                self._wrap(trainer)

    @safe
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if not state.is_world_process_zero:
            return
        if self._stack is not None and self._from_callbacks:  # the last training raised
            self._end(RuntimeError("training ended without on_train_end (it raised)"))
        if self._stack is None:
            self._begin(args, kw.get("model"), None)
            self._from_callbacks = True
            trainer = _find_trainer()
            if trainer is not None:
                self._wrap_batches(trainer)
            if not self._atexit:
                atexit.register(self._close_at_exit)
                self._atexit = True
        elif self._owned and self._params is None and state.trial_params:
            assert self._trial is not None
            self._trial.update_params(dict(state.trial_params))

    @safe
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self._from_callbacks:
            self._end(None)

    @safe
    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._timer.close()  # the epoch's last batch: its step time ends here

    @safe
    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        trial = self._trial
        if trial is None or not state.is_world_process_zero:
            return
        optimizer = kw.get("optimizer")
        if getattr(optimizer, "step_was_skipped", False):  # accelerate: the scaler skipped it
            return
        if self._step_name is None:
            self._step_name = type(getattr(optimizer, "optimizer", optimizer)).__name__
        trial.optimizer_step(state.global_step, self._step_name)

    @safe
    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        trial = self._target(state)
        if trial is None:
            return
        metrics = kw.get("metrics") or {}
        name, duration = "eval", 0.0
        for key, value in metrics.items():
            if key.endswith("_runtime") and isinstance(value, (int, float)):
                name, duration = key[: -len("_runtime")], float(value)
                break
        trial.record_evaluation(name, _clock.now() - duration, duration, step=state.global_step)

    @safe
    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        trial = self._target(state)
        logs = kw.get("logs")
        if trial is None or not isinstance(logs, dict):
            return
        values = _log_scalars(logs)
        if values:
            trial.log(step=state.global_step, **values)

    @safe
    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        trial = self._target(state)
        if trial is None:
            return
        path = _checkpoint_dir(args.output_dir, state.global_step)
        if path is None:
            return
        name = "adapter" if (path / "adapter_config.json").is_file() else "checkpoint"
        trial.checkpoint(path, name=name, step=state.global_step)
