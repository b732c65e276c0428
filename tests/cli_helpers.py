"""Running the ``tunescope`` command in a subprocess, and checking its one-line errors.

The one way the tests run the CLI as a user would (``python -m tunescope ...``) and check the
rule that bad input is one ``tunescope: error: ...`` line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def cli(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    drop: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``[sys.executable, "-m", "tunescope", *args]`` in ``cwd`` and wait up to ``timeout``
    seconds; stdout and stderr are captured as text.

    Its environment is ``os.environ`` minus the variables whose names start with any prefix in
    ``drop``, with ``env``'s variables laid over it (so ``env`` may set a name ``drop`` removed
    from ``os.environ``)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(tuple(drop))}
    return subprocess.run(
        [sys.executable, "-m", "tunescope", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**base, **(env or {})},
        timeout=timeout,
    )


def one_line_error(p: subprocess.CompletedProcess[str], needle: str) -> str:
    """Assert ``p`` is the CLI's bad-input answer: exit 2, nothing on stdout, and stderr exactly
    one line that starts with ``tunescope: error: `` and contains ``needle``. Returns the line."""
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tunescope: error: "), p.stderr[-2000:]
    assert needle in lines[0], lines[0][:2000]
    assert p.stdout == "", p.stdout[-2000:]
    return lines[0]
