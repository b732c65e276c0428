"""The server's background upkeep of its store, on a daemon thread: with ``--keep-raw 30d``, the
daily compaction (:func:`tunescope.analyze.compact_raw`, once soon after start and then every
:data:`COMPACT_EVERY_S`, logging what it dropped); always, passes that compute and keep the
usage figures of the ended trials that have none (:func:`tunescope.analyze.keep_usage_ahead`),
so the Usage page's first query reads them back instead of computing every trial. A failure
is logged and tried again at the next turn, never raised into the server.

Each compaction ends with such a pass; without ``--keep-raw`` one comes soon after start and
then every :data:`USAGE_EVERY_S` (the trials that ended meanwhile). A pass stops starting
trials after :data:`USAGE_PASS_S`, so the server's store and interpreter are never held long;
while trials are left, another pass resumes where it stopped :data:`USAGE_PAUSE_S` later,
until none are."""

from __future__ import annotations

import logging
import threading
import time

from tunescope.analyze import FindingSettings, UsageKept, compact_raw, keep_usage_ahead
from tunescope.errors import TunescopeError
from tunescope.store import Store

__all__ = ["COMPACT_EVERY_S", "USAGE_EVERY_S", "USAGE_PASS_S", "USAGE_PAUSE_S", "Compactor"]

log = logging.getLogger("tunescope.server")

COMPACT_EVERY_S = 86400.0
"""How often the server drops raw samples older than its ``--keep-raw``."""

FIRST_AFTER_S = 60.0
"""The first compaction's delay after start (the server answers first)."""

USAGE_PASS_S = 10.0
"""Seconds after which a pass keeping ended trials' usage starts no more trials."""

USAGE_PAUSE_S = 30.0
"""The pause between two passes keeping usage while ended trials are left without it."""

USAGE_EVERY_S = 600.0
"""Without ``--keep-raw`` (no compaction to end with one): how often a pass keeping usage
looks for the trials that ended since the last."""


class Compactor:
    """Runs compact_raw(store, keep_raw_s) every ``every`` seconds, the first after
    ``first_after``, on its own daemon thread, until :meth:`stop`; in between, passes that
    keep usage (each starting no trial after ``usage_pass_s``, ``usage_pause_s`` apart) while
    some is left. ``keep_raw_s`` None: no compaction, only the passes keeping usage, the
    first after ``first_after``, then every ``every`` (default :data:`USAGE_EVERY_S`)."""

    def __init__(
        self,
        store: Store,
        keep_raw_s: float | None,
        settings: FindingSettings | None = None,
        every: float | None = None,
        first_after: float = FIRST_AFTER_S,
        usage_pass_s: float = USAGE_PASS_S,
        usage_pause_s: float = USAGE_PAUSE_S,
    ) -> None:
        self._store = store
        self._keep = keep_raw_s
        self._settings = settings
        self._every = (
            every
            if every is not None
            else (USAGE_EVERY_S if keep_raw_s is None else COMPACT_EVERY_S)
        )
        self._first = first_after
        self._pass = usage_pass_s
        self._pause = usage_pause_s
        self._stop = threading.Event()
        self.runs = 0
        """Compactions finished (for tests and the log)."""
        self.usage_passes = 0
        """Passes keeping usage finished, compactions' included."""
        self.usage_kept = 0
        """Ended trials whose usage those passes kept."""
        self._thread = threading.Thread(target=self._loop, name="tunescope-compact", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        wait, due, after = self._first, 0.0, 0  # due: when the next compaction is (monotonic)
        while not self._stop.wait(wait):
            if time.monotonic() >= due:
                due = time.monotonic() + self._every
                usage = self._compact(after) if self._keep is not None else self._keep_usage(after)
            else:
                usage = self._keep_usage(after)
            until_due = max(0.0, due - time.monotonic())
            if usage is None or usage.done:
                after, wait = 0, until_due
            else:
                after, wait = usage.after, min(self._pause, until_due)

    def _compact(self, after: int) -> UsageKept | None:
        assert self._keep is not None
        try:
            done = compact_raw(
                self._store,
                self._keep,
                settings=self._settings,
                usage_budget_s=self._pass,
                usage_after=after,
            )
        except Exception as exc:  # a store error, or a bug of ours: the server goes on
            log.warning("compaction failed, tried again in %g s: %s", self._every, _said(exc))
            return None
        self.runs += 1
        r = done.raw
        log.info(
            "compaction: dropped %d raw chunks (%d samples, %d bytes) of %d series",
            r.chunks,
            r.samples,
            r.bytes,
            r.series,
        )
        return self._kept(done.usage)

    def _keep_usage(self, after: int) -> UsageKept | None:
        try:
            usage = keep_usage_ahead(self._store, self._settings, budget_s=self._pass, after=after)
        except Exception as exc:  # a store error, or a bug of ours: the server goes on
            log.warning(
                "keeping usage figures failed, tried again at the next pass: %s", _said(exc)
            )
            return None
        return self._kept(usage)

    def _kept(self, usage: UsageKept | None) -> UsageKept | None:
        if usage is None:
            return None
        self.usage_passes += 1
        self.usage_kept += usage.kept
        if usage.computed or not usage.done:
            log.info(
                "usage figures kept for %d ended trials in %.1f s%s",
                usage.kept,
                usage.seconds,
                "" if usage.done else f"; more are left, for a pass in {self._pause:g} s",
            )
        return usage

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30.0)


def _said(exc: Exception) -> str:
    """An error in a log line: our errors by their message, others with their type."""
    return str(exc) if isinstance(exc, TunescopeError) else f"{type(exc).__name__}: {exc}"
