"""The store-side fault classes of the matrix (tests/fault_matrix.py): the store read-only, its
disk full, the spool unwritable or full while the store is away, a spool file damaged, the
SQLite store file deleted or replaced, the team server restarted on another database. Each is
one :class:`fault_matrix.Fault`; the mounts, the tablespace and the private cluster's settings
are undone after each cell.

How the count reads a class whose data ends up in two places:

- *store file deleted / replaced* (rule 8: noticed, spooled, said; never a new empty store):
  the file is put back at heal; once the training and its samplers are gone (they linger 2 s
  here), ``tunescope sync`` into the store put back lands what the spool holds. "Kept" is what
  the store holds after that sync; the class's own targets: no store at the path while the
  file was away (deleted), the newcomer left as it was (replaced), the sync exits 0.
- *server on another database*: the trial is re-created there from the spec its batches carry;
  the count is the union of the new database (what arrived after the switch) and the old one
  (what arrived before). Duplicates are counted within each database: a batch the old
  server committed but could not answer for before it was killed is sent again and lands in
  both, once in each (no reader reads both; at-least-once across two databases is all a
  writer that never heard the answer can do).
- *spool damaged*: see :class:`SpoolDamaged`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fault_helpers import Ballast, read_only, samplers_of, tmpfs, wait_for
from fault_matrix import Cell, Fault, StoreUnreachable
from http_helpers import Server
from tunescope.store import open_store

LINGER_S = "2"
"""$TUNESCOPE_LINGER for the classes that leave a spool behind: the samplers give a store
that is not coming back to them 2 s, not 120, before they spool and leave."""


def _spool_root() -> Path:
    root = Path(os.environ["TUNESCOPE_SPOOL"])  # the test's own (tests/conftest.py)
    root.mkdir(parents=True, exist_ok=True)
    return root


def sync(url: str) -> subprocess.CompletedProcess[str]:
    """``tunescope sync --store URL`` (the test's spool)."""
    return subprocess.run(
        [sys.executable, "-m", "tunescope", "sync", "--store", url],
        capture_output=True,
        text=True,
        timeout=120,
    )


def sync_once_gone(cell: Cell) -> threading.Thread:
    """In a thread: once the training and its samplers have left, ``tunescope sync`` into
    ``cell.url`` (its result in ``cell.stash["sync"]``)."""

    def run() -> None:
        assert cell.proc is not None
        wait_for(lambda: cell.proc is not None and cell.proc.poll() is not None, 120)
        wait_for(lambda: not samplers_of(cell.key), 120)
        cell.stash["sync"] = sync(cell.url)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def _sync_misses(cell: Cell) -> list[str]:
    th = cell.stash.get("syncer")
    if th is not None:
        th.join(120)
    done = cell.stash.get("sync")
    if done is None:
        return ["tunescope sync did not run"]
    if done.returncode != 0:
        return [f"tunescope sync exited {done.returncode}: {done.stdout}{done.stderr}"[:300]]
    return []


# ---------------------------------------------------------------------- the store
class StoreReadOnly(Fault):
    """The PostgreSQL server turns read-only, as a standby after a failover does, and is
    promoted later: ``default_transaction_read_only`` on (ALTER SYSTEM + reload) on the
    private cluster, off to heal. Writes fail with SQLSTATE 25006 meanwhile (the HTTP store's
    server answers 5xx); every batch waits and lands once."""

    name = "store read-only"
    stores = ("postgresql", "http")

    def apply(self, cell: Cell, phase: str) -> None:
        cell.cluster.configure(default_transaction_read_only="on")

    def heal(self, cell: Cell, phase: str) -> None:
        cell.cluster.configure(default_transaction_read_only="off")


class StoreDiskFull(Fault):
    """The store's disk fills to the last byte, then space is freed: a SQLite store file on a
    24 MiB tmpfs, or the PostgreSQL database's tables in a tablespace on a 16 MiB tmpfs
    (``default_tablespace``), filled by a ballast file (SQLITE_FULL; SQLSTATE 53100)."""

    name = "store disk full"
    stores = ("sqlite", "postgresql")

    @contextlib.contextmanager
    def around(self, cell: Cell) -> Iterator[None]:
        with tmpfs("24m" if cell.store == "sqlite" else "16m") as where:
            cell.stash["ballast"] = Ballast(where)
            if cell.store == "sqlite":
                cell.url = cell.db_url = str(where / "store.db")
                open_store(cell.url).close()
                yield
                return
            folder = where / "ts"
            folder.mkdir()
            os.chown(folder, *_ids("postgres"))
            db = cell.db_url.rsplit("/", 1)[1]
            space = f"s{uuid.uuid4().hex[:8]}"
            cell.cluster.sql(f"CREATE TABLESPACE {space} LOCATION '{folder}'")
            try:
                cell.cluster.sql(f"ALTER DATABASE {db} SET default_tablespace = {space}")
                yield
            finally:
                if cell.server is not None:
                    cell.server.stop()
                with contextlib.suppress(Exception):
                    cell.cluster.sql(f"DROP DATABASE {db} WITH (FORCE)")
                with contextlib.suppress(Exception):
                    cell.cluster.sql(f"DROP TABLESPACE {space}")

    def apply(self, cell: Cell, phase: str) -> None:
        cell.stash["filled"] = cell.stash["ballast"].fill()

    def heal(self, cell: Cell, phase: str) -> None:
        cell.stash["ballast"].free()

    def note(self, cell: Cell) -> str:
        return f"{cell.stash.get('filled', 0) // 1024} KiB ballast"


def _ids(user: str) -> tuple[int, int]:
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


# ---------------------------------------------------------------------- the spool
class SpoolUnwritable(StoreUnreachable):
    """The spool folder ($TUNESCOPE_SPOOL) bind-mounted read-only while the store is away (a
    SQLite lock held by another process): else the spool is never used. The store stays away
    6 s (the heal waits 4 s more than the phase's), past the writers' 5 s before they spool,
    so the spool is tried and fails: the batches stay in memory until the store is back (the
    samplers linger for it, as by default). No ``start`` phase: the store away from before
    the start is the middle phase's outage begun earlier (the spool is tried the same way)."""

    name = "spool unwritable"
    stores = ("sqlite",)
    phases = ("middle", "across-end", "after-end")
    seconds = 8.0
    extra_s = 4.0

    def spool_away(self, cell: Cell) -> contextlib.AbstractContextManager[Any]:
        return read_only(_spool_root())

    def apply(self, cell: Cell, phase: str) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(self.spool_away(cell))
        cell.stash["spool"] = stack
        super().apply(cell, phase)

    def heal(self, cell: Cell, phase: str) -> None:
        time.sleep(self.extra_s)
        super().heal(cell, phase)
        cell.stash.pop("spool").close()


class SpoolFull(SpoolUnwritable):
    """The spool on a 64 KiB tmpfs (mounted on $TUNESCOPE_SPOOL for the cell), filled to the
    last byte while the store is away (6 s, as :class:`SpoolUnwritable`): a short write is not
    "spooled"; the batches stay in memory until the store is back."""

    name = "spool full"

    @contextlib.contextmanager
    def around(self, cell: Cell) -> Iterator[None]:
        root = _spool_root()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", str(root)],
                       check=True)  # fmt: skip
        try:
            yield
        finally:
            subprocess.run(["umount", "-l", str(root)], check=False)

    @contextlib.contextmanager
    def spool_away(self, cell: Cell) -> Iterator[None]:
        ballast = Ballast(_spool_root())
        ballast.fill()
        try:
            yield
        finally:
            ballast.free()


