"""A team server at load, measured side by side in one run.

One `tunescope serve` (a real uvicorn process, token auth) in front of a private PostgreSQL
server started here. Two phases:

1. **Ingest under page load**: 64 trials record every metric of the catalog (GPU metrics on
   two GPUs) at 1 Hz for ``TEAM_SECONDS`` (default 120) through ``http://…/PROJECT`` store
   URLs from four producer processes (16 trials each, as four nodes would): per trial, one
   writer as its sampler would (the hardware series and the heartbeat)
   and one as its flusher would (an optimizer step, a scalar and the train.* series). Meanwhile
   10 page clients poll live trials (series windows and events, once a second each). Printed:
   samples written / kept / duplicated (every series read back), ingest p50/p99 (one batch a
   request), page p50/p99, and the server's CPU per 1,000 samples/s ingested.
2. **One long trial, many readers**: a 24-hour trial at 1 Hz (six series) and 50 page clients
   asking for windows of it (the whole day, a random hour, a random minute), each waiting a
   second between windows as a person zooming would, for 30 s. Printed: p50/p99.

Targets (the issue): lost 0, duplicated 0, ingest p99 ≤ 250 ms, page p99 ≤ 500 ms, 50 clients
on one 24 h trial p99 ≤ 1 s.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pg_cluster import PrivateCluster, available  # noqa: E402
from tunescope.errors import NotFound  # noqa: E402
from tunescope.metrics import CATALOG, GIB  # noqa: E402
from tunescope.store import Batch, SQLStore, TrialSpec, Writer, new_key, open_store  # noqa: E402

SECONDS = float(os.environ.get("TEAM_SECONDS", "120"))
TRIALS = 64
PAGE_CLIENTS = 10
DAY_CLIENTS = 50
DAY_SECONDS = 30.0
PROJECT = "bench"
GPU_METRICS = [m.key for m in CATALOG if m.scope == "gpu"]
SAMPLER_METRICS = [m.key for m in CATALOG if m.scope in ("trial", "host") and m.source != "sdk"]
SDK_METRICS = [m.key for m in CATALOG if m.source == "sdk"]
PRODUCERS = 4
THINK_S = 1.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVER = """
import sys, uvicorn
from tunescope.server import create_app
uvicorn.run(create_app(sys.argv[1], auth="tokens"), host="127.0.0.1", port=int(sys.argv[2]),
            log_level="warning")
