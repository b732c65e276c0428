"""What the tracker integrations (MLflow, W&B, TensorBoard) share: one trial's summary, built
once from the store, as numbers, tags and a text, for three thin adapters.

The numbers are :func:`tunescope.analyze.summarize_trial`'s (peak and mean of each headline
metric, in the catalog's display units) and :func:`tunescope.analyze.findings_for_trial`'s
counts by severity; the text lists each finding and links the trial's page.

These run in the training process, after a trial: nothing here raises (a problem logs one
warning per kind, through :class:`~tunescope._once.Once`, and the adapter logs nothing), and
nothing holds the caller longer than ``timeout`` seconds: the trial's last writes are waited
for that long, and the store is read in a thread of its own, given what is left of it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from tunescope._env import ENV_UI_URL
from tunescope._names import page_link, page_root
from tunescope._once import Once
from tunescope.analyze import SEVERITIES, Finding, findings_for_trial, summarize_trial
from tunescope.integrations._common import LOG
from tunescope.metrics import headline, metric
from tunescope.record import Background, Trial
from tunescope.store import RunInfo, Store, TrialInfo, open_store, redact, resolve_url

__all__ = [
    "DEFAULT_UI_URL",
    "NAMES",
    "TIMEOUT_S",
    "TrackerSummary",
    "TrialRef",
    "guard",
    "once",
    "summarize",
    "ui_base",
]

DEFAULT_UI_URL = "http://127.0.0.1:8765"
"""Where ``tunescope ui`` serves the page by default."""

TIMEOUT_S = 5.0
"""Longest a summary holds its caller: waiting for the trial's last writes, then reading."""

NAMES = {
    "cpu.util": "cpu_utilization",
    "gpu.util": "gpu_utilization",
    "cpu.mem": "cpu_memory",
    "gpu.mem": "gpu_memory",
}
"""The tracker key's stem of each headline metric (``tunescope/<stem>_peak_<unit>``)."""

_UNITS = {"%": "pct", "GiB": "gib"}

TrialRef = Trial | int | str
"""A trial: the SDK's trial object, its id in the store, or its name (with ``run=``)."""

once = Once(LOG)
"""The tracker integrations' log-once (one warning per kind of problem and process)."""


def guard(key: str, what: str, fn: Callable[[], object]) -> bool:
    """Call ``fn``; False after one warning (per ``key``) when it raises: the adapters' calls
    into a tracker, which must not end the training that called them."""
    try:
        fn()
        return True
    except Exception as exc:
        once(
            key,
            "tunescope: %s failed (%s: %s); training goes on, the summary is not logged",
            what,
            type(exc).__name__,
            exc,
        )
        return False


def metric_key(key: str, stat: str) -> str:
    """``tunescope/gpu_utilization_peak_pct`` for (``gpu.util``, ``peak``)."""
    m = metric(key)
    stem = NAMES.get(key, key.replace(".", "_"))
    unit = _UNITS.get(m.unit, m.unit.lower())
    return f"tunescope/{stem}_{stat}_{unit}"


def ui_base(ui_url: str | None, store_url: str) -> str:
    """The page's base URL: ``ui_url``, else $TUNESCOPE_UI_URL, else the server of an HTTP
    store (a team server serves the page at the root of its address), else
    :data:`DEFAULT_UI_URL`."""
    base = ui_url or os.environ.get(ENV_UI_URL) or page_root(store_url) or DEFAULT_UI_URL
    return base.rstrip("/")


@dataclass(frozen=True)
class TrackerSummary:
    """One trial as a tracker takes it.

    metrics: ``tunescope/...`` -> number (peaks and means in display units: % and GiB;
    findings counts by severity; optimizer steps; duration in s, ``analyze.trial_duration``).
    findings: the trial's findings, most severe first. url: its page.
    complete: whether everything this process wrote of the trial reached the store (None when
    not known: a trial named by id or name). step: its optimizer steps, the step a tracker
    that wants one logs the summary at.
    """

    run: RunInfo
    trial: TrialInfo
    metrics: dict[str, float]
    findings: tuple[Finding, ...]
    url: str
    complete: bool | None
    step: int

    def finding_lines(self) -> list[str]:
        """One line per finding: ``high: <title>``."""
        return [f"{f.severity}: {f.title}" for f in self.findings]

    def tags(self) -> dict[str, str]:
        """The trial's identity, its findings (one per line, ``none`` if none) and its page."""
        out = {
            "tunescope/run": self.run.name,
            "tunescope/run_id": str(self.run.id),
            "tunescope/trial": self.trial.name,
            "tunescope/trial_id": str(self.trial.id),
            "tunescope/state": self.trial.state,
            "tunescope/findings": "\n".join(self.finding_lines()) or "none",
            "tunescope/url": self.url,
        }
        if self.complete is not None:
            out["tunescope/complete"] = "true" if self.complete else "false"
        return out

    def text(self) -> str:
        """The summary as Markdown: a table of the headline metrics, the findings, the link."""
        tr = self.trial
        head = f"**tunescope** trial `{tr.name}` (id {tr.id}) of run `{self.run.name}`: {tr.state}"
        dur = self.metrics.get("tunescope/duration_s")
        if dur is not None:
            head += f", {dur:.0f} s"
        head += f", {self.step} optimizer steps"
        lines = [head, "", "| metric | peak | mean |", "| --- | --- | --- |"]
        for m in headline():
            peak = self.metrics.get(metric_key(m.key, "peak"))
            mean = self.metrics.get(metric_key(m.key, "mean"))
            if peak is None or mean is None:
                lines.append(f"| {m.label} | – | – |")
            else:
                lines.append(f"| {m.label} | {peak:.2f} {m.unit} | {mean:.2f} {m.unit} |")
        counts = ", ".join(
            f"{int(self.metrics[f'tunescope/findings_{s}'])} {s}" for s in SEVERITIES
        )
        lines += ["", f"Findings: {counts}"]
        lines += [f"- {line}" for line in self.finding_lines()]
        if self.complete is False:
            lines += ["", "Part of the trial's data had not reached the store yet."]
        lines += ["", f"Page: {self.url}"]
        return "\n".join(lines)


