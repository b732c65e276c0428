"""web/openapi.json is the OpenAPI document the server serves, so the page's types, which the
build generates from it (web/types.mjs, openapi-typescript), are the API's: the page fails to
type-check when it reads a shape the server does not send. Regenerate with ``make openapi``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from api_helpers import app_over, request
from tunescope import __version__
from tunescope.server._openapi import document, main, render

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "web" / "openapi.json"
API_TS = ROOT / "web" / "src" / "api.ts"


@pytest.fixture
def app(store_file: str) -> Iterator[FastAPI]:
    with app_over(store_file) as application:
        yield application


def test_the_committed_document_is_the_apps() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == render(), (
        "web/openapi.json is stale: run `make openapi` and commit it"
    )


def test_the_document_is_what_the_server_serves(app: FastAPI) -> None:
    r = request(app, "/api/openapi.json")
    assert r.status_code == 200
    served = r.json()
    assert served == document()
    assert served["info"]["version"] == __version__
    written = json.loads(render())
    assert "version" not in written["info"]  # a release does not stale the committed file
    assert written["paths"] == served["paths"]
    assert written["components"] == served["components"]
    assert "TrialOut" in written["components"]["schemas"]
    assert "/api/trials/{trial}/series" in written["paths"]


def test_main_writes_the_file_or_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "openapi.json"
    out.write_text("stale")
    assert main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert [p.name for p in tmp_path.iterdir()] == ["openapi.json"]  # no temporary file left
    assert main([]) == 0
    assert capsys.readouterr().out == render()
    assert main(["a", "b"]) == 2
    assert "usage: python -m tunescope.server._openapi [PATH]" in capsys.readouterr().err


def test_the_module_runs_as_a_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tunescope.server._openapi"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout == COMMITTED.read_text(encoding="utf-8")


def test_api_ts_declares_no_shape_of_its_own() -> None:
    """Every JSON shape of api.ts is an alias of a generated schema, never an interface."""
    text = API_TS.read_text(encoding="utf-8")
    assert re.search(r"^\s*(export\s+)?interface\s", text, re.M) is None
    aliases = re.findall(r'^export type \w+ = Schemas\["(\w+)"\]', text, re.M)
    schemas = json.loads(COMMITTED.read_text(encoding="utf-8"))["components"]["schemas"]
    assert len(aliases) >= 15
    assert set(aliases) <= set(schemas)
