"""The package as a user gets it: the sdist and wheel built from this repository (as `make dist`
does), installed with pip into a fresh virtualenv whose PATH has no Node, serving its page to
Chromium; and a build without the page refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tunescope
from browser_helpers import ROOT, ensure_built
from http_helpers import free_port

pytest_plugins = ["browser_fixtures"]
pytestmark = pytest.mark.slow

PAGE = ("index.html", "app.js", "app.css", "uPlot.min.css", "api-docs/index.html")
VERSION = tunescope.__version__


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


def _build(src: Path, out: Path, *what: str) -> subprocess.CompletedProcess[str]:
    """`python -m build` in its own isolated environment (hatchling from the registry)."""
    return _run([sys.executable, "-m", "build", *what, "--outdir", str(out), str(src)])


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) built from the repository; the wheel is made from the sdist."""
    ensure_built()
    out = tmp_path_factory.mktemp("dist")
    p = _build(ROOT, out)
    assert p.returncode == 0, p.stdout + p.stderr
    sdist, wheel = (
        out / f"tunescope-{VERSION}.tar.gz",
        out / f"tunescope-{VERSION}-py3-none-any.whl",
    )
    assert sorted(out.iterdir()) == sorted([sdist, wheel])
    return sdist, wheel


def test_sdist_and_wheel_carry_the_page(dist: tuple[Path, Path]) -> None:
    sdist, wheel = dist
    with tarfile.open(sdist) as tar:
        in_sdist = set(tar.getnames())
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = set(whl.namelist())
        metadata = whl.read(f"tunescope-{VERSION}.dist-info/METADATA").decode()
    for name in PAGE:
        assert f"tunescope-{VERSION}/src/tunescope/server/static/{name}" in in_sdist
        assert f"tunescope/server/static/{name}" in in_wheel
    assert f"tunescope-{VERSION}/hatch_build.py" in in_sdist  # the wheel built from it checks too
    assert f"\nVersion: {VERSION}\n" in metadata


@pytest.fixture
def installed(dist: tuple[Path, Path], tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """(the bin folder of a fresh venv holding the wheel with its server extra, an environment
    whose PATH is that folder only: no node, no npm, nothing of the repository)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_ = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=str(bin_), PYTHONWARNINGS="ignore")
    assert shutil.which("node", path=env["PATH"]) is None
    assert shutil.which("npm", path=env["PATH"]) is None
    p = _run([str(bin_ / "pip"), "install", f"{dist[1]}[server]"], env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    where = _run(
        [str(bin_ / "python"), "-c", "import tunescope.server; print(tunescope.server.__file__)"],
        env=env,
        cwd=tmp_path,
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr
    return bin_, env


@pytest.fixture
def served(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> Iterator[str]:
    """The venv's `tunescope ui` on a recorded run, recorded by the venv's `tunescope run`."""
    bin_, env = installed
    db = tmp_path / "store.db"
    rec = _run(
        [str(bin_ / "tunescope"), "run", "--run", "wheel-run", "--store", str(db), "--",
         str(bin_ / "python"), "-c", "pass"],
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stdout + rec.stderr
    port = free_port()
    log_path = tmp_path / "ui.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(bin_ / "tunescope"), "ui", "--store", str(db), "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                httpx.get(f"{base}/api/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.browser
def test_the_installed_wheel_serves_its_page(
    installed: tuple[Path, dict[str, str]], served: str, browser: Any
) -> None:
    bin_, env = installed
    version = _run([str(bin_ / "tunescope"), "--version"], env=env)
    assert (version.returncode, version.stdout) == (0, f"tunescope {VERSION}\n")
    problems: list[str] = []
    context = browser.new_context(base_url=served)
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on(
            "console",
            lambda msg: problems.append(msg.text) if msg.type == "error" else None,
        )
        page.goto("/")
        page.get_by_role("link", name="wheel-run", exact=True).wait_for()
        row = page.get_by_role("table").locator("tbody tr").first.locator("td")
        name, _started, state, trials = row.all_inner_texts()[:4]
        assert (name, state, trials) == ("wheel-run", "completed", "1")
        docs = httpx.get(f"{served}/api/docs", timeout=10)
        assert docs.status_code == 200 and "swagger-ui" in docs.text
    finally:
        context.close()
    assert not problems, problems


def test_no_sdist_or_wheel_without_the_page(tmp_path: Path) -> None:
    """A clean clone before `make web`: the build stops, saying what to run, and writes
    nothing."""
    src = tmp_path / "clone"
    src.mkdir()
    for name in ("pyproject.toml", "hatch_build.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "src",
        src / "src",
        ignore=lambda folder, names: [n for n in names if n in ("static", "__pycache__")],
    )
    assert not (src / "src" / "tunescope" / "server" / "static").exists()
    out = tmp_path / "dist"
    for what in ("--sdist", "--wheel"):
        p = _build(src, out, what)
        assert p.returncode != 0
        assert "the web page is not built" in p.stdout + p.stderr
        assert "run `make web`" in p.stdout + p.stderr
        assert not out.exists() or not any(out.iterdir())
