"""The SDK: record what training does, trial by trial, at a cost of microseconds.

::

    import torch
    import tunescope.record as ts

    with ts.run("lora-search") as run:
        for lr in (1e-4, 3e-4):
            with run.trial(params={"lr": lr}) as trial:
                for batch in trial.watch(loader):      # data_wait per batch
                    ...; optimizer.step()              # optimizer_step, no code change
                    trial.log(step=k, loss=loss.item())
                with trial.evaluation():               # evaluation interval
                    ...
                trial.checkpoint("out/adapter", name="adapter")

Recorded per trial (events: ``kind``, ``t`` epoch s, ``name``, ``step``, ``duration`` s,
``value``, ``data``):

* ``optimizer_step``: every ``torch.optim`` step, name = optimizer class, step = 1, 2, … per
  optimizer; data None for the first optimizer to step, ``{"optimizer": k}`` for the k-th
  other one. Needs torch imported before the trial (or before a later SDK call). A step a
  ``GradScaler`` skips calls no ``optimizer.step()`` and is not recorded.
* ``evaluation``: ``trial.evaluation(name)``, t = start, duration.
* ``data_wait``: ``trial.watch(iterable)``, per batch: duration = wait in ``next()``,
  step = batch index (from 0 in each pass), value = step time (this request to the next).
* ``checkpoint``: ``trial.checkpoint(path, name, step=…)``, data ``{"path", "bytes"}``;
  name ``"adapter"`` for an adapter save (the Adapters tab).
* ``mark``: ``trial.mark(name)``.
* scalars: ``trial.log(step, **values)``.
* derived samples per flush period: ``train.step_time``, ``train.data_wait``,
  ``train.throughput`` and, when CUDA is initialised, ``torch.mem.allocated``,
  ``torch.mem.reserved``, ``torch.alloc_retries`` per GPU.

For integrations (``tunescope.integrations``: the HF Trainer, Lightning, Optuna), which know
the framework's own step numbers and outcomes:

* ``trial.auto_optimizer_steps = False`` stops the torch hook from recording this trial's
  steps, so none is counted twice; set it back when training ends.
  ``trial.optimizer_step(step, name)`` records one real step at the framework's own number
  (the Trainer's ``global_step``: one per gradient-accumulation window, continuing after a
  resume, none for a step the scaler skipped); it counts in ``train.throughput``.
* ``trial.record_evaluation(name, start, duration, step)``: an evaluation reported once over.
* ``trial.update_params(params)``: params known only once training runs (Optuna's).
* ``trial.end_as(state, error)``: how the trial ends (``completed``, ``pruned``, ``failed``)
  whatever ends its block. Without it an owner trial ends ``pruned`` when the block raises
  Optuna's ``TrialPruned``, ``failed`` on any other exception, else ``completed``.
  ``end_as(state, defer=True)``: only if nothing else has ended the trial in the store.
* ``run.trial(name, key=...)``: the trial's key, for a trial that another process also
  writes by key (Ray Tune's driver writes the metrics and the end of each Tune trial).

Nothing here raises into training once a trial has started (see ``_safety``), and nothing
holds it: entering a run or a trial waits at most half a second for the store, leaving one at
most a second; what the store has not taken by then is kept (in memory, then in the spool)
and written when it is back. Importing this package does not import torch. The sampler
launcher (:func:`start_sampler`, :class:`Supervised`) is shared with ``tunescope run -- CMD``
and the distributed integration, which set the same variables (:func:`trial_env`) a trial sets
so that a script using the SDK joins the command's trial.

``$TUNESCOPE_MODE=disabled`` makes every call above a no-op (nothing opened, started or
written; ``watch`` gives the iterable back); a run that records says where on stderr once,
unless ``$TUNESCOPE_QUIET=1`` (see ``_mode``).
"""

from tunescope._env import (
    ENV_INTERVAL,
    ENV_JOB_ID,
    ENV_MODE,
    ENV_QUIET,
    ENV_RUN,
    ENV_RUN_ID,
    ENV_STORE,
    ENV_TRIAL_ID,
    ENV_TRIAL_KEY,
)
from tunescope.record._env import process_rank, trial_env
from tunescope.record._job import Job, find_job, job_key
from tunescope.record._launch import (
    MAX_RESTARTS,
    SamplerHandle,
    Supervised,
    held_since,
    own_group,
    sampler_env,
    start_sampler,
)
from tunescope.record._mode import MODES, check_mode, disabled
from tunescope.record._run import ENTER_WAIT_S, Background, Run, current_trial, run
from tunescope.record._trial import EXIT_WAIT_S, WAKE_MARGIN_S, Trial, error_text, jsonable

__all__ = [
    "ENTER_WAIT_S",
    "ENV_INTERVAL",
    "ENV_JOB_ID",
    "ENV_MODE",
    "ENV_QUIET",
    "ENV_RUN",
    "ENV_RUN_ID",
    "ENV_STORE",
    "ENV_TRIAL_ID",
    "ENV_TRIAL_KEY",
    "EXIT_WAIT_S",
    "MAX_RESTARTS",
    "MODES",
    "WAKE_MARGIN_S",
    "Background",
    "Job",
    "Run",
    "SamplerHandle",
    "Supervised",
    "Trial",
    "check_mode",
    "current_trial",
    "disabled",
    "error_text",
    "find_job",
    "held_since",
    "job_key",
    "jsonable",
    "own_group",
    "process_rank",
    "run",
    "sampler_env",
    "start_sampler",
    "trial_env",
]
