"""A private PostgreSQL cluster for fault tests: started by the test session on a port of its
own, so tests may stop, restart, freeze (SIGSTOP) and reconfigure it. The shared server at
127.0.0.1:5432 is never touched.

``initdb`` refuses to run as root, so the cluster belongs to the ``postgres`` user: its
directory is made with that owner and every server command runs through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from http_helpers import free_port

__all__ = ["PrivateCluster", "available", "private_cluster"]


def _bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def available() -> str | None:
    """None when a private cluster can be started here, else why not."""
    if _bin() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user to own a private cluster"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        return "a private cluster needs root (to run as postgres) or the postgres user"
    return None


class PrivateCluster:
    """One PostgreSQL server in a temporary directory. :attr:`url` connects as postgres."""

    def __init__(self) -> None:
        bindir = _bin()
        assert bindir is not None
        self.bindir = bindir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tunescope-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        pw = pwd.getpwnam("postgres")
        os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.root.chmod(0o700)
        self._as_postgres(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        with (self.data / "postgresql.conf").open("a") as f:
            f.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n"
                "shared_buffers = 32MB\n"
            )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def _as_postgres(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = args if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
        # the server outlives the test that (re)started it: not the test's environment
        env = {k: v for k, v in os.environ.items() if not k.startswith("TUNESCOPE_")}
        return subprocess.run(
            cmd, check=check, capture_output=True, text=True, timeout=120, env=env
        )

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        self._as_postgres(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def stop(self, mode: str = "fast") -> None:
        self.cont()  # a frozen server cannot stop
        self._as_postgres(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                mode,
                "-w",
                "-t",
                "60",
                "stop",
            ],
            check=False,
        )

    def running(self) -> bool:
        return self._postmaster() is not None

    def restart_after(self, seconds: float) -> None:
        """Stop now, start again ``seconds`` later (blocking)."""
        self.stop()
        time.sleep(seconds)
        self.start()

    def _postmaster(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    def _processes(self) -> list[int]:
        pm = self._postmaster()
        if pm is None:
            return []
        out = subprocess.run(["pgrep", "-P", str(pm)], capture_output=True, text=True)
        return [pm, *(int(x) for x in out.stdout.split())]

    def freeze(self) -> None:
        """SIGSTOP the server and every backend: connections stay open, nothing answers."""
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def cont(self) -> None:
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def sql(self, statement: str) -> None:
        """Run one statement as postgres, in autocommit (ALTER SYSTEM needs it)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(statement)  # type: ignore[arg-type]

    def configure(self, **settings: str) -> None:
        """ALTER SYSTEM SET each setting, then reload (e.g. idle_session_timeout='1s')."""
        for k, v in settings.items():
            self.sql(f"ALTER SYSTEM SET {k} = '{v}'")
        self.sql("SELECT pg_reload_conf()")

    def reset(self) -> None:
        """Running, unfrozen, default settings (between tests)."""
        self.cont()
        if not self.running():
            self.start()
        self.sql("ALTER SYSTEM RESET ALL")
        self.sql("SELECT pg_reload_conf()")

    def terminate_clients(self) -> int:
        """pg_terminate_backend every client connection but our own; how many."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        return len(rows)

    def password_user(self, user: str, password: str, database: str) -> None:
        """A role that must log in with ``password`` (scram) from 127.0.0.1, owning the public
        schema of ``database``."""
        self.sql(f"CREATE ROLE {user} LOGIN PASSWORD '{password}'")
        self.sql(f"GRANT ALL ON DATABASE {database} TO {user}")
        import psycopg

        url = f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"ALTER SCHEMA public OWNER TO {user}")  # type: ignore[arg-type]
        hba = self.data / "pg_hba.conf"
        rule = f"host all {user} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rule + hba.read_text())
        self.sql("SELECT pg_reload_conf()")

    def fresh_database(self, name: str) -> str:
        self.sql(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def destroy(self) -> None:
        self.cont()
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """A started private cluster, destroyed after (a fixture's body); the test is skipped,
    with the reason, where none can be started here."""
    why = available()
    if why is not None:
        pytest.skip(why)
    c = PrivateCluster()
    try:
        yield c
    finally:
        c.destroy()