# ---------------------------------------------------------------------- the store file
class StoreFileDeleted(Fault):
    """``rm store.db store.db-wal store.db-shm`` (a hard link keeps the file aside); healed by
    moving it back. The writers notice at their next write (inode check), spool, and say so;
    no new store appears at the path. Kept is counted after ``tunescope sync`` into the store
    put back (see the module doc). No ``start`` phase: a store missing before the trial began
    is a new store, rightly created."""

    name = "store file deleted"
    stores = ("sqlite",)
    phases = ("middle", "across-end", "after-end")

    def around(self, cell: Cell) -> contextlib.AbstractContextManager[None]:
        cell.env["TUNESCOPE_LINGER"] = LINGER_S
        return contextlib.nullcontext()

    def apply(self, cell: Cell, phase: str) -> None:
        db = Path(cell.url)
        os.link(db, cell.folder / "kept.db")
        for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            f.unlink(missing_ok=True)

    def heal(self, cell: Cell, phase: str) -> None:
        if Path(cell.url).exists():
            cell.stash.setdefault("own", []).append("a new store appeared at the path")
        self._put_back(cell)

    def _put_back(self, cell: Cell) -> None:
        os.replace(cell.folder / "kept.db", cell.url)
        cell.stash["syncer"] = sync_once_gone(cell)

    def misses(self, cell: Cell, phase: str) -> list[str]:
        return list(cell.stash.get("own", [])) + _sync_misses(cell)


