"""MLflow: one line puts a tunescope trial's summary into your MLflow run.

::

    import mlflow
    import tunescope.record as ts
    from tunescope.integrations.mlflow import log_summary

    with mlflow.start_run():
        with ts.run("lora-search").trial(params={"lr": 3e-4}) as trial:
            train()
        log_summary(trial)  # the one line, after the trial's block

The active MLflow run (or the one ``mlflow_run_id`` names, through ``MlflowClient``) gets, in
one ``log_batch``:

* metrics ``tunescope/cpu_utilization_peak_pct``, ``…_mean_pct``, ``tunescope/
  gpu_utilization_{peak,mean}_pct``, ``tunescope/{cpu,gpu}_memory_{peak,mean}_gib``,
  ``tunescope/findings_{high,moderate,low}``, ``tunescope/optimizer_steps`` and
  ``tunescope/duration_s``, at the trial's optimizer step count;
* tags ``tunescope/findings`` (one ``severity: title`` line per finding), ``tunescope/url``
  (the trial's page), ``tunescope/run``, ``tunescope/trial`` (and their ids),
  ``tunescope/state`` and ``tunescope/complete``.

The trial may also be named after the fact: ``log_summary("trial-3", run="lora-search",
store="tunescope.db")`` or by its id. Nothing here raises into training: a problem (no active
MLflow run, a store or a tracking server that does not answer) logs one warning and logs
nothing. It returns the summary it logged, or None.
"""

from __future__ import annotations

import os
import time

import mlflow
from mlflow.entities import Metric, RunTag
from mlflow.tracking import MlflowClient

from tunescope.integrations._summary import (
    TIMEOUT_S,
    TrackerSummary,
    TrialRef,
    guard,
    once,
    summarize,
)

__all__ = ["TAG_MAX_CHARS", "log_summary"]

TAG_MAX_CHARS = 5000
"""A tag's value is cut to this many characters (MLflow's own limit is 8000; older
servers' 5000)."""


def _clip(text: str) -> str:
    return text if len(text) <= TAG_MAX_CHARS else text[: TAG_MAX_CHARS - 1] + "…"


def log_summary(
    trial: TrialRef,
    *,
    run: str | int | None = None,
    store: str | os.PathLike[str] | None = None,
    ui_url: str | None = None,
    mlflow_run_id: str | None = None,
    timeout: float = TIMEOUT_S,
) -> TrackerSummary | None:
    """Log ``trial``'s summary into the active MLflow run, or the run ``mlflow_run_id``.

    ``trial``: the SDK's trial, or a trial id or name (with ``run``) in ``store``;
    ``ui_url``: the page's base URL (default $TUNESCOPE_UI_URL, else an HTTP store's server,
    else ``http://127.0.0.1:8765``); ``timeout``: the longest it waits for the store."""
    target = mlflow_run_id
    if target is None:
        active = mlflow.active_run()
        if active is None:
            once(
                "mlflow:no-run",
                "tunescope: no active MLflow run: call log_summary() inside `with "
                "mlflow.start_run():` or pass mlflow_run_id=; the summary is not logged",
            )
            return None
        target = active.info.run_id
    summary = summarize(trial, run=run, store=store, ui_url=ui_url, timeout=timeout)
    if summary is None:
        return None
    ms = int(time.time() * 1000)
    metrics = [Metric(k, v, ms, summary.step) for k, v in summary.metrics.items()]
    tags = [RunTag(k, _clip(v)) for k, v in summary.tags().items()]
    run_id = target
    ok = guard(
        "mlflow:log",
        f"logging to MLflow run {run_id}",
        lambda: MlflowClient().log_batch(run_id, metrics=metrics, tags=tags),
    )
    return summary if ok else None
