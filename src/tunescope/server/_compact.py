"""The team server's daily compaction (``tunescope serve --keep-raw 30d``): a daemon thread that
runs :func:`tunescope.analyze.compact_raw` on the server's store once soon after start and then
every :data:`COMPACT_EVERY_S`, logging what it dropped; a failure is logged and tried again at
the next turn, never raised into the server."""

from __future__ import annotations

import logging
import threading

from tunescope.analyze import FindingSettings, compact_raw
from tunescope.errors import TunescopeError
from tunescope.store import Store

__all__ = ["COMPACT_EVERY_S", "Compactor"]

log = logging.getLogger("tunescope.server")

COMPACT_EVERY_S = 86400.0
"""How often the server drops raw samples older than its ``--keep-raw``."""

FIRST_AFTER_S = 60.0
"""The first compaction's delay after start (the server answers first)."""


class Compactor:
    """Runs compact_raw(store, keep_raw_s) every ``every`` seconds, the first after
    ``first_after``, on its own daemon thread, until :meth:`stop`."""

    def __init__(
        self,
        store: Store,
        keep_raw_s: float,
        settings: FindingSettings | None = None,
        every: float = COMPACT_EVERY_S,
        first_after: float = FIRST_AFTER_S,
    ) -> None:
        self._store = store
        self._keep = keep_raw_s
        self._settings = settings
        self._every = every
        self._first = first_after
        self._stop = threading.Event()
        self.runs = 0
        """Compactions finished (for tests and the log)."""
        self._thread = threading.Thread(target=self._loop, name="tunescope-compact", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        wait = self._first
        while not self._stop.wait(wait):
            wait = self._every
            try:
                r = compact_raw(self._store, self._keep, settings=self._settings)
            except TunescopeError as exc:
                log.warning("compaction failed, tried again in %g s: %s", self._every, exc)
                continue
            self.runs += 1
            log.info(
                "compaction: dropped %d raw chunks (%d samples, %d bytes) of %d series",
                r.chunks,
                r.samples,
                r.bytes,
                r.series,
            )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30.0)
