"""`tunescope run -- CMD`: run any command as a trial, with no change to its code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from tunescope.errors import ConfigError
from tunescope.record._launch import start_sampler
from tunescope.store import open_store, resolve_url


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``K=V`` pairs into a dict; V is read as JSON when it parses (numbers, true, null,
    lists), else kept as a string. A malformed item raises ConfigError naming it."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"malformed --param {item!r}: expected KEY=VALUE")
        key = key.strip()
        if key in out:
            raise ConfigError(f"--param {key!r} given twice")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def absolute_store_url(url: str | None) -> str:
    """The store URL with a relative SQLite path made absolute, so children that change
    directory still find it."""
    target = resolve_url(url)
    if "://" in target or target.startswith("sqlite:"):
        return target
    return os.path.abspath(target)


def run_command(
    cmd: Sequence[str],
    *,
    run: str | None,
    trial: str | None,
    params: Sequence[str],
    store: str | None,
    interval: float,
) -> int:
    """Run ``cmd`` as a trial; returns its exit code (128 + N when killed by signal N).

    Everything that can be checked is checked before anything is written: the parameters,
    the command, the interval and the store."""
    if not cmd:
        raise ConfigError("no command given: use tunescope run [OPTIONS] -- CMD [ARGS...]")
    parsed = parse_params(params)
    if not 0.1 <= interval <= 3600:
        raise ConfigError(f"--interval {interval} is out of range: use 0.1 to 3600 seconds")
    exe = shutil.which(cmd[0])
    if exe is None:
        raise ConfigError(f"command not found: {cmd[0]}")
    url = absolute_store_url(store)
    st = open_store(url)
    try:
        run_name = run or f"{os.path.basename(cmd[0])}-{time.strftime('%Y%m%d-%H%M%S')}"
        info = st.ensure_run(run_name)
        tr = st.create_trial(info.id, trial, parsed, host=socket.gethostname(), interval=interval)
        env = dict(
            os.environ,
            TUNESCOPE_STORE=url,
            TUNESCOPE_RUN_ID=str(info.id),
            TUNESCOPE_TRIAL_ID=str(tr.id),
            TUNESCOPE_INTERVAL=str(interval),
        )
        print(f"tunescope: run {run_name!r} trial {tr.name!r} -> {url}", file=sys.stderr)
        try:
            child = subprocess.Popen([exe, *cmd[1:]], env=env)
        except OSError as exc:
            st.update_trial(
                tr.id, state="failed", end=time.time(), error=f"could not start {cmd[0]}: {exc}"
            )
            raise ConfigError(f"could not start {cmd[0]}: {exc}") from None
        st.update_trial(tr.id, pids=[child.pid])
        sampler = start_sampler(url, tr.id, child.pid, interval)
        forwarded: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            forwarded.append(signum)
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            rc = child.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            if sampler is not None:
                sampler.stop()
        code = 128 - rc if rc < 0 else rc
        if rc == 0:
            st.update_trial(tr.id, state="completed", end=time.time(), exit_code=0)
        else:
            why = (
                f"killed by signal {signal.Signals(-rc).name}"
                if rc < 0
                else f"exited with code {rc}"
            )
            st.update_trial(tr.id, state="failed", end=time.time(), error=why, exit_code=code)
        return code
    finally:
        st.close()
