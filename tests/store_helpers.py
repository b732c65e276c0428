"""Small readers over the store shared by the SDK and integration tests."""

from __future__ import annotations

import time

from tunescope.store import Event, Store


def events_of(store: Store, trial_id: int, kind: str) -> list[Event]:
    """Every event of one kind of a trial, in time order."""
    got = store.events(trial_id, 0.0, time.time() + 60, kinds=[kind], limit=100_000).events
    assert got is not None
    return got
