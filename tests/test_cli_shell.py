"""`tunescope --version` and shell completion, run the way a shell runs them: the real command
in a subprocess, the completion script sourced by a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tunescope
from cli_helpers import cli


def test_version_prints_the_package_version() -> None:
    p = cli("--version")
    assert (p.returncode, p.stdout, p.stderr) == (0, f"tunescope {tunescope.__version__}\n", "")
    assert tunescope.__version__.count(".") == 2


def test_the_version_is_written_once() -> None:
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert "\nversion =" not in pyproject


def test_unknown_shell_is_one_line_exit_2() -> None:
    p = cli("completion", "tcsh")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == "tunescope: error: unknown shell 'tcsh': use one of bash, zsh, fish\n"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shells_script(shell: str) -> None:
    p = cli("completion", shell)
    assert p.returncode == 0, p.stderr
    assert "_TUNESCOPE_COMPLETE=complete_" + shell in p.stdout.replace('"', "")


def test_the_bash_script_is_valid_bash(tmp_path: Path) -> None:
    script = tmp_path / "tunescope.bash"
    script.write_text(cli("completion", "bash").stdout)
    p = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def test_a_completion_request_lists_the_matching_commands() -> None:
    env = {"_TUNESCOPE_COMPLETE": "complete_bash", "COMP_WORDS": "tunescope ru", "COMP_CWORD": "1"}
    p = cli(env=env)
    assert (p.returncode, p.stdout.split(), p.stderr) == (0, ["run", "runs"], "")


def _complete_in_bash(tmp_path: Path, words: str) -> list[str]:
    """What bash offers for `words<TAB>`, through the printed script and a `tunescope` on
    PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "tunescope"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m tunescope "$@"\n')
    exe.chmod(0o755)
    script = tmp_path / "tunescope.bash"
    script.write_text(cli("completion", "bash").stdout)
    drive = (
        f"source {script}\nCOMP_WORDS=({words})\nCOMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n"
        '_tunescope_completion tunescope\nprintf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    bash = shutil.which("bash")
    assert bash is not None
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    p = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", drive],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


@pytest.mark.slow
def test_bash_completes_commands_and_options(tmp_path: Path) -> None:
    assert _complete_in_bash(tmp_path, "tunescope ru") == ["run", "runs"]
    assert _complete_in_bash(tmp_path, "tunescope runs --st") == ["--store"]
    assert "completion" in _complete_in_bash(tmp_path, "tunescope ''")
