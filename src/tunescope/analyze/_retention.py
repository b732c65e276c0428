"""Raw retention with the findings kept: what ``tunescope compact --keep-raw`` and ``tunescope
serve --keep-raw`` run.

Before a finished trial loses raw samples, its findings are computed on them and kept in the
store (:meth:`~tunescope.store.SQLStore.keep_findings`); :func:`findings_for_trial` answers
those from then on. A running trial's findings go on being computed, from what is left (its
windows read the rollups). Then the raw chunks older than the cutoff are dropped
(:meth:`~tunescope.store.SQLStore.drop_raw`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from tunescope.analyze._rules import findings_for_trial, to_dict
from tunescope.analyze._settings import FindingSettings
from tunescope.errors import ConfigError
from tunescope.store import RetentionReport, Store

__all__ = ["compact_raw"]


def compact_raw(
    store: Store,
    keep_raw_s: float,
    *,
    dry_run: bool = False,
    now: float | None = None,
    settings: FindingSettings | None = None,
) -> RetentionReport:
    """Drop the raw chunks of ``store`` that ended more than ``keep_raw_s`` seconds before
    ``now`` (default: this process's clock), once rolled up, keeping the findings of the
    finished trials that lose raw samples first. ``dry_run``: change nothing, say what would
    go. ConfigError for a store that keeps no rollups (an HTTP store: its server compacts)."""
    drop_raw: Any = getattr(store, "drop_raw", None)
    if drop_raw is None:
        raise ConfigError(f"{store.url} is not a database: compact runs where its data is")
    before = (time.time() if now is None else now) - keep_raw_s
    if not dry_run:
        for tid in store.trials_with_raw_before(before):  # type: ignore[attr-defined]
            if store.kept_findings(tid) is not None:  # type: ignore[attr-defined]
                continue  # kept when its raw first went: later ones would see less
            trial = store.get_trial(tid)
            if trial.state == "running":
                continue
            found = findings_for_trial(store, trial, settings)
            store.keep_findings(tid, json.dumps(to_dict(found)), time.time())  # type: ignore[attr-defined]
    report: RetentionReport = drop_raw(before, dry_run=dry_run)
    return report