"""


class Timed:
    """A store whose write() is timed (one HTTP request a batch)."""

    def __init__(self, store: Any, out: list[float], lock: threading.Lock) -> None:
        self._store = store
        self._out = out
        self._lock = lock

    def write(self, batch: Batch) -> int:
        t = time.perf_counter()
        tid = self._store.write(batch)
        with self._lock:
            self._out.append(time.perf_counter() - t)
        return int(tid)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _get(port: int, token: str, path: str, conn: list[http.client.HTTPConnection]) -> float:
    if not conn:
        conn.append(http.client.HTTPConnection("127.0.0.1", port, timeout=30))
    t = time.perf_counter()
    try:
        conn[0].request("GET", path, headers={"Authorization": f"Bearer {token}"})
        r = conn[0].getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {body[:200]!r}")
    except (OSError, http.client.HTTPException):
        conn.clear()
        raise
    return time.perf_counter() - t


def produce(url: str, first: int, count: int, out: str) -> None:
    """One producer process: trials ``first``..``first+count-1`` of the run, each with a
    sampler's writer and a flusher's writer, as ``tunescope run`` and the SDK would on one
    node. Says "ready" on stdout, then reads the start time from stdin and writes for SECONDS
    from then. Writes what it produced and its write latencies to ``out`` (JSON)."""
    print("ready", flush=True)
    t0 = float(sys.stdin.readline())
    lock = threading.Lock()
    ingest: list[float] = []
    specs = [
        TrialSpec(key=new_key(), run="team-load", name=f"t{i:02d}", project=PROJECT,
                  start=t0, interval=1.0)
        for i in range(first, first + count)
    ]  # fmt: skip
    factory: Callable[[str], Any] = lambda u: Timed(open_store(u), ingest, lock)  # noqa: E731
    samplers = [Writer(url, spec=s, name=f"s{s.name}", store_factory=factory) for s in specs]
    flushers = [Writer(url, spec=s, name=f"f{s.name}", store_factory=factory) for s in specs]
    produced = 0
    k = 0
    while t0 + k < t0 + SECONDS:
        for i, spec in enumerate(specs):
            # trials start at different moments, so each ticks at its own phase of the second
            now = t0 + k + (first + i) / TRIALS
            time.sleep(max(0.0, now - time.time()))
            rows = [(m, None, None, now, float(i + k % 50)) for m in SAMPLER_METRICS]
            rows += [(m, d, None, now, float(k % 90)) for m in GPU_METRICS for d in ("0", "1")]
            samplers[i].put(Batch(spec.key, samples=tuple(rows), heartbeat=now))
            sdk = tuple((m, None, None, now, 0.3) for m in SDK_METRICS)
            flushers[i].put(
                Batch(
                    spec.key,
                    samples=sdk,
                    events=(("optimizer_step", now, "AdamW", k + 1, None, None, None),),
                    scalars=(("loss", k, now, 1.0 / (k + 1)),),
                )
            )
            produced += len(rows) + len(sdk)
        k += 1
    for w in samplers + flushers:
        w.close(60)
    Path(out).write_text(json.dumps({"produced": produced, "ingest": ingest}))


def phase_ingest(url: str, port: int, write_token: str, read_token: str) -> dict[str, Any]:
    lock = threading.Lock()
    stop = threading.Event()
    page: list[float] = []
    ids: list[int] = []

    def poll(k: int) -> None:
        conn: list[http.client.HTTPConnection] = []
        rng = random.Random(k)
        while not stop.is_set():
            if not ids:
                time.sleep(0.2)
                continue
            tid = rng.choice(ids)
            metric = rng.choice(["cpu.util", "gpu.util", "gpu.mem", "cpu.mem"])
            for path in (
                f"/api/trials/{tid}/series?metric={metric}&points=800",
                f"/api/trials/{tid}/events?kinds=optimizer_step&limit=2000",
            ):
                try:
                    d = _get(port, read_token, path, conn)
                    with lock:
                        page.append(d)
                except Exception as exc:  # counted as a miss, shown below
                    with lock:
                        page.append(float("inf"))
                    print(f"  page error: {exc}", file=sys.stderr)
            stop.wait(1.0)

    server_pid = int(os.environ["TEAM_SERVER_PID"])
    proc = psutil.Process(server_pid)
    outs = [f"{os.environ['TUNESCOPE_SPOOL']}-producer{p}.json" for p in range(PRODUCERS)]
    per = TRIALS // PRODUCERS
    env = dict(os.environ, TUNESCOPE_TOKEN=write_token)
    producers = [
        subprocess.Popen(
            [sys.executable, __file__, "--produce", url, str(p * per), str(per), out],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p, out in enumerate(outs)
    ]
    for pr in producers:
        assert pr.stdout is not None and pr.stdout.readline().strip() == "ready"
    t0 = time.time() + 1.0
    for pr in producers:
        assert pr.stdin is not None
        pr.stdin.write(f"{t0!r}\n")
        pr.stdin.close()
    pollers = [threading.Thread(target=poll, args=(k,), daemon=True) for k in range(PAGE_CLIENTS)]
    for th in pollers:
        th.start()
    time.sleep(max(0.0, t0 - time.time()))
    cpu0 = sum(proc.cpu_times()[:2])
    while not ids and time.time() < t0 + 30:
        time.sleep(1.0)
        with open_store(os.environ["TEAM_PG"], project=PROJECT) as st:
            try:
                found = st.list_trials(st.get_run("team-load").id)
            except NotFound:
                continue
            if len(found) == TRIALS:
                ids.extend(t.id for t in found)
    for pr in producers:
        if pr.wait() != 0:
            raise RuntimeError(f"a producer failed: exit {pr.returncode}")
    elapsed = time.time() - t0
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    stop.set()
    for th in pollers:
        th.join(10)
    written = 0
    ingest: list[float] = []
    for out in outs:
        got = json.loads(Path(out).read_text())
        written += int(got["produced"])
        ingest += got["ingest"]
    kept = dup = 0
    with open_store(os.environ["TEAM_PG"], project=PROJECT) as st:
        run = st.get_run("team-load")
        for t in st.list_trials(run.id):
            for s in st.list_series(t.id):
                ts = st.read_samples(s.id)[0]
                kept += len(ts)
                dup += len(ts) - len(np.unique(ts))
    rate = written / elapsed
    return {
        "written": written,
        "kept": kept,
        "dup": dup,
        "ingest": ingest,
        "page": page,
        "rate": rate,
        "cpu_per_1000": (cpu / elapsed) / (rate / 1000.0) if rate else float("nan"),
    }


def phase_day(pg_url: str, port: int, read_token: str) -> list[float]:
    rng = np.random.default_rng(0)
    t0 = time.time() - 2 * 86_400
    t = t0 + np.arange(86_400, dtype=np.float64)
    with open_store(pg_url, project=PROJECT) as st:
        run = st.ensure_run("team-day", start=t0)
        tr = st.create_trial(run.id, "day", start=t0)
        for metric, device, values in (
            ("gpu.util", "0", np.clip(rng.normal(85, 10, t.size), 0, 100)),
            ("gpu.util", "1", np.clip(rng.normal(70, 20, t.size), 0, 100)),
            ("gpu.mem", "0", 40 * GIB + 4 * GIB * np.sin(t / 600.0)),
            ("gpu.mem", "1", 38 * GIB + rng.normal(0, GIB / 4, t.size)),
            ("cpu.util", None, np.clip(rng.normal(30, 8, t.size), 0, 100)),
            ("cpu.mem", None, 12 * GIB + np.cumsum(rng.normal(0, 2e5, t.size))),
        ):
            sid = st.series(tr.id, metric, device).id
            for a in range(0, t.size, 7200):
                st.append_samples(
                    (sid, float(x), float(v))
                    for x, v in zip(t[a : a + 7200], values[a : a + 7200], strict=True)
                )
        st.update_trial(tr.id, state="completed", end=t0 + 86_400)
        st.compact()
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + DAY_SECONDS

    def reader(k: int) -> None:
        conn: list[http.client.HTTPConnection] = []
        r = random.Random(k)
        while time.monotonic() < stop:
            span = r.choice([86_400, 3600, 60])
            a = t0 + r.uniform(0, 86_400 - span)
            metric = r.choice(["gpu.util", "gpu.mem", "cpu.util", "cpu.mem"])
            path = (
                f"/api/trials/{tr.id}/series?metric={metric}&start={a}&end={a + span}&points=1000"
            )
            try:
                d = _get(port, read_token, path, conn)
            except Exception as exc:
                d = float("inf")
                print(f"  day error: {exc}", file=sys.stderr)
            with lock:
                lat.append(d)
            time.sleep(THINK_S)  # a person reading the chart before the next zoom

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(DAY_CLIENTS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return lat


def _pct(xs: list[float], q: float) -> float:
    return (
        float(np.percentile(np.asarray(xs, dtype=np.float64), q)) * 1000.0 if xs else float("nan")
    )


def main() -> int:
    why = available()
    if why is not None:
        print(f"team bench skipped: {why}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="tunescope-team-"))
    os.environ["TUNESCOPE_SPOOL"] = str(work / "spool")
    cluster = PrivateCluster()
    server: subprocess.Popen[bytes] | None = None
    try:
        pg = cluster.fresh_database("team")
        os.environ["TEAM_PG"] = pg
        with open_store(pg) as st:
            assert isinstance(st, SQLStore)
            _w, write_token = st.create_token(PROJECT, "write")
            _r, read_token = st.create_token(PROJECT, "read")
        port = _free_port()
        server = subprocess.Popen([sys.executable, "-c", SERVER, pg, str(port)])
        os.environ["TEAM_SERVER_PID"] = str(server.pid)
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(port, read_token, "/api/health", [])
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/{PROJECT}"
        ing = phase_ingest(url, port, write_token, read_token)
        day = phase_day(pg, port, read_token)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        cluster.destroy()
    lost = ing["written"] - (ing["kept"] - ing["dup"])
    rows = [
        (f"samples written / kept / duplicated ({TRIALS} trials, {SECONDS:.0f} s)",
         f"{ing['written']} / {ing['kept']} / {ing['dup']}", "lost 0, duplicated 0"),
        ("ingest rate", f"{ing['rate']:.0f} samples/s, {len(ing['ingest'])} batches", ""),
        ("ingest p50 / p99 (one batch a request)",
         f"{_pct(ing['ingest'], 50):.1f} / {_pct(ing['ingest'], 99):.1f} ms", "p99 <= 250 ms"),
        (f"page routes p50 / p99 ({PAGE_CLIENTS} clients polling live trials)",
         f"{_pct(ing['page'], 50):.1f} / {_pct(ing['page'], 99):.1f} ms", "p99 <= 500 ms"),
        ("server CPU per 1,000 samples/s ingested", f"{ing['cpu_per_1000']:.3f} cores", ""),
        (f"{DAY_CLIENTS} page clients on one 24 h trial, p50 / p99 ({len(day)} requests)",
         f"{_pct(day, 50):.1f} / {_pct(day, 99):.1f} ms", "p99 <= 1000 ms"),
    ]  # fmt: skip
    width = max(len(a) for a, _, _ in rows)
    for a, b, c in rows:
        print(f"team.{a:<{width}}  {b:<32}  {('target ' + c) if c else ''}")
    ok = (
        lost == 0
        and ing["dup"] == 0
        and _pct(ing["ingest"], 99) <= 250
        and _pct(ing["page"], 99) <= 500
        and _pct(day, 99) <= 1000
    )
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--produce"]:
        a = sys.argv[2:]
        produce(a[0], int(a[1]), int(a[2]), a[3])
        sys.exit(0)
    sys.exit(main())
