"""`tunescope serve` for real: a subprocess on a loopback port, with a self-signed
certificate made by the openssl command, answering https and asking every request but
health for a token (its bad input is in test_cli_bad_input.py)."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from http_helpers import free_port
from tunescope.store import open_store
from tunescope.store.sql._sql import SQLStore

pytestmark = pytest.mark.slow


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1 and its key, made by openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is missing: apt-get install openssl", pytrace=False)
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext, str]]:
    """(base URL, a context trusting the certificate, a read token of project "vision")."""
    db = str(tmp_path / "team.db")
    with open_store(db) as st:
        assert isinstance(st, SQLStore)
        st.ensure_run("vision-run", project="vision")
        st.ensure_run("nlp-run", project="nlp")
        token = st.create_token("vision", "read")[1]
    cert, key = self_signed(tmp_path)
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunescope", "serve", "--store", db, "--port", str(port),
         "--tls-cert", str(cert), "--tls-key", str(key)],
        stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )  # fmt: skip
    trust = ssl.create_default_context(cafile=str(cert))
    base = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                httpx.get(f"{base}/api/health", verify=trust, timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.2)
        yield base, trust, token
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_serve_answers_https_and_needs_a_token(
    served: tuple[str, ssl.SSLContext, str],
) -> None:
    base, trust, token = served
    with httpx.Client(base_url=base, verify=trust, timeout=10) as c:
        health = c.get("/api/health")
        assert health.status_code == 200 and health.json() == {"ok": True}
        assert c.get("/api/runs").status_code == 401
        runs = c.get("/api/runs", headers={"Authorization": f"Bearer {token}"})
        assert [r["name"] for r in runs.json()] == ["vision-run"]
        login = c.post("/api/session", json={"token": token})
        assert login.status_code == 200
        assert all("; secure" in v.lower() for v in login.headers.get_list("set-cookie"))
    with pytest.raises(httpx.TransportError):  # the certificate is checked: no trust, no answer
        httpx.get(f"{base}/api/health", timeout=5)
    with pytest.raises(httpx.TransportError):  # plain http to an https port
        httpx.get(base.replace("https:", "http:") + "/api/health", timeout=5)
