"""Made tests/data/v1.db once: a small tunescope database at schema version 1, the way
tunescope 0.1.0 wrote one (WAL mode, chunks of 256 samples with their block summaries,
pending rows a killed writer left behind, events and scalars).

KEPT FOR THE RECORD. DO NOT RE-RUN IT TO "FIX" A FAILING TEST. v1.db is frozen on purpose:
tests/test_store_schema.py opens a copy of it and checks that every sample, event, scalar and
trial state survives the migrations to the current schema. If that test fails, a shipped
migration, the codec or a reader stopped understanding what an old tunescope wrote: fix the
code, never the file. (The script refuses to overwrite the file; the test also pins its
SHA-256.)

It uses only the version 1 DDL (MIGRATIONS[0]), plain sqlite3 inserts and the chunk codec.
One departure from 0.1.0: pages of 1 KiB instead of SQLite's default 4 KiB, which keeps the
file small (every table and index takes a page or more); tunescope never sets or reads the
page size.

The content below (TRIALS, SERIES, samples(), EVENTS, SCALARS) is also what the test expects
to read back; changing it means the test no longer describes the frozen file.

Made once, on branch store-integrity after commit c4cc7ea, with
``PYTHONPATH=src python tests/data/make_v1_db.py``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunescope.store._codec import encode, encode_blocks, to_stored
from tunescope.store.sql._schema import MIGRATIONS
from tunescope.store.sql._sqlite import SQLITE

F64 = npt.NDArray[np.float64]

PATH = Path(__file__).with_name("v1.db")
T0 = 1_700_000_000.0
CHUNK = 256  # CHUNK_SAMPLES of tunescope 0.1.0
RUN = "sweep"

TRIALS: list[dict[str, Any]] = [
    {
        "name": "trial-0",
        "params": {"bs": 8, "lr": 0.001},
        "state": "completed",
        "host": "node1",
        "pids": [4242, 4250],
        "start": T0,
        "end": T0 + 700.25,
        "heartbeat": T0 + 700.0,
        "error": None,
        "interval": 1.0,
    },
    {
        "name": "oom",
        "params": {"bs": 64, "lr": 0.01},
        "state": "failed",
        "host": "node1",
        "pids": [5001],
        "start": T0 + 800.0,
        "end": T0 + 1100.5,
        "heartbeat": T0 + 1100.0,
        "error": "CUDA out of memory",
        "interval": 0.5,
    },
]

# (trial, metric, device, note, samples, packed): a writer that closed packs everything into
# chunks (the last one short); the killed trial's writer left its newest samples pending.
SERIES: list[tuple[str, str, str | None, str | None, int, bool]] = [
    ("trial-0", "cpu.util", None, None, 600, True),
    ("trial-0", "gpu.util", "0", None, 600, True),
    ("trial-0", "gpu.mem", "0", "device memory: per-process unavailable", 300, True),
    ("oom", "gpu.mem", "0", None, 580, False),
    ("oom", "cpu.mem", None, None, 100, False),
]


def samples(trial: str, metric: str, device: str | None, n: int) -> tuple[F64, F64]:
    """The series' samples as stored (millisecond times, float32 values)."""
    tr = next(t for t in TRIALS if t["name"] == trial)
    k = np.arange(n, dtype=np.float64)
    ts = tr["start"] + 0.5 + k * tr["interval"] + (k % 7) * 0.0013  # a little jitter
    seed = sum(map(ord, f"{trial}/{metric}/{device}"))
    vs = 50.0 + 40.0 * np.sin(k / 17.0 + seed) + k / 1000.0
    if metric == "gpu.mem":
        vs = vs * 2**28 + (70 * 2**30 if trial == "oom" else 0.0)
        vs[n // 2] = 79.5 * 2**30  # a one-sample spike
    return to_stored(ts, vs)


def _event(trial: str, kind: str, t: float, **kw: Any) -> dict[str, Any]:
    return {"trial": trial, "kind": kind, "t": t, "name": None, "step": None} | {
        "duration": None,
        "value": None,
        "data": None,
        **kw,
    }


EVENTS: list[dict[str, Any]] = (
    [
        _event("trial-0", "optimizer_step", T0 + 2 + 3.25 * k, name="AdamW", step=k + 1)
        for k in range(200)
    ]
    + [
        _event(
            "trial-0",
            "evaluation",
            T0 + 300 + 300 * k,
            name="eval",
            step=90 * (k + 1),
            duration=22.5,
            value=1.5 - k / 4,
        )
        for k in range(2)
    ]
    + [
        _event(
            "trial-0",
            "checkpoint",
            T0 + 330,
            name="checkpoint-90",
            step=90,
            data={"path": "/ckpt/step-90", "bytes": 134217728},
        ),
        _event("trial-0", "data_wait", T0 + 10.5, duration=0.75, value=1.25),
        _event("oom", "mark", T0 + 1099.75, name="before the crash", data={"note": "bs=64"}),
    ]
)

SCALARS: list[tuple[str, str, int | None, float, float]] = [
    ("trial-0", "loss", s, T0 + 2 + 3.25 * s, 2.0 / (1 + s / 50)) for s in range(0, 200, 10)
] + [
    ("trial-0", "eval_loss", 90, T0 + 322.5, 1.5),
    ("trial-0", "eval_loss", 180, T0 + 622.5, 1.25),
    ("oom", "lr", None, T0 + 800.5, 0.01),
]


def build(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level="DEFERRED")
    conn.execute("PRAGMA page_size = 1024")  # before anything is written; see the docstring
    conn.execute("PRAGMA journal_mode = WAL")
    for stmt in MIGRATIONS[0]:
        conn.execute(SQLITE.ddl(stmt))
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
    run_id = conn.execute("INSERT INTO runs (name, t_start) VALUES (?, ?)", (RUN, T0)).lastrowid
    trial_ids: dict[str, int] = {}
    for tr in TRIALS:
        trial_ids[tr["name"]] = int(
            conn.execute(
                "INSERT INTO trials (run_id, name, params, state, host, pids, t_start, t_end, "
                "heartbeat, error, interval_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    tr["name"],
                    json.dumps(tr["params"], sort_keys=True),
                    tr["state"],
                    tr["host"],
                    json.dumps(tr["pids"]),
                    tr["start"],
                    tr["end"],
                    tr["heartbeat"],
                    tr["error"],
                    tr["interval"],
                ),
            ).lastrowid
        )
    for trial, metric, device, note, n, packed in SERIES:
        sid = conn.execute(
            "INSERT INTO series (trial_id, metric, device, note) VALUES (?, ?, ?, ?)",
            (trial_ids[trial], metric, device or "", note),
        ).lastrowid
        ts, vs = samples(trial, metric, device, n)
        full = n if packed else (n // CHUNK) * CHUNK
        for a in range(0, full, CHUNK):
            t, v = ts[a : min(a + CHUNK, full)], vs[a : min(a + CHUNK, full)]
            conn.execute(
                "INSERT INTO chunks (series_id, t_first, t_last, n, vmin, vmax, vsum, data, "
                "blocks) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    float(t[0]),
                    float(t[-1]),
                    len(t),
                    float(v.min()),
                    float(v.max()),
                    float(v.sum()),
                    encode(t, v),
                    encode_blocks(t, v),
                ),
            )
        conn.executemany(
            "INSERT INTO pending (series_id, t, value) VALUES (?, ?, ?)",
            [(sid, t, v) for t, v in zip(ts[full:].tolist(), vs[full:].tolist(), strict=True)],
        )
    conn.executemany(
        "INSERT INTO events (trial_id, kind, name, step, t, duration, value, data) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                trial_ids[e["trial"]],
                e["kind"],
                e["name"],
                e["step"],
                e["t"],
                e["duration"],
                e["value"],
                None if e["data"] is None else json.dumps(e["data"]),
            )
            for e in EVENTS
        ],
    )
    conn.executemany(
        "INSERT INTO scalars (trial_id, name, step, t, value) VALUES (?, ?, ?, ?, ?)",
        [(trial_ids[tr], name, step, t, v) for tr, name, step, t, v in SCALARS],
    )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


if __name__ == "__main__":
    if PATH.exists():
        sys.exit(f"{PATH} exists and is frozen: read this script's docstring")
    build(PATH)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes)")
