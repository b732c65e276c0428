"""`tunescope sync`: write what the spool holds for a store, by hand.

Samplers replay the spool by themselves once the store is back; this is for what is left when
none ran after the outage (a training that ended while the store was away, with no trial
after it), and for a look at what waits.
"""

from __future__ import annotations

import time

from tunescope._env import ENV_TOKEN
from tunescope.store import (
    display,
    open_store,
    pending,
    refused,
    replay,
    resolve_url,
    spool_dir,
)

__all__ = ["spool_note", "sync"]


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"


def spool_note(url: str | None) -> str | None:
    """One line saying what waits in the spool for the store at ``url`` (and that the store
    refused the writers' token, when a writer noted so), or None."""
    target = resolve_url(url)
    files, size = pending(target)
    why = refused(spool_dir(target))
    if not files and why is None:
        return None
    waits = f"{files} spool file(s) ({_size(size)}) wait to be written to {display(target)}"
    if why is not None:
        return (
            f"tunescope: {waits}: the store refused the token ({why}); "
            f"set ${ENV_TOKEN} to a valid token, then run `tunescope sync`"
        )
    return f"tunescope: {waits}: run `tunescope sync`"


def sync(url: str | None, timeout: float) -> tuple[int, list[str]]:
    """Replay the spool of the store at ``url`` for up to ``timeout`` s; (exit code, lines to
    print). The code is 0 when everything was written, 1 when batches still wait (the store
    is unreachable or refuses the token, their trial is not there yet, or another process
    still owns a file) or when frames could not be read (damaged: the rest was written, their
    bytes are kept in ``rejected/``)."""
    target = resolve_url(url)
    folder = spool_dir(target)
    files, size = pending(target)
    if not files:
        return 0, [f"nothing to write: the spool of {display(target)} is empty"]
    with open_store(target) as st:
        stats = replay(target, st.write, deadline=time.monotonic() + timeout)
    lines = [
        f"wrote {stats.written} batch(es) from {stats.files_done} spool file(s) "
        f"({_size(size)}) to {display(target)}"
    ]
    code = 0
    if stats.rejected:
        lines.append(
            f"{stats.rejected} batch(es) were refused by the store; they are kept in "
            f"{folder / 'rejected'}"
        )
    if stats.damaged:
        lines.append(
            f"{stats.damaged} damaged frame(s) could not be read; their bytes are kept in "
            f"{folder / 'rejected'}"
        )
        code = 1
    if stats.files_left:
        if stats.refused is not None:
            why = f": the store refused the token ({stats.refused})"
        elif stats.errors:
            why = f": {stats.errors[-1]}"
        else:
            why = " (still owned by running processes)"
        lines.append(f"{stats.files_left} spool file(s) ({stats.kept} batch(es)) are left{why}")
        code = 1
    return code, lines
