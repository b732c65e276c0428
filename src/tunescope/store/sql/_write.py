"""The one write path of a :class:`~tunescope.store.sql._sql.SQLStore`: a batch in one
transaction, exactly once by its id (:meth:`~tunescope.store.Store.write`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import defaultdict
from typing import Any

from tunescope._kept import Kept
from tunescope.errors import Conflict, NotFound, Rejected
from tunescope.store._checks import check_sample
from tunescope.store._codec import stored_end
from tunescope.store.produce._batch import Batch, TrialSpec
from tunescope.store.sql._heal import retrying
from tunescope.store.sql._pages import json_or as _loads
from tunescope.store.sql._rows import STORE_NOW

__all__ = ["WriteMixin"]


def batch_digest(batch: Batch) -> str:
    """The SHA-256 of what a batch says (its spec aside: a spec only creates the trial, and
    a resend may carry one the first sending did not), its numbers as :meth:`Batch.from_json`
    reads them (a time or value given as an int is the float the spool gives back), so a
    resend of the same batch (from memory, the spool or the wire) has the same digest. A
    value JSON cannot hold is taken by its repr (the write refuses it further on)."""

    def num(v: Any) -> Any:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    def opt(v: Any) -> Any:
        return None if v is None else num(v)

    end = batch.end
    doc = [
        batch.id,
        batch.trial,
        batch.host,
        [[m, d, n, num(t), num(v)] for m, d, n, t, v in batch.samples],
        [[k, num(t), n, st, opt(du), opt(v), data] for k, t, n, st, du, v, data in batch.events],
        [[n, st, num(t), num(v)] for n, st, t, v in batch.scalars],
        opt(batch.heartbeat),
        None if batch.pids is None else list(batch.pids),
        batch.params,
        None
        if end is None
        else [end.state, num(end.t), end.error, end.exit_code, end.only_if_running],
        batch.where,
    ]
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


class WriteMixin:
    """Batches for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    url: str
    dialect: Any
    _lock: threading.RLock
    _written: set[int]
    _trial_keys: Kept[str, int]
    _tx: Any
    _q: Any
    _run_row: Any
    _insert_trial: Any
    _series_ids_in: Any
    _append: Any
    _touch: Any
    _insert_events: Any
    _insert_scalars: Any
    _merge_where: Any

    # ------------------------------------------------------------------ batches
    @retrying
    def write(self, batch: Batch) -> int:
        digest = batch_digest(batch)  # before the lock: a big batch takes a while
        with self._lock, self._tx(write=True) as cur:
            tid, was = self._claim_batch(cur, batch, digest)
            if was is not None:  # written before (by this connection or another)
                if was and was != digest:
                    raise Conflict(f"batch {batch.id!r} was written before with other content")
                return tid
            by_series = self._batch_series(cur, tid, batch)
            self._write_bulk(cur, tid, batch, by_series)
            self._finish_batch(cur, tid, batch)
            self._written.update(by_series)
            return tid

    # The steps of a write, each inside the caller's transaction; a backend that keeps the
    # bulk (samples, events, scalars) elsewhere runs them in its own order around
    # :meth:`_write_bulk` (see ``store/clickhouse/_store.py``).
    def _claim_batch(self, cur: Any, batch: Batch, digest: str) -> tuple[int, str | None]:
        """The batch's trial (created from its spec if new), and the batch id recorded with
        ``digest`` unless it was before: then the trial it was written to and the digest it
        was recorded with ("" for a batch recorded before digests: any content is a resend)."""
        tid = self._trial_for(cur, batch.trial, batch.spec)
        (project_id,) = self._q(
            cur,
            "SELECT r.project_id FROM trials t JOIN runs r ON r.id = t.run_id WHERE t.id = ?",
            (tid,),
        ).fetchone()
        if (
            self._q(
                cur,
                "INSERT INTO batches (project_id, id, trial_id, digest, t) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, id) DO NOTHING",
                (project_id, batch.id, tid, digest, time.time()),
            ).rowcount
            == 1
        ):
            return tid, None
        was_tid, was = self._q(
            cur,
            "SELECT trial_id, digest FROM batches WHERE project_id = ? AND id = ?",
            (project_id, batch.id),
        ).fetchone()
        return int(was_tid), "" if was is None else str(was)

    def _batch_series(
        self, cur: Any, tid: int, batch: Batch
    ) -> dict[int, list[tuple[float, float]]]:
        """The batch's samples by series id (series created where new); Rejected, before
        anything is written, when a sample is not a finite number within the store's ranges."""
        for metric, _device, _note, t, v in batch.samples:
            problem = check_sample(t, v)
            if problem is not None:
                raise Rejected(f"{metric}: {problem}")
        ids = self._series_ids_in(
            cur, tid, batch.host, [(m, d, n) for m, d, n, _t, _v in batch.samples]
        )
        by_series: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for metric, device, _note, t, v in batch.samples:
            by_series[ids[(metric, device or "")]].append((t, v))
        return by_series

    def _write_bulk(
        self, cur: Any, tid: int, batch: Batch, by_series: dict[int, list[tuple[float, float]]]
    ) -> None:
        """Write the batch's samples, events and scalars (here: in the batch's transaction)."""
        self._append(cur, by_series)
        try:
            self._insert_events(cur, tid, batch.events)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"event data must be JSON values: {exc}") from None
        self._insert_scalars(cur, tid, batch.scalars)

    def _finish_batch(self, cur: Any, tid: int, batch: Batch) -> None:
        """What a batch changes in its trial, and the trial's data generation raised (a batch
        after the end too: its kept usage is stale)."""
        self._touch(cur, [tid])
        self._apply_trial_changes(cur, tid, batch)
        if batch.where is not None:
            self._merge_where(cur, tid, batch.host, batch.where)

    def _trial_for(self, cur: Any, key: str, spec: TrialSpec | None) -> int:
        """The trial of ``key``, created from ``spec`` if new. Only trials found already
        committed are cached: a trial created here is gone if the transaction rolls back."""
        tid = self._trial_keys.get(key)
        if tid is not None:
            return tid
        row = self._q(cur, "SELECT id FROM trials WHERE trial_key = ?", (key,)).fetchone()
        if row is not None:
            self._trial_keys.put(key, int(row[0]))
        else:
            if spec is None or spec.key != key:
                raise NotFound(f"no trial with key {key!r} in {self.url}")
            run_id = int(
                self._run_row(cur, spec.run, spec.start, spec.project, spec.os_user, spec.host)[0]
            )
            # the run row is locked by _insert_trial: look again once we hold it
            self._q(cur, f"SELECT id FROM runs WHERE id = ?{self.dialect.for_update}", (run_id,))
            row = self._q(cur, "SELECT id FROM trials WHERE trial_key = ?", (key,)).fetchone()
            if row is None:
                row = self._insert_trial(
                    cur,
                    run_id,
                    spec.name,
                    spec.params,
                    host=spec.host,
                    pids=spec.pids,
                    start=spec.start,
                    interval=spec.interval,
                    key=key,
                    rename=True,
                )
        return int(row[0])

    def _apply_trial_changes(self, cur: Any, tid: int, batch: Batch) -> None:
        if batch.params is not None:
            try:
                params = json.dumps(batch.params, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise Rejected(f"trial params must be JSON values: {exc}") from None
            self._q(cur, "UPDATE trials SET params = ? WHERE id = ?", (params, tid))
        if batch.pids:
            row = self._q(cur, "SELECT pids FROM trials WHERE id = ?", (tid,)).fetchone()
            merged = sorted(set(_loads(row[0], [])) | set(batch.pids))
            self._q(
                cur,
                "UPDATE trials SET pids = ? WHERE id = ? AND state = 'running'",
                (json.dumps(merged), tid),
            )
        if batch.heartbeat is not None or batch.spec is not None:
            self._stamp_seen(cur, tid, batch.heartbeat)
        if batch.heartbeat is not None:
            g = self.dialect.greatest
            self._q(
                cur,
                f"UPDATE trials SET heartbeat = {g}(COALESCE(heartbeat, 0), ?) "
                "WHERE id = ? AND state = 'running'",
                (batch.heartbeat, tid),
            )
        end = batch.end
        if end is not None:
            self._q(
                cur,
                "UPDATE trials SET state = ?, t_end = ?, error = ?, exit_code = ? WHERE id = ?"
                + (" AND state = 'running'" if end.only_if_running else ""),
                (end.state, stored_end(end.t), end.error, end.exit_code, tid),
            )

    def _stamp_seen(self, cur: Any, tid: int, heartbeat: float | None) -> None:
        """The store's clock notes that a running trial's writer is alive: at every batch
        with a heartbeat (whatever its writer's clock says: a node whose clock is ahead must
        not silence the others), and at a batch without one while no heartbeat has reached
        the trial yet (a batch just created it). A spooled batch replayed late counts too:
        its trial reads ``running`` for LOST_AFTER_S after it, at most."""
        if heartbeat is None:
            self._q(
                cur,
                f"UPDATE trials SET t_seen = {STORE_NOW} WHERE id = ? AND state = 'running' "
                "AND t_seen IS NULL AND COALESCE(heartbeat, t_start) = t_start",
                (tid,),
            )
            return
        self._q(
            cur,
            f"UPDATE trials SET t_seen = {STORE_NOW} WHERE id = ? AND state = 'running'",
            (tid,),
        )
