"""A real tunescope server on a loopback port, for HTTP stores: uvicorn in a process of its
own (so that it can be killed with SIGKILL and started again on the same port)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from tunescope.store import open_store
from tunescope.store.sql._sql import SQLStore

T = TypeVar("T")

_SERVE = textwrap.dedent(
    """
    import os, sys
    import uvicorn
    from tunescope.server import create_app

    app = create_app(os.environ["TUNESCOPE_TEST_SERVE"], auth="tokens")
    cert, _, key = os.environ.get("TUNESCOPE_TEST_TLS", "").partition(os.pathsep)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                ssl_certfile=cert or None, ssl_keyfile=key or None)
    """
)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, in a thread of its own when a loop already runs in this one: a
    session's Playwright browser (its sync API) keeps one running in the main thread, so
    asyncio.run there fails in every test after the first browser test."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # the usual case: no loop in this thread
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_token(db_url: str, project: str, scope: str = "write") -> str:
    """A new token of ``project`` in the database at ``db_url`` (its secret)."""
    with open_store(db_url) as st:
        assert isinstance(st, SQLStore)
        return st.create_token(project, scope)[1]


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A private CA and a certificate it signed for 127.0.0.1 and localhost, made with the
    openssl command: (the CA's certificate, the server's certificate, its key)."""
    ca_key, ca, key, csr, cert = (
        folder / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem")
    )
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
            "-days", "2", "-subj", "/CN=tunescope test CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-out", cert, "-days", "2", "-extfile", ext)  # fmt: skip
    return ca, cert, key


class Server:
    """``create_app(db_url, auth="tokens")`` served by uvicorn on 127.0.0.1:``port``; its
    output goes to ``log``. The database URL reaches it through the environment only.
    ``tls``: (certificate, key) to serve https."""

    def __init__(
        self,
        db_url: str,
        log: Path,
        port: int | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.db_url = db_url
        self.log = log
        self.port = port or free_port()
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, project: str) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/{project}"

    def start(self, timeout: float = 60.0) -> Server:
        open_store(self.db_url).close()  # the server opens an existing store only
        env = {**os.environ, "TUNESCOPE_TEST_SERVE": self.db_url}
        env.pop("TUNESCOPE_TOKEN", None)
        if self.tls:
            env["TUNESCOPE_TEST_TLS"] = os.pathsep.join(map(str, self.tls))
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _SERVE, str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        end = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.kill()
                raise RuntimeError(f"the server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        conn = (
            http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=2, context=ssl._create_unverified_context()
            )
            if self.tls
            else http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        )
        try:
            conn.request("GET", "/api/health")
            return conn.getresponse().status == 200  # up (health needs no token)
        except OSError:
            return False
        finally:
            conn.close()

    def kill(self) -> None:
        """SIGKILL: the server ends at once, holding whatever it held."""
        p, self.proc = self.proc, None
        if p is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=30)

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is not None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)
