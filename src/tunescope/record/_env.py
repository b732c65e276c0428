"""The environment variables through which child processes join a trial.

Inside an owner trial these are set in ``os.environ`` (and restored on exit), so every process
started in the block inherits them; ``tunescope run -- CMD`` sets the same for CMD:

* ``TUNESCOPE_STORE``: the store URL (its password too: the environment is readable by the
  same user only, unlike a command line);
* ``TUNESCOPE_RUN``: the run's name; ``TUNESCOPE_TRIAL_KEY``: the trial's key, by which a
  child joins it, even before the store has been reached;
* ``TUNESCOPE_INTERVAL``: the owner's sampling interval;
* ``TUNESCOPE_RUN_ID``, ``TUNESCOPE_TRIAL_ID``: the store's ids, when known at the start
  (informational).

A process that finds a trial key set, and did not set it itself, joins that trial.
``os.environ`` is process-wide: with trials open in several threads at once it names the
latest one entered.
"""

from __future__ import annotations

import os
import sys
import threading

from tunescope._env import (
    ENV_INTERVAL,
    ENV_RUN,
    ENV_RUN_ID,
    ENV_STORE,
    ENV_TRIAL_ID,
    ENV_TRIAL_KEY,
)

__all__ = [
    "attach_key",
    "process_rank",
    "restore_env",
    "set_env",
    "trial_env",
]

_NAMES = (ENV_STORE, ENV_RUN, ENV_TRIAL_KEY, ENV_RUN_ID, ENV_TRIAL_ID, ENV_INTERVAL)

_lock = threading.Lock()
_own: list[str] = []
"""Trial keys this process put into the environment itself (those are not joined)."""


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _own.clear()  # a forked child joins the trial like any other child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def attach_key() -> tuple[str, str] | None:
    """(run name, trial key) to join when this process was started inside a trial."""
    key = os.environ.get(ENV_TRIAL_KEY, "")
    if not key or key in _own:
        return None
    return os.environ.get(ENV_RUN, "") or "run", key


def trial_env(
    url: str,
    run: str,
    key: str,
    interval: float,
    run_id: int | None = None,
    trial_id: int | None = None,
) -> dict[str, str]:
    """The variables that name a trial (see the module doc)."""
    env = {
        ENV_STORE: url,
        ENV_RUN: run,
        ENV_TRIAL_KEY: key,
        ENV_INTERVAL: repr(float(interval)),
    }
    if run_id is not None:
        env[ENV_RUN_ID] = str(run_id)
    if trial_id is not None:
        env[ENV_TRIAL_ID] = str(trial_id)
    return env


def set_env(values: dict[str, str]) -> dict[str, str | None]:
    """Name the trial in ``os.environ`` (``values`` from :func:`trial_env`); returns what to
    give :func:`restore_env`. Variables of an outer trial that ``values`` lacks are removed."""
    with _lock:
        saved = {k: os.environ.get(k) for k in _NAMES}
        _own.append(values[ENV_TRIAL_KEY])
        for k in _NAMES:
            if k in values:
                os.environ[k] = values[k]
            else:
                os.environ.pop(k, None)
    return saved


def restore_env(saved: dict[str, str | None], key: str) -> None:
    """Put back the variables :func:`set_env` replaced."""
    with _lock:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if key in _own:
            _own.remove(key)


def process_rank() -> int | None:
    """This process's global rank in a ``torch.distributed`` job: torch's own when the process
    group is initialised (looked up, never imported), else ``$RANK`` (torchrun sets it), else
    from ``$LOCAL_RANK`` and ``$NODE_RANK`` (Lightning's DDP launcher sets only those: exact on
    the first node, a positive number on the others); None outside such a job."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    env = os.environ
    try:
        if "RANK" in env:
            return int(env["RANK"])
        if "LOCAL_RANK" in env:
            local, node = int(env["LOCAL_RANK"]), int(env.get("NODE_RANK") or 0)
            return local if node == 0 else node * int(env.get("LOCAL_WORLD_SIZE") or 1) + local
    except ValueError:
        pass
    return None
