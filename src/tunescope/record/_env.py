"""The environment variables through which child processes join a trial.

Inside an owner trial ``TUNESCOPE_STORE``, ``TUNESCOPE_RUN_ID``, ``TUNESCOPE_TRIAL_ID`` and
``TUNESCOPE_INTERVAL`` are set in ``os.environ`` (and restored on exit), so every process
started in the block inherits them; ``tunescope run -- CMD`` sets the same. A process that
finds them set, and did not set them itself, joins that trial. ``os.environ`` is
process-wide: with trials open in several threads at once it names the latest one entered.
"""

from __future__ import annotations

import os
import sys
import threading

from tunescope.record._safety import once

__all__ = [
    "ENV_INTERVAL",
    "ENV_RUN_ID",
    "ENV_STORE",
    "ENV_TRIAL_ID",
    "attach_ids",
    "process_rank",
    "restore_env",
    "set_env",
]

ENV_STORE = "TUNESCOPE_STORE"
ENV_RUN_ID = "TUNESCOPE_RUN_ID"
ENV_TRIAL_ID = "TUNESCOPE_TRIAL_ID"
ENV_INTERVAL = "TUNESCOPE_INTERVAL"
"""Optional: the owner's sampling interval in seconds (``tunescope run`` sets it)."""

_lock = threading.Lock()
_own: list[str] = []
"""Trial ids this process put into the environment itself (those are not joined)."""


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    _own.clear()  # a forked child joins the trial like any other child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def attach_ids() -> tuple[int, int] | None:
    """(run id, trial id) to join when this process was started inside a trial, else None."""
    tid = os.environ.get(ENV_TRIAL_ID, "")
    if not tid or tid in _own:
        return None
    try:
        return int(os.environ.get(ENV_RUN_ID, "")), int(tid)
    except ValueError:
        once.warn(
            "env",
            "tunescope: ignoring %s=%r / %s=%r: not trial ids",
            ENV_RUN_ID,
            os.environ.get(ENV_RUN_ID),
            ENV_TRIAL_ID,
            tid,
        )
        return None


def set_env(url: str, run_id: int, trial_id: int, interval: float) -> dict[str, str | None]:
    """Name the trial in ``os.environ``; returns what to give :func:`restore_env`."""
    with _lock:
        saved = {k: os.environ.get(k) for k in (ENV_STORE, ENV_RUN_ID, ENV_TRIAL_ID, ENV_INTERVAL)}
        _own.append(str(trial_id))
        os.environ[ENV_STORE] = url
        os.environ[ENV_RUN_ID] = str(run_id)
        os.environ[ENV_TRIAL_ID] = str(trial_id)
        os.environ[ENV_INTERVAL] = repr(float(interval))
    return saved


def restore_env(saved: dict[str, str | None], trial_id: int) -> None:
    """Put back the variables :func:`set_env` replaced."""
    with _lock:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if str(trial_id) in _own:
            _own.remove(str(trial_id))


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