def _numbers(
    store: Store, info: TrialInfo, findings: list[Finding]
) -> tuple[dict[str, float], int]:
    s = summarize_trial(store, info)
    out: dict[str, float] = {}
    for key, ms in s.metrics.items():
        m = metric(key)
        peak, mean = m.display(ms.peak), m.display(ms.mean)
        if peak is not None and math.isfinite(peak):
            out[metric_key(key, "peak")] = peak
        if mean is not None and math.isfinite(mean):
            out[metric_key(key, "mean")] = mean
    for sev in SEVERITIES:
        out[f"tunescope/findings_{sev}"] = float(sum(f.severity == sev for f in findings))
    out["tunescope/optimizer_steps"] = float(s.optimizer_steps)
    if s.duration is not None:
        out["tunescope/duration_s"] = s.duration
    return out, s.optimizer_steps


def _read(
    url: str,
    ref: TrialRef,
    key: str | None,
    run: str | int | None,
    base: str,
    complete: bool | None,
) -> TrackerSummary:
    with open_store(url) as store:
        if isinstance(ref, Trial):
            info = store.get_trial(ref.id) if ref.id is not None else store.trial_by_key(key or "")
        elif isinstance(ref, int):
            info = store.get_trial(ref)
        else:
            if run is None:
                raise ValueError(f"trial {ref!r} is a name: give its run too (run=...)")
            info = store.find_trial(store.get_run(run).id, ref)
        findings = findings_for_trial(store, info)
        numbers, steps = _numbers(store, info, findings)
        return TrackerSummary(
            run=store.get_run(info.run_id),
            trial=info,
            metrics=numbers,
            findings=tuple(findings),
            url=page_link(base, info.run_id, info.id),
            complete=complete,
            step=steps,
        )


def summarize(
    trial: TrialRef,
    *,
    run: str | int | None = None,
    store: str | os.PathLike[str] | None = None,
    ui_url: str | None = None,
    timeout: float = TIMEOUT_S,
) -> TrackerSummary | None:
    """The summary of ``trial`` (see :class:`TrackerSummary`), or None after one warning.

    ``trial``: the SDK's trial (its store is its run's; call it after the trial's ``with``
    block, or inside it for what is stored so far), or a trial id or name in ``store``
    (default $TUNESCOPE_STORE, else ./tunescope.db), a name with its ``run`` (name or id).
    ``ui_url``: the page's base URL (see :func:`ui_base`). Waits at most ``timeout`` s."""
    try:
        end = time.monotonic() + max(0.0, float(timeout))
        complete: bool | None = None
        key: str | None = None
        if isinstance(trial, Trial):
            url = trial.run.store_url
            key = trial.key
            writer = trial.writer
            if key is None or writer is None:
                once(
                    "summary:unrecorded",
                    "tunescope: trial %s recorded nothing (it was not entered, or its store "
                    "could not be used); no summary is logged",
                    _label(trial),
                )
                return None
            # every batch this process handed over: waited for while the trial records,
            # already settled (landed or spooled) once its block has ended
            complete = writer.flush(max(0.0, end - time.monotonic())) and not (writer.left_in_spool)
            if not complete:
                once(
                    "summary:incomplete",
                    "tunescope: part of trial %s's data has not reached the store %s yet (it "
                    "is kept and written later); the summary covers what is stored",
                    _label(trial),
                    redact(url),
                )
        elif isinstance(trial, (int, str)) and not isinstance(trial, bool):
            url = resolve_url(store)
        else:
            once(
                "summary:ref",
                "tunescope: a trial is a tunescope.record.Trial, an id or a name, not %r; "
                "no summary is logged",
                type(trial).__name__,
            )
            return None
        base = ui_base(ui_url, url)
        job = Background(
            lambda: _read(url, trial, key, run, base, complete), "tunescope-tracker-summary"
        )
        if not job.wait(end - time.monotonic()):
            once(
                "summary:slow",
                "tunescope: reading trial %s's summary from %s took more than %.1f s; no "
                "summary is logged",
                _label(trial),
                redact(url),
                timeout,
            )
            return None
        if job.error is not None:
            _failed(trial, job.error)
            return None
        return job.value
    except Exception as exc:
        _failed(trial, exc)
        return None


def _label(trial: object) -> object:
    """How a warning names the trial: its name, else its key's start, else as given."""
    if isinstance(trial, Trial):
        return trial.name or (trial.key or "?")[:8]
    return trial


def _failed(trial: object, exc: BaseException) -> None:
    once(
        "summary:error",
        "tunescope: cannot summarise trial %s (%s: %s); no summary is logged",
        _label(trial),
        type(exc).__name__,
        exc,
    )
