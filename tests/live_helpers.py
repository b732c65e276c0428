"""Running trials in a real store, for the Prometheus and OpenTelemetry tests: two projects,
each with a running trial (GPU and CPU series, heartbeat now) and a finished one."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tunescope.metrics import metric
from tunescope.server._live import base_value
from tunescope.store import Store, open_store
from tunescope.store.sql._sql import SQLStore

PROJECTS = ("vision", "nlp")


@dataclass(frozen=True)
class Expected:
    """A series the exporters must show: labels and the value in the exported base unit."""

    key: str
    project: str
    run: str
    trial: str
    host: str
    gpu: str
    value: float


def fill_live(url: str) -> dict[str, list[Expected]]:
    """Two projects' running and finished trials in the store at ``url``; returns, by
    project, what its running trial's newest samples are, scaled (read back from the store,
    so they are what it holds: float32 values)."""
    now = time.time()
    out: dict[str, list[Expected]] = {}
    with open_store(url) as st:
        for i, project in enumerate(PROJECTS):
            run = st.ensure_run(f"{project}-sweep", start=now - 60, project=project)
            live = st.create_trial(run.id, name="live", host=f"gpu{i}", start=now - 60)
            done = st.create_trial(run.id, name="done", host=f"gpu{i}", start=now - 60)
            rows = []
            for device, key, vals in (
                ("0", "gpu.util", [40.0, 55.0 + i]),
                ("1", "gpu.util", [10.0, 12.5]),
                ("0", "gpu.mem", [2.0 * 2**30, 3.5 * 2**30 + i]),
                ("0", "gpu.power", [250.0, 301.25]),
                (None, "cpu.util", [20.0, 75.0]),
                (None, "cpu.mem", [1e9, 1.5e9 + i]),
                (None, "gpu.clock.sm", [1410.0, 1980.0]),
            ):
                for trial in (live, done):
                    sid = st.series(trial.id, key, device).id
                    rows += [(sid, now - 3 + k, v) for k, v in enumerate(vals)]
            st.append_samples(rows)
            st.update_trial(live.id, heartbeat=now)
            st.update_trial(done.id, state="completed", end=now - 1)
            out[project] = expected(st, project, run.name, live.id)
    return out


def expected(st: Store, project: str, run: str, trial_id: int) -> list[Expected]:
    trial = st.get_trial(trial_id)
    return [
        Expected(
            s.metric,
            project,
            run,
            trial.name,
            trial.host,
            s.device or "",
            base_value(metric(s.metric), v),
        )
        for s, _, v in st.latest(trial_id)
    ]


def read_token(url: str, project: str) -> str:
    with open_store(url) as st:
        assert isinstance(st, SQLStore)
        return st.create_token(project, "read")[1]
