"""tunescope beside W&B (offline) and MLflow (local SQLite store), side by side in one run
(``make bench-peers``, in its own venv bench/.venv-peers).

Each phase runs in a fresh subprocess: the same training loop under one tool, its system
monitor at one interval. The loop's thread steps every 100 ms, busy about half of each step
(its CPU duty), and marks each step with the tool's call; every SPIKE_EVERY_S it allocates
and touches SPIKE_MIB MiB of memory and holds it SPIKE_S seconds (the spikes' start and end
times are kept). After the phase the tool's own recorded data is read back:

* W&B: the offline run's ``.wandb`` file, records parsed with ``wandb.proto`` (the leveldb-log
  framing is unpacked here: wandb 0.31 ships no Python reader for it), ``stats`` records,
  ``proc.memory.rssMB`` of the training process;
* MLflow: ``MlflowClient().get_metric_history`` of ``system/system_memory_usage_megabytes``
  (MLflow records the host's memory, not the process's);
* tunescope: ``Store.read_samples`` of the trial's ``cpu.mem`` series.

A spike is caught when a sample timed inside it (up to LAG_S after its end, for the tool's
logging delay) stands at least half the spike's size above the median of the samples outside
spikes within 30 s of it. Samples kept: samples of that series timed inside the busy loop,
against loop time / interval.

Monitor cost during the loop: the CPU of the processes a tool started (W&B: wandb-core and
wandb-symon; tunescope: its sampler) via psutil, plus that of the threads it started in the
training process (MLflow's SystemMetricsMonitor, wandb's and tunescope's I/O threads) from
/proc/self/task/TID/stat; memory: those processes' RSS, for MLflow (no process of its own) the
training process's RSS growth from before ``start_run`` to the end of the loop.

Step call: median cost of the call that marks a step, in batches of calls, with the monitor
running. 24 h series: 86,400 points 1 s apart written once through each
tool's API, bytes added on disk per point, and the median time to read it back as a
1,000-point window (tunescope ``Store.window``; the peers have no such read: their full
history read, then min/max/mean per bucket with numpy, which is what their API leaves).

Usage: python bench/bench_peers.py [--default-s 50] [--fast-s 25] [--write-docs]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import inspect
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "performance.md"
TOOLS = ("wandb", "mlflow", "tunescope")
SPIKE_MIB = 512
SPIKE_S = 0.6
SPIKE_EVERY_S = 4.0
STEP_S = 0.1
DUTY = 0.5
LAG_S = 0.3
DAY = 86_400
T0 = 1_700_000_000.0
MIB = 2**20


# ---------------------------------------------------------------------------- the workload
def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def workload(seconds: float, mark: Callable[[int], None]) -> list[tuple[float, float]]:
    """The training loop: a step every STEP_S, busy DUTY of it, ``mark(step)`` after each;
    a SPIKE_MIB MiB spike held SPIKE_S every SPIKE_EVERY_S. Returns the spikes' (start, end)
    epoch times (start: once every page is touched)."""
    spikes: list[tuple[float, float]] = []
    held: np.ndarray | None = None
    held_since = 0.0
    next_spike = time.time() + SPIKE_EVERY_S / 2
    end = time.time() + seconds
    step = 0
    while time.time() < end:
        t_step = time.perf_counter()
        now = time.time()
        if held is None and now >= next_spike and now + SPIKE_S + 0.5 < end:
            held = np.ones(SPIKE_MIB * MIB // 8)  # written: every page touched
            held_since = time.time()
            next_spike += SPIKE_EVERY_S
        elif held is not None and now - held_since >= SPIKE_S:
            spikes.append((held_since, time.time()))
            del held
            held = None
        _busy(STEP_S * DUTY)
        mark(step)
        step += 1
        left = STEP_S - (time.perf_counter() - t_step)
        if left > 0:
            time.sleep(left)
    if held is not None:
        spikes.append((held_since, time.time()))
    return spikes


def caught(
    spikes: list[tuple[float, float]], t: np.ndarray, v_bytes: np.ndarray
) -> tuple[int, int]:
    """(spikes caught, spikes) by the samples (t epoch s, v bytes): see the module doc."""
    inside = np.zeros(len(t), dtype=bool)
    for a, b in spikes:
        inside |= (t >= a - 0.2) & (t <= b + 1.0)
    n = 0
    for a, b in spikes:
        near = ~inside & (np.abs(t - a) <= 30.0)
        ref = v_bytes[near] if near.any() else v_bytes[~inside]
        if not len(ref):
            continue
        base = float(np.median(ref))
        hit = (t >= a) & (t <= b + LAG_S) & (v_bytes - base >= SPIKE_MIB * MIB / 2)
        n += bool(hit.any())
    return n, len(spikes)


def _tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def _thread_cpu(tid: int) -> float:
    """CPU seconds of one thread of this process (0 once it has ended)."""
    try:
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    except FileNotFoundError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads_since(before: set[int]) -> list[int]:
    """Native ids of this process's threads started since ``before`` was taken: the ones a
    tool started in the training process."""
    ids = {t.native_id for t in threading.enumerate()} - before - {threading.get_native_id()}
    return sorted(i for i in ids if i is not None)


def _threads_now() -> set[int]:
    return {i for i in (t.native_id for t in threading.enumerate()) if i is not None}


def _threads_cpu(tids: list[int]) -> float:
    return sum(_thread_cpu(t) for t in tids)


def _tree_cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


def _tree_rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def _per_call_us(call: Callable[[int], None], n: int, batch: int) -> float:
    """Median µs per call over batches of ``batch`` calls, ``n`` calls in all."""
    per: list[float] = []
    i = 0
    while i < n:
        t = time.perf_counter()
        for k in range(i, i + batch):
            call(k)
        per.append((time.perf_counter() - t) / batch * 1e6)
        i += batch
    return statistics.median(per)


def _bucket(x: np.ndarray, v: np.ndarray, lo: float, hi: float, points: int) -> int:
    """min/max/mean of ``v`` in ``points`` equal spans of [lo, hi] of ``x``: the downsampling
    a peer's reader leaves to its caller. Returns the number of non-empty buckets."""
    idx = np.clip(((x - lo) / (hi - lo) * points).astype(np.int64), 0, points - 1)
    order = np.argsort(idx, kind="stable")
    idx, v = idx[order], v[order]
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    np.minimum.reduceat(v, starts)
    np.maximum.reduceat(v, starts)
    np.add.reduceat(v, starts)
    return len(starts)


