"""TensorBoard: one line writes a tunescope trial's summary as scalars and a text.

::

    from torch.utils.tensorboard import SummaryWriter
    import tunescope.record as ts
    from tunescope.integrations.tensorboard import log_summary

    writer = SummaryWriter("runs/lora")
    with ts.run("lora-search").trial(params={"lr": 3e-4}) as trial:
        train(writer)
    log_summary(trial, writer)  # the one line (or a log dir: log_summary(trial, "runs/lora"))

Each number is a scalar (``tunescope/gpu_utilization_peak_pct``,
``tunescope/cpu_memory_peak_gib``…, ``tunescope/findings_high``…; see
:mod:`tunescope.integrations.mlflow` for the list) at the trial's optimizer step count (or
``step``), so it lines up with the end of its training curves; ``tunescope/summary`` is a text
(the TEXT tab): a table of peaks and means, each finding with its severity, and the page's
link.

``writer`` is any writer with ``add_scalar(tag, value, step)`` and ``add_text(tag, text,
step)`` (``torch.utils.tensorboard``'s and ``tensorboardX``'s ``SummaryWriter``), flushed
after; or a log directory, where an event file of its own is written with the
``tensorboard`` package alone (neither torch nor TensorFlow needed). Nothing here raises into
training: a problem logs one warning and logs nothing. It returns the summary it logged, or
None.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.text.summary_v2 import text_pb
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tunescope.integrations._summary import TIMEOUT_S, TrackerSummary, TrialRef, guard, summarize

__all__ = ["log_summary"]

TEXT_TAG = "tunescope/summary"


def _write_dir(logdir: str, summary: TrackerSummary, step: int) -> None:
    """The summary as one event file in ``logdir``: scalars as simple values (what
    ``SummaryWriter.add_scalar`` writes) and the text with the text plugin's metadata."""
    w = EventFileWriter(logdir, filename_suffix=".tunescope")
    try:
        t = time.time()
        values = [
            summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in summary.metrics.items()
        ]
        w.add_event(
            event_pb2.Event(wall_time=t, step=step, summary=summary_pb2.Summary(value=values))
        )
        w.add_event(
            event_pb2.Event(wall_time=t, step=step, summary=text_pb(TEXT_TAG, summary.text()))
        )
    finally:
        w.close()


def _write(writer: Any, summary: TrackerSummary, step: int) -> None:
    for k, v in summary.metrics.items():
        writer.add_scalar(k, v, step)
    writer.add_text(TEXT_TAG, summary.text(), step)
    flush = getattr(writer, "flush", None)
    if callable(flush):
        flush()


def log_summary(
    trial: TrialRef,
    writer: Any,
    *,
    step: int | None = None,
    run: str | int | None = None,
    store: str | os.PathLike[str] | None = None,
    ui_url: str | None = None,
    timeout: float = TIMEOUT_S,
) -> TrackerSummary | None:
    """Write ``trial``'s summary to ``writer`` (a ``SummaryWriter``) or into the log
    directory ``writer`` names, at ``step`` (default: the trial's optimizer step count).

    ``trial``: the SDK's trial, or a trial id or name (with ``run``) in ``store``;
    ``ui_url``: the page's base URL (default $TUNESCOPE_UI_URL, else an HTTP store's server,
    else ``http://127.0.0.1:8765``); ``timeout``: the longest it waits for the store."""
    summary = summarize(trial, run=run, store=store, ui_url=ui_url, timeout=timeout)
    if summary is None:
        return None
    at = summary.step if step is None else int(step)
    if isinstance(writer, (str, os.PathLike)):
        logdir = os.fspath(writer)
        ok = guard(
            "tensorboard:dir",
            f"writing to the log directory {logdir}",
            lambda: _write_dir(logdir, summary, at),
        )
    else:
        ok = guard(
            "tensorboard:writer",
            "writing to the SummaryWriter",
            lambda: _write(writer, summary, at),
        )
    return summary if ok else None
