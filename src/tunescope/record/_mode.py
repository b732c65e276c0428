"""Whether the SDK records, and whether it says so: ``$TUNESCOPE_MODE`` and ``$TUNESCOPE_QUIET``.

* ``TUNESCOPE_MODE=disabled`` turns every hook into a no-op: :func:`tunescope.record.run`
  returns a run that records nothing without opening the store, its trials start no writer,
  flusher, sampler nor thread and write no file, ``watch()`` gives the iterable back, and the
  integrations (Trainer, Lightning, Optuna, torch.distributed) record nothing through them.
  ``tunescope run -- CMD`` just runs CMD (replacing itself with it, so the exit code is CMD's).
  ``enabled`` (or unset, or empty) records. Any other value is a mistake: the SDK logs one
  warning and records (it never raises into training); ``tunescope run`` refuses it (exit 2).
* ``TUNESCOPE_QUIET=1`` (also ``true``, ``yes``, ``on``) silences the line a run prints on
  stderr when it starts recording (where it records and how to look at it).

Both are read at each call, so a test or a launcher may set them at any time.
"""

from __future__ import annotations

import os

from tunescope._env import ENV_MODE, ENV_QUIET
from tunescope.errors import ConfigError
from tunescope.record._safety import once

__all__ = ["MODES", "check_mode", "disabled", "quiet"]

MODES = ("enabled", "disabled")
"""The values of ``$TUNESCOPE_MODE`` (unset or empty: ``enabled``)."""

_TRUE = ("1", "true", "yes", "on")


def _mode() -> str:
    return os.environ.get(ENV_MODE, "").strip().lower() or "enabled"


def check_mode() -> str:
    """The mode ``$TUNESCOPE_MODE`` names; ConfigError, on one line, for an unknown one (for
    the CLI, which refuses before starting anything)."""
    mode = _mode()
    if mode not in MODES:
        raise ConfigError(
            f"${ENV_MODE}={os.environ.get(ENV_MODE, '')!r} is not a mode: use {' or '.join(MODES)}"
        )
    return mode


def disabled() -> bool:
    """True when ``$TUNESCOPE_MODE`` is ``disabled``. An unknown value logs one warning and
    counts as enabled (recording what was asked beats silently recording nothing)."""
    mode = _mode()
    if mode == "disabled":
        return True
    if mode != "enabled":
        once.warn(
            f"mode:{mode}",
            "tunescope: $%s=%r is not a mode (use %s); recording as if enabled",
            ENV_MODE,
            os.environ.get(ENV_MODE, ""),
            " or ".join(MODES),
        )
    return False


def quiet() -> bool:
    """True when ``$TUNESCOPE_QUIET`` asks the SDK to print nothing when a run starts."""
    return os.environ.get(ENV_QUIET, "").strip().lower() in _TRUE
