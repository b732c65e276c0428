"""Projects, runs and trials of a :class:`~tunescope.store.sql._sql.SQLStore`, and where its
trials ran (per host).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Sequence
from typing import Any, cast

from tunescope.errors import Conflict, NotFound, Rejected, StoreError
from tunescope.store._model import RunInfo, TrialInfo
from tunescope.store.produce._batch import new_key
from tunescope.store.sql._heal import retrying
from tunescope.store.sql._pages import json_or as _loads
from tunescope.store.sql._rows import RUN_COLS as _RUN_COLS
from tunescope.store.sql._rows import RUNS as _RUNS
from tunescope.store.sql._rows import TRIAL_COLS as _TRIAL_COLS
from tunescope.store.sql._rows import sql_int as _sql_int

__all__ = ["TrialsMixin"]


class TrialsMixin:
    """Projects, runs, trials and their hosts for :class:`~tunescope.store.sql._sql.SQLStore`."""

    # provided by SQLStore
    url: str
    project: str
    dialect: Any
    _tx: Any
    _q: Any
    _touch: Any
    derive_state: Any

    # ------------------------------------------------------------------ projects and runs
    def _project_id(self, cur: Any, project: str | None, create: bool) -> int:
        name = self.project if project is None else project
        if not name or not name.strip():
            raise StoreError("a project needs a non-empty name")
        row = self._q(cur, "SELECT id FROM projects WHERE name = ?", (name,)).fetchone()
        if row is None and create:
            self._q(
                cur,
                "INSERT INTO projects (name, t_created) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (name, time.time()),
            )
            row = self._q(cur, "SELECT id FROM projects WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no project {name!r} in {self.url}")
        return int(row[0])

    def _run_from(self, cur: Any, row: Sequence[Any]) -> RunInfo:
        run_id, name, start, project, os_user, host = row
        trials = self._q(
            cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ?", (run_id,)
        ).fetchall()
        infos = [self._trial_from(r) for r in trials]
        states = {t.state for t in infos}
        if not infos:
            state = "empty"
        elif "running" in states:
            state = "running"
        elif "failed" in states or "lost" in states:
            state = "failed" if "failed" in states else "lost"
        else:
            state = "completed"
        ends = [t.end for t in infos]
        end = None if (not infos or None in ends) else max(e for e in ends if e is not None)
        return RunInfo(
            int(run_id), str(name), float(start), end, state, len(infos), str(project),
            os_user, host,
        )  # fmt: skip

    def _run_row(
        self,
        cur: Any,
        name: str,
        start: float | None,
        project: str | None = None,
        os_user: str | None = None,
        host: str | None = None,
    ) -> Sequence[Any]:
        if not name or not name.strip():
            raise StoreError("a run needs a non-empty name")
        pid = self._project_id(cur, project, create=True)
        where = f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE r.project_id = ? AND r.name = ?"
        row = self._q(cur, where, (pid, name)).fetchone()
        if row is None:
            self._q(
                cur,
                "INSERT INTO runs (project_id, name, t_start, os_user, host) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (project_id, name) DO NOTHING",
                (pid, name, time.time() if start is None else start, os_user, host),
            )
            row = self._q(cur, where, (pid, name)).fetchone()
        return cast(Sequence[Any], row)

    @retrying
    def ensure_run(
        self,
        name: str,
        start: float | None = None,
        *,
        project: str | None = None,
        os_user: str | None = None,
        host: str | None = None,
    ) -> RunInfo:
        with self._tx(write=True) as cur:
            return self._run_from(cur, self._run_row(cur, name, start, project, os_user, host))

    @retrying
    def get_run(self, run: int | str, *, project: str | None = None) -> RunInfo:
        with self._tx() as cur:
            if isinstance(run, int):
                row = self._q(
                    cur, f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE r.id = ?", (_sql_int(run),)
                ).fetchone()
            else:
                name = self.project if project is None else project
                row = self._q(
                    cur,
                    f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE p.name = ? AND r.name = ?",
                    (name, run),
                ).fetchone()
            if row is None:
                raise NotFound(f"no run {run!r} in {self.url}")
            return self._run_from(cur, row)

    @retrying
    def list_runs(self, *, project: str | None = None) -> list[RunInfo]:
        name = self.project if project is None else project
        with self._tx() as cur:
            rows = self._q(
                cur,
                f"SELECT {_RUN_COLS} FROM {_RUNS} WHERE p.name = ? "
                "ORDER BY r.t_start DESC, r.id DESC",
                (name,),
            ).fetchall()
            return [self._run_from(cur, r) for r in rows]

    @retrying
    def list_projects(self) -> list[str]:
        with self._tx() as cur:
            rows = self._q(cur, "SELECT name FROM projects ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]

    @retrying
    def owner(self, *, trial: int | None = None, series: int | None = None) -> str:
        """The project a trial or a series belongs to (NotFound for an unknown id)."""
        if (trial is None) == (series is None):
            raise ValueError("give a trial or a series")
        with self._tx() as cur:
            if trial is not None:
                row = self._q(
                    cur,
                    "SELECT p.name FROM trials t JOIN runs r ON t.run_id = r.id "
                    "JOIN projects p ON r.project_id = p.id WHERE t.id = ?",
                    (_sql_int(trial),),
                ).fetchone()
            else:
                row = self._q(
                    cur,
                    "SELECT p.name FROM series s JOIN trials t ON s.trial_id = t.id "
                    "JOIN runs r ON t.run_id = r.id JOIN projects p ON r.project_id = p.id "
                    "WHERE s.id = ?",
                    (_sql_int(series or 0),),
                ).fetchone()
        if row is None:
            what = "trial" if trial is not None else "series"
            raise NotFound(f"no {what} with id {trial if trial is not None else series}")
        return str(row[0])

    # ------------------------------------------------------------------ trials
    def _trial_from(self, row: Sequence[Any]) -> TrialInfo:
        (tid, run_id, name, params, state, host, pids, start, end, hb, error, interval, key) = row[
            :13
        ]
        seen, now = row[13], row[14]
        p = _loads(params, None)
        ids = _loads(pids, [])
        return TrialInfo(
            int(tid),
            int(run_id),
            str(name),
            p if isinstance(p, dict) else {"(unreadable)": str(params)[:200]},
            self.derive_state(
                str(state),
                None if seen is None else float(seen),
                float(start),
                float(interval),
                float(now),
            ),
            str(host),
            tuple(x for x in ids if isinstance(x, int)) if isinstance(ids, list) else (),
            float(start),
            None if end is None else float(end),
            None if hb is None else float(hb),
            error,
            float(interval),
            str(key or ""),
        )

    def _insert_trial(
        self,
        cur: Any,
        run_id: int,
        name: str | None,
        params: dict[str, Any],
        *,
        host: str,
        pids: Sequence[int],
        start: float,
        interval: float,
        key: str,
        rename: bool,
    ) -> Sequence[Any]:
        """Insert a trial; ``name`` None takes ``trial-<k>``; a taken name raises Conflict,
        or with ``rename`` becomes ``name-2``, ``name-3``… The run row is locked first so
        that concurrent creators pick different names."""
        try:
            params_json = json.dumps(params, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"trial params must be JSON values: {exc}") from None
        if (
            self._q(
                cur, f"SELECT id FROM runs WHERE id = ?{self.dialect.for_update}", (run_id,)
            ).fetchone()
            is None
        ):
            raise NotFound(f"no run with id {run_id} in {self.url}")
        existing = {
            r[0] for r in self._q(cur, "SELECT name FROM trials WHERE run_id = ?", (run_id,))
        }
        if name is None:
            k = len(existing)
            while f"trial-{k}" in existing:
                k += 1
            name = f"trial-{k}"
        elif name in existing:
            if not rename:
                raise Conflict(f"run {run_id} already has a trial named {name!r}")
            base = name
            name = next(n for n in (f"{base}-{i}" for i in itertools.count(2)) if n not in existing)
        return cast(
            Sequence[Any],
            self._q(
                cur,
                "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, "
                "heartbeat, interval_s, trial_key) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?) "
                f"RETURNING {_TRIAL_COLS}",
                (
                    run_id,
                    name,
                    params_json,
                    host,
                    json.dumps(list(pids)),
                    start,
                    start,
                    interval,
                    key,
                ),
            ).fetchone(),
        )

    @retrying
    def create_trial(
        self,
        run_id: int,
        name: str | None = None,
        params: dict[str, Any] | None = None,
        *,
        host: str = "",
        pids: Sequence[int] = (),
        start: float | None = None,
        interval: float = 1.0,
    ) -> TrialInfo:
        t0 = time.time() if start is None else start
        with self._tx(write=True) as cur:
            row = self._insert_trial(
                cur,
                _sql_int(run_id),
                name,
                params or {},
                host=host,
                pids=pids,
                start=t0,
                interval=interval,
                key=new_key(),
                rename=False,
            )
            return self._trial_from(row)

    @retrying
    def get_trial(self, trial_id: int) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE id = ?", (_sql_int(trial_id),)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return self._trial_from(row)

    @retrying
    def trial_by_key(self, key: str) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur, f"SELECT {_TRIAL_COLS} FROM trials WHERE trial_key = ?", (key,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with key {key!r} in {self.url}")
        return self._trial_from(row)

    @retrying
    def find_trial(self, run_id: int, name: str) -> TrialInfo:
        with self._tx() as cur:
            row = self._q(
                cur,
                f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ? AND name = ?",
                (_sql_int(run_id), name),
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial {name!r} in run {run_id}")
        return self._trial_from(row)

    @retrying
    def list_trials(self, run_id: int) -> list[TrialInfo]:
        with self._tx() as cur:
            rows = self._q(
                cur,
                f"SELECT {_TRIAL_COLS} FROM trials WHERE run_id = ? ORDER BY id",
                (_sql_int(run_id),),
            ).fetchall()
        return [self._trial_from(r) for r in rows]

    @retrying
    def update_trial(
        self,
        trial_id: int,
        *,
        state: str | None = None,
        end: float | None = None,
        error: str | None = None,
        pids: Sequence[int] | None = None,
        heartbeat: float | None = None,
        only_if_running: bool = False,
        exit_code: int | None = None,
        params: dict[str, Any] | None = None,
    ) -> bool:
        sets: list[str] = []
        args: list[Any] = []
        if params is not None:
            try:
                args.append(json.dumps(params, sort_keys=True, allow_nan=False))
            except (TypeError, ValueError) as exc:
                raise Rejected(f"trial params must be JSON values: {exc}") from None
            sets.append("params = ?")
        for col, val in (
            ("state", state),
            ("t_end", end),
            ("error", error),
            ("heartbeat", heartbeat),
            ("exit_code", exit_code),
        ):
            if val is not None:
                sets.append(f"{col} = ?")
                args.append(val)
        if heartbeat is not None:  # a time named by the caller: lost is judged by it
            sets.append("t_seen = NULL")
        if pids is not None:
            sets.append("pids = ?")
            args.append(json.dumps(sorted(set(pids))))
        if not sets:
            return False
        where = "id = ?" + (" AND state = 'running'" if only_if_running else "")
        with self._tx(write=True) as cur:
            n = self._q(
                cur,
                f"UPDATE trials SET {', '.join(sets)} WHERE {where}",
                (*args, _sql_int(trial_id)),
            ).rowcount
            if n == 0 and not only_if_running:
                raise NotFound(f"no trial with id {trial_id} in {self.url}")
            if n:
                self._touch(cur, [_sql_int(trial_id)])
        return bool(n)

    @retrying
    def exit_code(self, trial_id: int) -> int | None:
        with self._tx() as cur:
            row = self._q(
                cur, "SELECT exit_code FROM trials WHERE id = ?", (_sql_int(trial_id),)
            ).fetchone()
        if row is None:
            raise NotFound(f"no trial with id {trial_id} in {self.url}")
        return None if row[0] is None else int(row[0])

    # ------------------------------------------------------------------ where trials ran
    def _merge_where(self, cur: Any, tid: int, host: str, where: dict[str, Any]) -> None:
        """Merge ``where`` into what the trial's writers on ``host`` said before (its keys
        replace theirs)."""
        row = self._q(
            cur,
            "SELECT info FROM trial_hosts WHERE trial_id = ? AND host = ?"
            + self.dialect.for_update,
            (tid, host),
        ).fetchone()
        old = {} if row is None else _loads(row[0], {})
        merged = {**(old if isinstance(old, dict) else {}), **where}
        try:
            info = json.dumps(merged, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise Rejected(f"where a trial runs must be JSON values: {exc}") from None
        self._q(
            cur,
            "INSERT INTO trial_hosts (trial_id, host, info) VALUES (?, ?, ?) "
            "ON CONFLICT (trial_id, host) DO UPDATE SET info = excluded.info",
            (tid, host, info),
        )

    @retrying
    def hosts(self, trial_id: int) -> dict[str, dict[str, Any]]:
        tid = _sql_int(trial_id)
        with self._tx() as cur:
            row = self._q(cur, "SELECT host FROM trials WHERE id = ?", (tid,)).fetchone()
            if row is None:
                raise NotFound(f"no trial with id {trial_id} in {self.url}")
            out: dict[str, dict[str, Any]] = {str(row[0]): {}} if row[0] else {}
            for (host,) in self._q(
                cur, "SELECT DISTINCT host FROM series WHERE trial_id = ?", (tid,)
            ).fetchall():
                out.setdefault(str(host), {})
            for host, info in self._q(
                cur, "SELECT host, info FROM trial_hosts WHERE trial_id = ?", (tid,)
            ).fetchall():
                got = _loads(info, {})
                out[str(host)] = got if isinstance(got, dict) else {}
        return {h: out[h] for h in sorted(out)}