def _timed(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


# ---------------------------------------------------------------------------- W&B
def _wandb_records(path: Path) -> Iterator[Any]:
    """The records of a W&B ``.wandb`` file, parsed with wandb's own protobuf schema. The
    file is a 7-byte header then leveldb-log framing: 32 KiB blocks of (crc32c, length,
    type) headed pieces, type 1 a whole record, 2/3/4 its first/middle/last piece."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    pos, buf, block = 7, b"", 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, n, typ = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        piece = data[pos : pos + n]
        pos += n
        if typ == 0:
            continue
        buf = piece if typ in (1, 2) else buf + piece
        if typ in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec
            buf = b""


def _wandb_file(root: Path) -> Path:
    found = glob.glob(str(root / "wandb" / "offline-run-*" / "run-*.wandb"))
    if len(found) != 1:
        raise RuntimeError(f"expected one offline run file under {root}, found {found}")
    return Path(found[0])


def phase_wandb(interval: float | None, seconds: float, d: Path) -> dict[str, Any]:
    import wandb

    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    settings = (
        wandb.Settings() if interval is None else wandb.Settings(x_stats_sampling_interval=interval)
    )
    used = float(settings.x_stats_sampling_interval)
    before = _threads_now()
    run = wandb.init(project="bench-peers", dir=str(d), settings=settings)
    me = os.getpid()
    monitor = [p for p in _tree(me) if p.pid != me]
    threads = _threads_since(before)
    c0 = _tree_cpu(monitor) + _threads_cpu(threads)
    t0 = time.time()
    spikes = workload(seconds, lambda i: wandb.log({"loss": 1.0 / (i + 1)}, step=i))
    t1 = time.time()
    cpu = _tree_cpu(monitor) + _threads_cpu(threads) - c0
    rss = _tree_rss(monitor)
    step_us = _per_call_us(lambda i: wandb.log({"loss": 0.5}, step=100_000 + i), 5000, 100)
    run.finish()
    t, v = [], []
    for rec in _wandb_records(_wandb_file(d)):
        if rec.WhichOneof("record_type") == "stats":
            items = {i.key: i.value_json for i in rec.stats.item}
            if "proc.memory.rssMB" in items:
                t.append(rec.stats.timestamp.seconds + rec.stats.timestamp.nanos / 1e9)
                v.append(float(items["proc.memory.rssMB"]) * MIB)
    return _result(
        used,
        t0,
        t1,
        spikes,
        np.array(t),
        np.array(v),
        cpu,
        rss,
        step_us,
        monitor="the wandb-core and wandb-symon processes, and the threads wandb started "
        "in the training process",
        step_call="wandb.log({'loss': x}, step=i)",
    )


def day_wandb(d: Path) -> dict[str, Any]:
    import wandb

    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    run = wandb.init(
        project="bench-peers", dir=str(d), settings=wandb.Settings(x_disable_stats=True)
    )
    run.log({"v": 0.0}, step=0)
    path = _wandb_file(d)
    size0 = path.stat().st_size
    vals = _values(DAY)
    t = time.perf_counter()
    for i in range(1, DAY):
        run.log({"v": float(vals[i])}, step=i)
    run.finish()
    write_s = time.perf_counter() - t
    size = path.stat().st_size - size0

    def read() -> int:
        steps, vs = [], []
        for rec in _wandb_records(path):
            if rec.WhichOneof("record_type") == "history":
                items = {
                    i.nested_key[0] if i.nested_key else i.key: i.value_json
                    for i in rec.history.item
                }
                if "v" in items:
                    steps.append(float(items["_step"]))
                    vs.append(float(items["v"]))
        got = _bucket(np.array(steps), np.array(vs), 0, DAY, 1000)
        assert len(steps) == DAY, len(steps)
        return got

    return {
        "day_bytes_per_point": size / (DAY - 1),
        "day_write_s": write_s,
        "day_window_ms": _timed(read, 3),
        "day_how": "wandb.log per point (offline), the step as the x axis (wandb.log takes no "
        "timestamp); read: every record of the .wandb file "
        "(wandb.proto), then 1,000 buckets with numpy",
    }


# ---------------------------------------------------------------------------- MLflow
def phase_mlflow(interval: float | None, seconds: float, d: Path) -> dict[str, Any]:
    import mlflow
    from mlflow import MlflowClient

    uri = f"sqlite:///{d}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    if interval is not None:
        mlflow.set_system_metrics_sampling_interval(interval)
    mlflow.set_experiment("bench-peers")
    rss0 = psutil.Process().memory_info().rss
    before = _threads_now()
    with mlflow.start_run(log_system_metrics=True) as run:
        assert any(t.name == "SystemMetricsMonitor" for t in threading.enumerate())
        threads = _threads_since(before)
        from mlflow.environment_variables import MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        default = inspect.signature(SystemMetricsMonitor).parameters["sampling_interval"].default
        used = float(interval or MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL.get() or default)
        c0 = _threads_cpu(threads)
        t0 = time.time()
        spikes = workload(seconds, lambda i: mlflow.log_metric("loss", 1.0 / (i + 1), step=i))
        t1 = time.time()
        cpu = _threads_cpu(threads) - c0
        rss = psutil.Process().memory_info().rss - rss0
        step_us = _per_call_us(lambda i: mlflow.log_metric("loss", 0.5, step=100_000 + i), 300, 20)
    hist = MlflowClient(uri).get_metric_history(
        run.info.run_id, "system/system_memory_usage_megabytes"
    )
    t = np.array([m.timestamp / 1000 for m in hist])
    v = np.array([m.value * 1e6 for m in hist])
    return _result(
        used,
        t0,
        t1,
        spikes,
        t,
        v,
        cpu,
        rss,
        step_us,
        monitor="the threads MLflow started in the training process (its "
        "SystemMetricsMonitor); memory: the training process's RSS growth from before "
        "start_run",
        step_call="mlflow.log_metric('loss', x, step=i)",
    )


def day_mlflow(d: Path) -> dict[str, Any]:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    uri = f"sqlite:///{d}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("bench-peers-day")
    run_id = client.create_run(exp).info.run_id
    db = d / "mlflow.db"
    size0 = db.stat().st_size
    vals = _values(DAY)
    t = time.perf_counter()
    for i in range(0, DAY, 1000):
        client.log_batch(
            run_id,
            metrics=[
                Metric("v", float(vals[k]), int((T0 + k) * 1000), k)
                for k in range(i, min(DAY, i + 1000))
            ],
        )
    write_s = time.perf_counter() - t
    size = db.stat().st_size - size0
    del mlflow

    def read() -> int:
        hist = client.get_metric_history(run_id, "v")
        assert len(hist) == DAY, len(hist)
        x = np.array([m.timestamp / 1000 for m in hist])
        v = np.array([m.value for m in hist])
        return _bucket(x, v, T0, T0 + DAY, 1000)

    store = client._tracking_client.store

    def sampled() -> int:
        got = store.get_metric_history_bulk_interval([run_id], "v", 1000, None, None)
        assert 900 <= len(got) <= 1000, len(got)
        return len(got)

    return {
        "day_bytes_per_point": size / DAY,
        "day_write_s": write_s,
        "day_window_ms": _timed(read, 3),
        "day_sampled_ms": _timed(sampled, 3),
        "day_how": "MlflowClient.log_batch, 1,000 points a call; read: get_metric_history "
        "(every point), then 1,000 buckets with numpy. Also timed: the store's "
        "get_metric_history_bulk_interval(max_results=1000), the sampled read behind the "
        "MLflow UI's charts, which picks 1,000 of the points (a spike between them is not "
        "shown) rather than summarising them",
    }


# ---------------------------------------------------------------------------- tunescope
def phase_tunescope(interval: float | None, seconds: float, d: Path) -> dict[str, Any]:
    import tunescope.record as ts
    from tunescope.store import open_store

    os.environ["TUNESCOPE_QUIET"] = "1"
    path = d / "tunescope.db"
    used = 1.0 if interval is None else interval
    kw = {} if interval is None else {"interval": interval}
    before = _threads_now()
    with ts.run("bench-peers", store=str(path), **kw) as run, run.trial() as trial:
        sampler = trial._sampler
        assert sampler is not None
        monitor = _tree(sampler.pid)
        threads = _threads_since(before)
        c0 = _tree_cpu(monitor) + _threads_cpu(threads)
        t0 = time.time()
        spikes = workload(seconds, lambda i: trial.log(step=i, loss=1.0 / (i + 1)))
        t1 = time.time()
        cpu = _tree_cpu(monitor) + _threads_cpu(threads) - c0
        rss = _tree_rss(monitor)
        step_us = _per_call_us(lambda i: trial.log(step=100_000 + i, loss=0.5), 20_000, 1000)
        opt_us = _per_call_us(lambda i: trial.optimizer_step(100_000 + i), 20_000, 1000)
        trial_id = trial.id
    assert trial_id is not None
    with open_store(path) as store:
        (series,) = store.list_series(trial_id, "cpu.mem")
        t, v = store.read_samples(series.id)
    out = _result(
        used,
        t0,
        t1,
        spikes,
        t,
        v,
        cpu,
        rss,
        step_us,
        monitor="the sampler process, and the threads tunescope started in the "
        "training process (its flusher)",
        step_call="trial.log(step=i, loss=x)",
    )
    out["optimizer_step_us"] = opt_us
    return out


def day_tunescope(d: Path) -> dict[str, Any]:
    from tunescope.store import open_store

    path = d / "day.db"
    store = open_store(path)
    tid = store.create_trial(store.ensure_run("day", start=T0).id, start=T0).id
    sid = store.series(tid, "cpu.mem").id
    store.compact()
    size0 = path.stat().st_size
    vals = _values(DAY)
    ts = T0 + np.arange(DAY, dtype=np.float64)
    t = time.perf_counter()
    for i in range(0, DAY, 1000):  # as the sampler's writer does: batches of samples
        store.append_samples(
            zip([sid] * 1000, ts[i : i + 1000].tolist(), vals[i : i + 1000].tolist(), strict=False)
        )
    store.compact()
    write_s = time.perf_counter() - t
    store.close()
    size = path.stat().st_size - size0
    store = open_store(path)

    def read() -> int:
        w = store.window(sid, T0, T0 + DAY, 1000)
        return len(w.buckets)

    ms = _timed(read, 7)
    store.close()
    return {
        "day_bytes_per_point": size / DAY,
        "day_write_s": write_s,
        "day_window_ms": ms,
        "day_how": "Store.append_samples, 1,000 a call, then compact; read: Store.window(…, 1000)",
    }


def _values(n: int) -> np.ndarray:
    """A memory-like series: a staircase with page-sized noise (bytes)."""
    rng = np.random.default_rng(0)
    level = np.repeat(rng.uniform(2e9, 4e9, n // 300 + 1), 300)[:n] // 4096 * 4096
    return level + np.cumsum(rng.integers(-3, 4, n)) * 4096.0


def _result(
    interval: float,
    t0: float,
    t1: float,
    spikes: list[tuple[float, float]],
    t: np.ndarray,
    v: np.ndarray,
    cpu_s: float,
    rss: int,
    step_us: float,
    *,
    monitor: str,
    step_call: str,
) -> dict[str, Any]:
    n_caught, n_spikes = caught(spikes, t, v)
    during = int(((t >= t0) & (t <= t1)).sum())
    return {
        "interval": interval,
        "loop_s": t1 - t0,
        "spikes": n_spikes,
        "caught": n_caught,
        "samples": during,
        "expected": (t1 - t0) / interval,
        "monitor_cpu_pct": cpu_s / (t1 - t0) * 100,
        "monitor_mib": rss / MIB,
        "step_us": step_us,
        "monitor": monitor,
        "step_call": step_call,
    }


PHASES = {"wandb": phase_wandb, "mlflow": phase_mlflow, "tunescope": phase_tunescope}
DAYS = {"wandb": day_wandb, "mlflow": day_mlflow, "tunescope": day_tunescope}


def child(tool: str, what: str, interval: float | None, seconds: float) -> int:
    with tempfile.TemporaryDirectory(prefix=f"bench-peers-{tool}-") as tmp:
        d = Path(tmp)
        out = DAYS[tool](d) if what == "day" else PHASES[tool](interval, seconds, d)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def _run_child(tool: str, what: str, interval: float | None, seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", tool, what, str(interval or 0), str(seconds)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if p.returncode or line is None:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"bench-peers: {tool} {what} failed (exit {p.returncode})")
    out: dict[str, Any] = json.loads(line[7:])
    out["phase_s"] = time.perf_counter() - t
    print(f"  {tool:<9} {what:<7} done in {out['phase_s']:.0f} s", flush=True)
    return out


# ---------------------------------------------------------------------------- the table
def _versions() -> dict[str, str]:
    return {n: metadata.version(n) for n in ("tunescope", "wandb", "mlflow", "numpy", "psutil")}


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def table(res: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    def row(name: str, fn: Callable[[str], str]) -> str:
        return f"| {name} | " + " | ".join(fn(t) for t in TOOLS) + " |"

    def ratio(key: str, what: str, fmt: str) -> Callable[[str], str]:
        def f(t: str) -> str:
            x = res[t][what][key]
            base = res["tunescope"][what][key]
            r = f" ({x / base:.1f}x)" if t != "tunescope" and base > 0 else ""
            return format(x, fmt) + r

        return f

    def spikes(what: str) -> Callable[[str], str]:
        return lambda t: f"{res[t][what]['caught']}/{res[t][what]['spikes']}"

    def kept(what: str) -> Callable[[str], str]:
        return lambda t: f"{res[t][what]['samples']}/{res[t][what]['expected']:.0f}"

    lines = [
        "| | W&B (offline) | MLflow (SQLite) | tunescope (SQLite) |",
        "|---|---|---|---|",
        row("default sampling interval", lambda t: f"{res[t]['default']['interval']:g} s"),
        row(f"{SPIKE_MIB} MiB × {SPIKE_S} s spikes caught, default interval", spikes("default")),
        row("spikes caught, 1 s interval", spikes("fast")),
        row("samples kept / expected, default interval", kept("default")),
        row("samples kept / expected, 1 s interval", kept("fast")),
        row(
            "monitor CPU, % of one core, default interval",
            ratio("monitor_cpu_pct", "default", ".2f"),
        ),
        row("monitor CPU, % of one core, 1 s interval", ratio("monitor_cpu_pct", "fast", ".2f")),
        row("monitor memory, MiB, default interval", ratio("monitor_mib", "default", ".1f")),
        row("monitor memory, MiB, 1 s interval", ratio("monitor_mib", "fast", ".1f")),
        row("step call, µs per call", ratio("step_us", "fast", ".2f")),
        row(
            "bytes on disk per point, 24 h 1 Hz series", ratio("day_bytes_per_point", "day", ".2f")
        ),
        row("writing that series, s", ratio("day_write_s", "day", ".1f")),
        row("1,000-point window of it (min/max/mean), ms", ratio("day_window_ms", "day", ".1f")),
        row(
            "1,000 sampled points of it (no min/max), ms",
            lambda t: (
                f"{res[t]['day']['day_sampled_ms']:.1f}"
                if "day_sampled_ms" in res[t]["day"]
                else "n/a"
            ),
        ),
    ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--default-s",
        type=float,
        default=50.0,
        help="loop seconds per tool at its default interval",
    )
    ap.add_argument(
        "--fast-s", type=float, default=25.0, help="loop seconds per tool at a 1 s interval"
    )
    ap.add_argument(
        "--write-docs", action="store_true", help=f"write {DOC.relative_to(HERE.parent)}"
    )
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        tool, what, interval, seconds = args.child
        return child(tool, what, float(interval) or None, float(seconds))
    started = time.perf_counter()
    res: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in TOOLS}
    for t in TOOLS:
        res[t]["default"] = _run_child(t, "default", None, args.default_s)
    for t in TOOLS:
        res[t]["fast"] = _run_child(t, "fast", 1.0, args.fast_s)
    for t in TOOLS:
        res[t]["day"] = _run_child(t, "day", None, 0)
    total = time.perf_counter() - started
    lines = table(res)
    print("\n".join(lines))
    print(f"(whole run {total:.0f} s)")
    if args.write_docs:
        DOC.write_text(_doc(res, lines, total), encoding="utf-8")
        print(f"wrote {DOC}")
    return 0


def _doc(res: dict[str, dict[str, dict[str, Any]]], lines: list[str], total: float) -> str:
    versions = ", ".join(f"{name} {ver}" for name, ver in _versions().items())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{_cpu_model()}, {psutil.cpu_count()} logical cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )
    how = "\n".join(
        f"- {name}: {res[t]['day']['day_how']}."
        for t, name in zip(TOOLS, ("W&B", "MLflow", "tunescope"), strict=True)
    )
    odds = ", ".join(
        f"{min(1.0, (SPIKE_S + LAG_S) / T):.0%} at {T:g} s"
        for T in sorted({1.0, *(res[t]["default"]["interval"] for t in TOOLS)})
    )
    mon = "\n".join(
        f"- {name}: {res[t]['fast']['monitor']}; step call `{res[t]['fast']['step_call']}`."
        for t, name in zip(TOOLS, ("W&B", "MLflow", "tunescope"), strict=True)
    )
    return f"""# Performance beside W&B and MLflow

Generated by `make bench-peers` (`bench/bench_peers.py --write-docs`, in its own venv
`bench/.venv-peers`); do not edit by hand. One run, every tool side by side on the same
machine; the machine is shared and noisy, so read the figures as ratios between the tools
measured in this run, not as absolute costs.

- Machine: {machine}
- Versions: {versions}
- Date: {when}; whole run {total:.0f} s

## The workload

The same loop under each tool, in a fresh process per tool and interval: a step every
{STEP_S * 1000:.0f} ms, busy {DUTY:.0%} of it, marked with the tool's step call; every
{SPIKE_EVERY_S:g} s a {SPIKE_MIB} MiB array is written and held {SPIKE_S} s. Each tool's
system monitor ran at its default interval ({res["wandb"]["default"]["loop_s"]:.0f} s of
loop) and at 1 s ({res["wandb"]["fast"]["loop_s"]:.0f} s of loop). W&B ran offline
(`WANDB_MODE=offline`), MLflow with `log_system_metrics=True` on a SQLite store, tunescope
with `tunescope.record` on SQLite.

## Results

{chr(10).join(lines)}

Ratios in brackets are to tunescope's figure in the same run. Spike counts are small and
vary from run to run: one sample every T s lands inside a {SPIKE_S} s spike, or up to
{LAG_S} s after it, with probability at most about {SPIKE_S + LAG_S:g}/T ({odds}).

## How each figure was read

Spikes and samples come from each tool's own recorded data, read back after the loop: W&B's
`proc.memory.rssMB` from the offline `.wandb` file (records parsed with `wandb.proto`),
MLflow's `system/system_memory_usage_megabytes` through `MlflowClient().get_metric_history`
(MLflow records the host's memory, so other processes on the machine add noise), tunescope's
`cpu.mem` through `Store.read_samples`. A spike is caught when a sample timed inside it (up
to {LAG_S} s after its end) is at least half the spike's size above the median of the nearby
samples outside spikes. Samples kept: samples timed inside the loop against loop time /
interval.

Monitor cost, over the loop:
{mon}

The step call's cost is the median per call over batches of calls, in the training thread,
with the monitor running. MLflow's `log_metric` writes to the store synchronously.
tunescope's `trial.optimizer_step(step)` (what an integration calls per optimizer step; with
torch, steps are recorded by a hook without any call) cost
{res["tunescope"]["fast"]["optimizer_step_us"]:.2f} µs per call in the same run.

The 24 h series: 86,400 points 1 s apart written once through each tool's API; bytes added
on disk per point; the median time to read it as a 1,000-point window:
{how}

"n/a" in the sampled-read row: W&B's sampled history (`Run.history(samples=…)`) is an API of
the W&B server, which an offline run does not have; tunescope's window is already the
1,000-point read, and it keeps each bucket's min, max, mean and count.
"""


if __name__ == "__main__":
    sys.exit(main())