class StoreFileReplaced(StoreFileDeleted):
    """Another store (one run, "someone-else") moved over the file; healed by moving the
    original back. The writers write into neither; the newcomer is found as it was."""

    name = "store file replaced"
    phases = ("middle", "across-end")  # after the end: as deleted (the writers write nowhere)

    def apply(self, cell: Cell, phase: str) -> None:
        other = cell.folder / "other.db"
        with open_store(str(other)) as st:
            st.ensure_run("someone-else")
        os.link(cell.url, cell.folder / "kept.db")
        os.replace(other, cell.url)

    def heal(self, cell: Cell, phase: str) -> None:
        with open_store(cell.url, readonly=True) as st:
            runs = [r.name for r in st.list_runs()]
        if runs != ["someone-else"]:
            cell.stash.setdefault("own", []).append(f"the newcomer holds runs {runs}")
        with sqlite3.connect(cell.url) as conn:
            ok = conn.execute("PRAGMA integrity_check").fetchone()
        if ok != ("ok",):
            cell.stash.setdefault("own", []).append(f"the newcomer is damaged: {ok}")
        self._put_back(cell)


# ---------------------------------------------------------------------- the server
class ServerOnAnotherDatabase(Fault):
    """The HTTP store's tunescope server killed and started on its port over another database
    (same project and token, no trial): the writers' batches carry the trial's spec, and the
    trial is re-created there. Not healed (the server stays there); the count is the union of
    both databases (see the module doc). Phases middle and across the end: before the trial
    there is nothing to switch from, and after it the switch (a second or two) comes once the
    sampler wrote its last, so that nothing of the trial reaches the new database."""

    name = "server on another database"
    stores = ("http",)
    phases = ("middle", "across-end")

    @contextlib.contextmanager
    def around(self, cell: Cell) -> Iterator[None]:
        try:
            yield
        finally:  # the server started here (open_cell stops the one it started)
            if "server" in cell.stash:
                cell.stash["server"].stop()

    def apply(self, cell: Cell, phase: str) -> None:
        assert cell.server is not None
        other = cell.cluster.fresh_database(f"m{uuid.uuid4().hex[:10]}")
        open_store(other).close()
        _copy_tokens(cell.db_url, other)
        port = cell.server.port
        cell.server.kill()
        cell.server = Server(other, cell.folder / "server-b.log", port=port).start()
        cell.stash["server"] = cell.server
        cell.stash["old"], cell.db_url = cell.db_url, other

    def heal(self, cell: Cell, phase: str) -> None:
        pass

    def also_count(self, cell: Cell) -> list[str]:
        return [cell.stash["old"]]


def _copy_tokens(src: str, dst: str) -> None:
    """The projects and tokens of the database ``src`` into ``dst`` (same digests)."""
    import psycopg

    with psycopg.connect(src) as a:
        rows = a.execute(
            "SELECT p.name, p.t_created, t.name, t.scope, t.digest, t.t_created "
            "FROM tokens t JOIN projects p ON p.id = t.project_id"
        ).fetchall()
    with psycopg.connect(dst, autocommit=True) as b:
        for project, created, name, scope, digest, t_created in rows:
            b.execute(
                "INSERT INTO projects (name, t_created) VALUES (%s, %s) "
                "ON CONFLICT (name) DO NOTHING",
                (project, created),
            )
            b.execute(
                "INSERT INTO tokens (project_id, name, scope, digest, t_created) "
                "SELECT id, %s, %s, %s, %s FROM projects WHERE name = %s",
                (name, scope, digest, t_created, project),
            )


STORE_CLASSES: list[Fault] = [
    StoreReadOnly(),
    StoreDiskFull(),
    SpoolUnwritable(),
    SpoolFull(),
    StoreFileDeleted(),
    StoreFileReplaced(),
    ServerOnAnotherDatabase(),
]
"""The store-side classes, registered in :data:`fault_matrix.CLASSES`."""
