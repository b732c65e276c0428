"""The team server's daily compaction (``tunescope serve --keep-raw 30d``): a daemon thread that
runs :func:`tunescope.analyze.compact_raw` on the server's store once soon after start and then
every :data:`COMPACT_EVERY_S`, logging what it dropped; a failure is logged and tried again at
the next turn, never raised into the server.

Each compaction ends with a pass that computes and keeps the usage figures of the ended trials
that have none (:func:`tunescope.analyze.keep_usage_ahead`), so the Usage page's first query
reads them back. A pass stops starting trials after :data:`USAGE_PASS_S`, so the server's
store and interpreter are never held long; while trials are left, another pass resumes where
it stopped :data:`USAGE_PAUSE_S` later, until none are."""

from __future__ import annotations

import logging
import threading
import time

from tunescope.analyze import FindingSettings, UsageKept, compact_raw, keep_usage_ahead
from tunescope.errors import TunescopeError
from tunescope.store import Store

__all__ = ["COMPACT_EVERY_S", "USAGE_PASS_S", "USAGE_PAUSE_S", "Compactor"]

log = logging.getLogger("tunescope.server")

COMPACT_EVERY_S = 86400.0
"""How often the server drops raw samples older than its ``--keep-raw``."""

FIRST_AFTER_S = 60.0
"""The first compaction's delay after start (the server answers first)."""

USAGE_PASS_S = 10.0
"""Seconds after which a pass keeping ended trials' usage starts no more trials."""

USAGE_PAUSE_S = 30.0
"""The pause between two passes keeping usage while ended trials are left without it."""


class Compactor:
    """Runs compact_raw(store, keep_raw_s) every ``every`` seconds, the first after
    ``first_after``, on its own daemon thread, until :meth:`stop`; in between, passes that
    keep usage (each starting no trial after ``usage_pass_s``, ``usage_pause_s`` apart) while
    some is left."""

    def __init__(
        self,
        store: Store,
        keep_raw_s: float,
        settings: FindingSettings | None = None,
        every: float = COMPACT_EVERY_S,
        first_after: float = FIRST_AFTER_S,
        usage_pass_s: float = USAGE_PASS_S,
        usage_pause_s: float = USAGE_PAUSE_S,
    ) -> None:
        self._store = store
        self._keep = keep_raw_s
        self._settings = settings
        self._every = every
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
                usage = self._compact(after)
            else:
                usage = self._keep_usage(after)
            until_due = max(0.0, due - time.monotonic())
            if usage is None or usage.done:
                after, wait = 0, until_due
            else:
                after, wait = usage.after, min(self._pause, until_due)

    def _compact(self, after: int) -> UsageKept | None:
        try:
            done = compact_raw(
                self._store,
                self._keep,
                settings=self._settings,
                usage_budget_s=self._pass,
                usage_after=after,
            )
        except TunescopeError as exc:
            log.warning("compaction failed, tried again in %g s: %s", self._every, exc)
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
        except TunescopeError as exc:
            log.warning("keeping usage figures failed, tried again at the next compaction: %s", exc)
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
