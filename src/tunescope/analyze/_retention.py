"""Raw retention with the findings and usage kept: what ``tunescope compact --keep-raw`` and
``tunescope serve --keep-raw`` run.

Before a finished trial loses raw samples, its findings are computed on them and kept in the
store (:meth:`~tunescope.store.SQLStore.keep_findings`); :func:`findings_for_trial` answers
those from then on. A running trial's findings go on being computed, from what is left (its
windows read the rollups). Then the raw chunks older than the cutoff are dropped
(:meth:`~tunescope.store.SQLStore.drop_raw`). Last, every ended trial without usage figures
kept at its data generation (dropping raw chunks raises it) has them computed and kept
(:func:`~tunescope.analyze._usage_kept.keep_usage_ahead`), so that the first ``tunescope
usage`` reads them back instead of computing every trial.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tunescope.analyze._rules import findings_for_trial, to_dict
from tunescope.analyze._settings import FindingSettings
from tunescope.analyze._usage_kept import UsageKept, keep_usage_ahead
from tunescope.errors import ConfigError
from tunescope.store import RetentionReport, Store

__all__ = ["Compaction", "compact_raw"]


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_raw` did: the raw chunks it dropped (or, dry, would drop), and the
    ended trials whose usage it computed and kept (None on a dry run)."""

    raw: RetentionReport
    usage: UsageKept | None


def compact_raw(
    store: Store,
    keep_raw_s: float,
    *,
    dry_run: bool = False,
    now: float | None = None,
    settings: FindingSettings | None = None,
    usage_budget_s: float | None = None,
    usage_after: int = 0,
) -> Compaction:
    """Drop the raw chunks of ``store`` that ended more than ``keep_raw_s`` seconds before
    ``now`` (default: this process's clock), once rolled up, keeping the findings of the
    finished trials that lose raw samples first; then keep the usage of the ended trials that
    have none for ``settings`` (:func:`keep_usage_ahead`, one pass: at most
    ``usage_budget_s`` seconds, resuming after trial ``usage_after``). ``dry_run``: change
    nothing, say what would go. ConfigError for a store that keeps no rollups (an HTTP store:
    its server compacts)."""
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
    if dry_run:
        return Compaction(report, None)
    usage = keep_usage_ahead(store, settings, budget_s=usage_budget_s, after=usage_after, now=now)
    return Compaction(report, usage)
