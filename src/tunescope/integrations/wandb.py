"""Weights & Biases: one line puts a tunescope trial's summary into your W&B run's summary.

::

    import wandb
    import tunescope.record as ts
    from tunescope.integrations.wandb import log_summary

    with wandb.init(project="lora-search") as wb:
        with ts.run("lora-search").trial(params={"lr": 3e-4}) as trial:
            train()
        log_summary(trial)  # the one line: into wandb.run (or log_summary(trial, wb))

``run.summary`` gets the numbers (``tunescope/gpu_utilization_peak_pct``,
``tunescope/cpu_memory_peak_gib``…, ``tunescope/findings_high``…; see
:mod:`tunescope.integrations.mlflow` for the list), the trial's identity and page
(``tunescope/url``), its findings, one ``severity: title`` line each
(``tunescope/findings``), and the whole summary as Markdown (``tunescope/summary``).

The trial may also be named after the fact: ``log_summary("trial-3", run="lora-search",
store="tunescope.db")`` or by its id. Nothing here raises into training: a problem (no W&B
run, a store that does not answer) logs one warning and logs nothing. It returns the summary
it logged, or None.
"""

from __future__ import annotations

import os
from typing import Any

import wandb

from tunescope.integrations._summary import (
    TIMEOUT_S,
    TrackerSummary,
    TrialRef,
    guard,
    once,
    summarize,
)

__all__ = ["log_summary"]


def log_summary(
    trial: TrialRef,
    wandb_run: Any = None,
    *,
    run: str | int | None = None,
    store: str | os.PathLike[str] | None = None,
    ui_url: str | None = None,
    timeout: float = TIMEOUT_S,
) -> TrackerSummary | None:
    """Put ``trial``'s summary into ``wandb_run.summary`` (default: ``wandb.run``).

    ``trial``: the SDK's trial, or a trial id or name (with ``run``) in ``store``;
    ``ui_url``: the page's base URL (default $TUNESCOPE_UI_URL, else an HTTP store's server,
    else ``http://127.0.0.1:8765``); ``timeout``: the longest it waits for the store."""
    target = wandb_run if wandb_run is not None else wandb.run
    if target is None:
        once(
            "wandb:no-run",
            "tunescope: no W&B run: call log_summary() after wandb.init() or pass the run; "
            "the summary is not logged",
        )
        return None
    summary = summarize(trial, run=run, store=store, ui_url=ui_url, timeout=timeout)
    if summary is None:
        return None
    values: dict[str, Any] = {**summary.metrics, **summary.tags()}
    values["tunescope/summary"] = summary.text()
    ok = guard("wandb:log", "updating the W&B run's summary", lambda: target.summary.update(values))
    return summary if ok else None
