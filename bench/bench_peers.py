"""tunescope beside W&B (offline) and MLflow (system metrics), on three training workloads, in
interleaved rounds (``make bench-peers``, in its own venv bench/.venv-peers).

Workloads (each in a fresh process per tool and round; a step every STEP_S, marked with the
tool's step call):

* **A**: a loop busy DUTY of each step that every SPIKE_EVERY_S fills SPIKE_MIB MiB (numpy,
  every page written) and holds it SPIKE_S seconds;
* **B**: a torch CPU training loop (an MLP, SGD, one thread; ~330 MB of process memory, its
  allocator taking and giving back pages every step);
* **F**: forked workers: a torch DataLoader with 4 workers (fork) over a SHARED_MIB MiB tensor
  the parent holds (the workers share its pages), batches consumed by the loop.

Tools, each at a 1 s interval: W&B offline (``x_stats_sampling_interval=1``), MLflow with
``log_system_metrics=True`` (sampling interval 1 s) on a SQLite store, and tunescope as it runs
on a script: ``tunescope run --interval 1 -- python ...`` (its wrapper and sampler processes),
the step marked through ``tunescope.record.current_trial()``; also tunescope at 0.1 s on B. Each
round runs every (workload, tool) once, the tools' order turned by one each round, so the
machine's load falls on all alike; figures are min / median / max over the rounds.

Per phase, measured from inside the training process during the loop:

* monitor CPU (% of one core): the CPU time of the processes the tool runs (W&B: wandb-core
  and its children; tunescope: its sampler and ``tunescope run``'s wrapper; MLflow: none),
  and apart, that of the threads it started in the training process (``/proc/self/task``);
* the step call, one call at a time inside the loop (median and p99 of each call, µs), and
  batched after the loop (median µs per call over batches): only the statement a user writes
  lies between the two clock reads (:class:`StepCall`); beside it, in the same place, the
  floors any call pays there (:data:`FLOORS`: an empty call, and a C builtin called with
  ``trial.log``'s keywords);
* samples kept: the tool's recorded memory samples timed inside the loop over the ticks a
  sampler keeping its interval exactly records there (:func:`kept_share`; 1.0 is none lost);
  spikes caught (A): a sample inside a spike (up to LAG_S after it) at least
  half the spike above the median of nearby samples outside spikes;
* memory against the truth (F): at 3 moments the bench reads every process's
  ``smaps_rollup`` (the training process and its workers) and compares the tool's sample
  nearest in time (within 1 s): tunescope's ``cpu.mem`` is the tree's PSS; W&B records the
  training process's RSS and MLflow the host's memory, which are not that quantity;
* the workload's memory (PSS of its tree, at the spike's height on A) and, on A, the CPU cost
  of one ``smaps_rollup`` read per GiB held;
* the machine's 1-minute load and busy share of its CPUs over the phase (``/proc/stat``).

Then once per tool, a 24 h series: 86,400 points 1 s apart written through each tool's API,
bytes on disk per point, and the median time to read it back as a 1,000-point window.

Usage: python bench/bench_peers.py [--rounds 3] [--a-s 40] [--b-s 20] [--f-s 20] [--write-docs]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import platform
import resource
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
NAMES = {"wandb": "W&B", "mlflow": "MLflow", "tunescope": "tunescope"}
WORKLOADS = ("A", "B", "F")
SPIKE_MIB = 1536
SPIKE_S = 3.0
SPIKE_EVERY_S = 10.0
SHARED_MIB = 1024
WORKERS = 4
STEP_S = 0.1
DUTY = 0.5
LAG_S = 0.3
DAY = 86_400
T0 = 1_700_000_000.0
MIB = 2**20
TARGET_RATIO = 0.5
"""tunescope (sampler + wrapper) at 1 s against the cheaper of W&B and MLflow, on A and B."""
TARGET_FAST_PCT = 1.5
TARGET_KEPT = 0.99
TARGET_MEM_ERR = 0.03
TARGET_STEP_MED_US = 5.0
TARGET_STEP_P99_US = 50.0
RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


# ---------------------------------------------------------------------------- the workloads
def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def _pss(pid: int) -> float:
    """PSS of process ``pid`` in bytes, from its ``smaps_rollup``."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return float(line.split()[1]) * 1024
    return 0.0


def _switches() -> tuple[int, int]:
    """This thread's context switches so far: (involuntary: the OS gave its core to another
    thread, so a step call that took one was preempted, not slow of itself; voluntary: it
    waited, for a lock, the GIL, a page or I/O)."""
    ru = resource.getrusage(RUSAGE_THREAD)
    return ru.ru_nivcsw, ru.ru_nvcsw


def _nothing(step: int) -> None:
    """An empty step call: what any call costs in the loop, on this machine."""


FLOORS = {
    "empty": "_nothing(step)",
    "builtin": "dict(step=step, loss=1.0 / (step + 1))",
}
"""The floors timed in the loop where the tools' calls are: an empty Python call, and a C
builtin called with the same keywords as ``trial.log`` (what any call of that shape costs)."""


class StepCall:
    """The step call ``stmt``, written as a user writes it in the loop (``step`` the step;
    ``names`` what it uses), compiled three ways so that only the statement is timed, no
    frame of the bench's: :meth:`timed` runs it between two clock reads and returns the
    nanoseconds, :meth:`call` runs it untimed, :meth:`batched` runs it ``n`` times between
    two clock reads and returns the nanoseconds."""

    def __init__(self, stmt: str, names: dict[str, Any]) -> None:
        ns: dict[str, Any] = {"_clock": time.perf_counter_ns, "_nothing": _nothing, **names}
        exec(  # the bench's own statements, above and in the phases
            f"def timed(step):\n    t = _clock()\n    {stmt}\n    return _clock() - t\n"
            f"def call(step):\n    {stmt}\n"
            "def batched(first, n):\n    t = _clock()\n"
            f"    for step in range(first, first + n):\n        {stmt}\n"
            "    return _clock() - t\n",
            ns,
        )
        self.timed: Callable[[int], int] = ns["timed"]
        self.call: Callable[[int], None] = ns["call"]
        self.batched: Callable[[int, int], int] = ns["batched"]


class Loop:
    """The training loop's frame: a step every STEP_S; the tool's step call ``stmt`` made
    once a step, timed on odd steps; on even steps one of :data:`FLOORS` is timed in the same
    place (after the body, caches cold) before the call is made untimed; ``body(step)`` does
    the workload's work."""

    def __init__(self, stmt: str, names: dict[str, Any]) -> None:
        self.step = StepCall(stmt, names)
        self.call_ns: list[int] = []
        self.call_preempted: list[bool] = []
        self.call_waited: list[bool] = []
        self.floor_ns: dict[str, list[int]] = {k: [] for k in FLOORS}
        self.truth: list[tuple[float, float]] = []  # (epoch, PSS of the tree)
        self.spikes: list[tuple[float, float]] = []
        self.workload_bytes = 0.0
        self.pss_ms_per_gib: list[float] = []
        self.t0 = self.t1 = 0.0
        self.on_start: Callable[[], None] = lambda: None
        self.on_end: Callable[[], None] = lambda: None

    def run(
        self, seconds: float, body: Callable[[int], None], tree: Callable[[], list[int]]
    ) -> None:
        """The loop, once the workload is set up (imports, model, workers): only it is
        measured, between ``on_start`` and ``on_end``."""
        floors = [(self.floor_ns[k], StepCall(f, {}).timed) for k, f in FLOORS.items()]
        self.step.call(0)  # the tool's first call sets its client up: not one of the loop's
        self.on_start()
        self.t0 = time.time()
        end = self.t0 + seconds
        checks = [self.t0 + seconds * f for f in (0.25, 0.5, 0.75)]
        step = 1
        while time.time() < end:
            t_step = time.perf_counter()
            body(step)
            switched = _switches()  # outside the timed call, around both alike
            if step % 2:
                self.call_ns.append(self.step.timed(step))
                now = _switches()
                self.call_preempted.append(now[0] > switched[0])
                self.call_waited.append(now[1] > switched[1])
            else:
                kept, timed = floors[(step // 2) % len(floors)]
                kept.append(timed(step))
                _switches()
                self.step.call(step)
            step += 1
            if checks and time.time() >= checks[0]:
                checks.pop(0)
                now = time.time()
                total = sum(_pss(p) for p in tree())
                self.truth.append((now, total))
                self.workload_bytes = max(self.workload_bytes, total)
            left = STEP_S - (time.perf_counter() - t_step)
            if left > 0:
                time.sleep(left)
        self.t1 = time.time()
        self.on_end()


def workload_a(loop: Loop, seconds: float) -> None:
    held: list[np.ndarray] = []
    state = {"since": 0.0, "next": time.time() + SPIKE_EVERY_S / 2, "end": time.time() + seconds}

    def body(step: int) -> None:
        now = time.time()
        if not held and now >= state["next"] and now + SPIKE_S + 0.5 < state["end"]:
            held.append(np.ones(SPIKE_MIB * MIB // 8))  # written: every page touched
            state["since"] = time.time()
            state["next"] += SPIKE_EVERY_S
            t = time.thread_time()
            pss = _pss(os.getpid())
            loop.pss_ms_per_gib.append((time.thread_time() - t) * 1000 / (pss / 2**30))
            loop.workload_bytes = max(loop.workload_bytes, pss)
        elif held and now - state["since"] >= SPIKE_S:
            loop.spikes.append((state["since"], time.time()))
            held.clear()
        _busy(STEP_S * DUTY)

    loop.run(seconds, body, lambda: [os.getpid()])
    if held:
        loop.spikes.append((state["since"], time.time()))


def workload_b(loop: Loop, seconds: float) -> None:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024)
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def body(step: int) -> None:
        x = torch.randn(64, 1024)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    loop.run(seconds, body, lambda: [os.getpid()])


def workload_f(loop: Loop, seconds: float) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    data = torch.ones(SHARED_MIB * MIB // 4096, 1024)  # rows of 4 KiB, every page written
    dl = DataLoader(
        TensorDataset(data),
        batch_size=64,
        shuffle=True,
        num_workers=WORKERS,
        multiprocessing_context="fork",
        persistent_workers=True,
    )
    it = iter(dl)
    next(it)  # the workers are up
    pids = [os.getpid(), *(w.pid for w in it._workers)]  # type: ignore[attr-defined]

    def body(step: int) -> None:
        nonlocal it
        try:
            (batch,) = next(it)
        except StopIteration:
            it = iter(dl)
            (batch,) = next(it)
        float(batch.sum())
        _busy(STEP_S * DUTY / 2)

    loop.run(seconds, body, lambda: pids)


WORK = {"A": workload_a, "B": workload_b, "F": workload_f}


def caught(
    spikes: list[tuple[float, float]], t: np.ndarray, v_bytes: np.ndarray
) -> tuple[int, int]:
    """(spikes caught, spikes) by the samples (t epoch s, v bytes): see the module doc."""
    inside = np.zeros(len(t), dtype=bool)
    for a, b in spikes:
        inside |= (t >= a - 1.0) & (t <= b + 1.0)
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


def kept_share(t: np.ndarray, t0: float, t1: float, interval: float) -> float:
    """Samples timed inside the loop [t0, t1] over the ticks a sampler keeping ``interval``
    exactly records there: from its first sample in the loop, that one and one per whole
    interval to t1, and before it the whole intervals it missed at the start. A perfect
    sampler scores 1.0 whatever the loop's length and its phase, and each sample lost lowers
    the score by one tick. (Samples over ``(t1 - t0) / interval``, as before, scored a
    perfect sampler at most floor(L / P) / (L / P): 0.983 on a 20.35 s loop at 1 s.)"""
    inside = np.sort(t[(t >= t0) & (t <= t1)])
    if not len(inside):
        return 0.0
    s0 = float(inside[0])
    eps = 1e-6  # times are stored to the millisecond
    ticks = math.floor((s0 - t0) / interval + eps) + 1 + math.floor((t1 - s0) / interval + eps)
    return len(inside) / ticks


# ---------------------------------------------------------------------------- helpers
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


def _per_call_us(call: StepCall, n: int, batch: int) -> float:
    """Median µs per call over batches of ``batch`` calls, ``n`` calls in all (steps from
    1,000,000 on: none of the loop's)."""
    per = [call.batched(1_000_000 + i, batch) / batch / 1000 for i in range(0, n, batch)]
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


# ---------------------------------------------------------------------------- measuring
def _all_threads_cpu() -> dict[int, float]:
    return {t: _thread_cpu(t) for t in _threads_now()}


def _measure(
    work: str,
    seconds: float,
    stmt: str,
    names: dict[str, Any],
    procs: list[psutil.Process],
    before: set[int],
    batch: tuple[int, int],
) -> dict[str, Any]:
    """Run workload ``work`` with ``stmt`` as its step call (see :class:`StepCall`); the CPU
    of ``procs`` and of the threads started since ``before`` over the loop, the step call's
    cost."""
    loop = Loop(stmt, names)
    c0: list[float] = []
    th0: dict[int, float] = {}
    cpu: list[float] = []
    threads = 0.0

    def start() -> None:
        c0[:] = [_tree_cpu([p]) for p in procs]
        th0.update(_all_threads_cpu())

    def end() -> None:
        nonlocal threads
        cpu[:] = [_tree_cpu([p]) - c for p, c in zip(procs, c0, strict=True)]
        threads = sum(_thread_cpu(t) - th0.get(t, 0.0) for t in _threads_since(before))

    loop.on_start, loop.on_end = start, end
    WORK[work](loop, seconds)
    t0, t1 = loop.t0, loop.t1
    calls = np.array(loop.call_ns) / 1000.0
    slow = calls > TARGET_STEP_P99_US
    batched = _per_call_us(loop.step, batch[0], batch[1])
    return {
        "t0": t0,
        "t1": t1,
        "proc_cpu_s": cpu,
        "threads_cpu_s": threads,
        "monitor_mib": _tree_rss(procs) / MIB,
        "step_med_us": float(np.median(calls)),
        "step_p99_us": float(np.percentile(calls, 99)),
        "step_slow": int(slow.sum()),
        "step_slow_preempted": int((slow & np.array(loop.call_preempted, dtype=bool)).sum()),
        "step_slow_waited": int((slow & np.array(loop.call_waited, dtype=bool)).sum()),
        "step_empty_med_us": float(np.median(np.array(loop.floor_ns["empty"]) / 1000.0)),
        "step_builtin_med_us": float(np.median(np.array(loop.floor_ns["builtin"]) / 1000.0)),
        "step_batched_us": batched,
        "truth": loop.truth,
        "spikes": loop.spikes,
        "workload_mib": loop.workload_bytes / MIB,
        "pss_ms_per_gib": loop.pss_ms_per_gib,
    }


def phase_wandb(work: str, interval: float, seconds: float, d: Path) -> dict[str, Any]:
    import wandb

    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    before = _threads_now()
    run = wandb.init(
        project="bench-peers",
        dir=str(d),
        settings=wandb.Settings(x_stats_sampling_interval=interval),
    )
    me = os.getpid()
    monitor = [p for p in _tree(me) if p.pid != me]
    out = _measure(
        work, seconds, 'wandb.log({"loss": 1.0 / (step + 1)}, step=step)', {"wandb": wandb},
        monitor, before, (5000, 100),
    )  # fmt: skip
    run.finish()
    t, v = [], []
    for rec in _wandb_records(_wandb_file(d)):
        if rec.WhichOneof("record_type") == "stats":
            items = {i.key: i.value_json for i in rec.stats.item}
            if "proc.memory.rssMB" in items:
                t.append(rec.stats.timestamp.seconds + rec.stats.timestamp.nanos / 1e9)
                v.append(float(items["proc.memory.rssMB"]) * MIB)
    out.update(t=t, v=v, wrapper_cpu_s=0.0)
    return out


def phase_mlflow(work: str, interval: float, seconds: float, d: Path) -> dict[str, Any]:
    import mlflow
    from mlflow import MlflowClient

    uri = f"sqlite:///{d}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    mlflow.set_system_metrics_sampling_interval(interval)
    mlflow.set_experiment("bench-peers")
    before = _threads_now()
    with mlflow.start_run(log_system_metrics=True) as run:
        assert any(t.name == "SystemMetricsMonitor" for t in threading.enumerate())
        out = _measure(
            work, seconds, 'mlflow.log_metric("loss", 1.0 / (step + 1), step=step)',
            {"mlflow": mlflow}, [], before, (60, 10),
        )  # fmt: skip
    hist = MlflowClient(uri).get_metric_history(
        run.info.run_id, "system/system_memory_usage_megabytes"
    )
    out.update(
        t=[m.timestamp / 1000 for m in hist], v=[m.value * 1e6 for m in hist], wrapper_cpu_s=0.0
    )
    return out


def phase_tunescope(work: str, interval: float, seconds: float, d: Path) -> dict[str, Any]:
    """Inside ``tunescope run``: the sampler is this process's parent, the wrapper its."""
    import tunescope.record as ts
    from tunescope._protocol import MODULE

    sampler = psutil.Process(os.getppid())
    if MODULE not in " ".join(sampler.cmdline()):
        raise RuntimeError("not started by tunescope run (its sampler is not our parent)")
    wrapper = sampler.parent()
    assert wrapper is not None
    before = _threads_now()
    trial = ts.current_trial()
    assert trial is not None
    out = _measure(
        work, seconds, "trial.log(step=step, loss=1.0 / (step + 1))", {"trial": trial},
        [sampler, wrapper], before, (20_000, 1000),
    )  # fmt: skip
    out["wrapper_cpu_s"] = out["proc_cpu_s"][1]
    out["sampler_pid"] = sampler.pid
    return out


PHASES = {"wandb": phase_wandb, "mlflow": phase_mlflow, "tunescope": phase_tunescope}
DAYS = {"wandb": day_wandb, "mlflow": day_mlflow, "tunescope": day_tunescope}


def child(tool: str, what: str, interval: float, seconds: float) -> int:
    with tempfile.TemporaryDirectory(prefix=f"bench-peers-{tool}-") as tmp:
        d = Path(tmp)
        out = DAYS[tool](d) if what == "day" else PHASES[tool](what, interval, seconds, d)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def _host_busy() -> tuple[float, float]:
    """(all CPU time, idle + iowait) of the host from /proc/stat, in ticks."""
    f = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(f), f[3] + f[4]


def _tunescope_samples(db: Path, sampler_pid: int) -> tuple[list[float], list[float]]:
    """``cpu.mem`` of the one trial in ``db``, once its sampler is done recording."""
    from tunescope.store import open_store

    end = time.monotonic() + 60
    while psutil.pid_exists(sampler_pid) and time.monotonic() < end:
        time.sleep(0.2)
    with open_store(db) as st:
        (trial,) = st.list_trials(st.get_run("bench-peers").id)
        (series,) = st.list_series(trial.id, "cpu.mem")
        t, v = st.read_samples(series.id)
    return [float(x) for x in t], [float(x) for x in v]


def _run_child(tool: str, what: str, interval: float, seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", tool, what, str(interval), str(seconds)]
    with tempfile.TemporaryDirectory(prefix="bench-peers-run-") as tmp:
        db = Path(tmp) / "tunescope.db"
        if tool == "tunescope" and what != "day":
            cmd = [
                sys.executable, "-m", "tunescope", "run", "--store", str(db), "--run",
                "bench-peers", "--interval", repr(interval), "--", *cmd,
            ]  # fmt: skip
        load = os.getloadavg()[0]
        h0 = _host_busy()
        t = time.perf_counter()
        env = dict(os.environ, TUNESCOPE_QUIET="1")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        h1 = _host_busy()
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if p.returncode or line is None:
            sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
            raise SystemExit(f"bench-peers: {tool} {what} failed (exit {p.returncode})")
        out: dict[str, Any] = json.loads(line[7:])
        if tool == "tunescope" and what != "day":
            out["t"], out["v"] = _tunescope_samples(db, out["sampler_pid"])
    out["phase_s"] = time.perf_counter() - t
    total, idle = h1[0] - h0[0], h1[1] - h0[1]
    out["load1"] = load
    out["host_busy_pct"] = (total - idle) / total * 100 if total > 0 else 0.0
    return out if what == "day" else _result(out, interval)


def _result(raw: dict[str, Any], interval: float) -> dict[str, Any]:
    t, v = np.array(raw["t"], dtype=float), np.array(raw["v"], dtype=float)
    t0, t1 = raw["t0"], raw["t1"]
    loop_s = t1 - t0
    n_caught, n_spikes = caught([tuple(s) for s in raw["spikes"]], t, v)
    errs = []
    for when, truth in raw["truth"]:
        if len(t):
            i = int(np.argmin(np.abs(t - when)))
            if abs(t[i] - when) <= 1.0 and truth > 0:
                errs.append(abs(v[i] - truth) / truth)
    procs = sum(raw["proc_cpu_s"])
    return {
        "interval": interval,
        "loop_s": loop_s,
        "monitor_pct": procs / loop_s * 100,
        "wrapper_pct": raw["wrapper_cpu_s"] / loop_s * 100,
        "threads_pct": raw["threads_cpu_s"] / loop_s * 100,
        "total_pct": (procs + raw["threads_cpu_s"]) / loop_s * 100,
        "kept": kept_share(t, t0, t1, interval),
        "spikes": n_spikes,
        "caught": n_caught,
        "mem_err": max(errs) if errs else None,
        "step_med_us": raw["step_med_us"],
        "step_p99_us": raw["step_p99_us"],
        "step_slow": raw["step_slow"],
        "step_slow_preempted": raw["step_slow_preempted"],
        "step_slow_waited": raw["step_slow_waited"],
        "step_empty_med_us": raw["step_empty_med_us"],
        "step_builtin_med_us": raw["step_builtin_med_us"],
        "step_batched_us": raw["step_batched_us"],
        "monitor_mib": raw["monitor_mib"],
        "workload_mib": raw["workload_mib"],
        "pss_ms_per_gib": raw["pss_ms_per_gib"],
        "load1": raw["load1"],
        "host_busy_pct": raw["host_busy_pct"],
        "phase_s": raw["phase_s"],
    }


def _versions() -> dict[str, str]:
    out = {}
    for name in ("tunescope", "wandb", "mlflow", "torch", "numpy", "psutil"):
        for dist in (name, f"{name}-skinny"):  # the main venv has mlflow-skinny
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


# ---------------------------------------------------------------------------- the table
Res = dict[tuple[str, str, float], list[dict[str, Any]]]


def _stats(xs: list[float], fmt: str) -> str:
    if not xs:
        return "n/a"
    lo, med, hi = min(xs), statistics.median(xs), max(xs)
    return f"{format(med, fmt)} ({format(lo, fmt)}–{format(hi, fmt)})"


def _med(res: Res, tool: str, work: str, key: str, interval: float = 1.0) -> float:
    return statistics.median(r[key] for r in res[(tool, work, interval)])


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def table(res: Res) -> tuple[list[str], list[str]]:
    """(the markdown table, the targets with their verdicts)."""
    lines = [
        "| workload: figure | W&B (offline) | MLflow | tunescope (`tunescope run`) | target |",
        "|---|---|---|---|---|",
    ]
    verdicts: list[str] = []

    def row(work: str, name: str, fn: Callable[[str], str], target: str = "") -> None:
        cells = " | ".join(fn(t) for t in TOOLS)
        lines.append(f"| {work}: {name} | {cells} | {target or '–'} |")

    def each(work: str, key: str, fmt: str, interval: float = 1.0) -> Callable[[str], str]:
        return lambda t: _stats([r[key] for r in res[(t, work, interval)]], fmt)

    for work in WORKLOADS:
        cheaper = min(_med(res, "wandb", work, "total_pct"), _med(res, "mlflow", work, "total_pct"))
        ours = _med(res, "tunescope", work, "total_pct")
        mem = statistics.median(r["workload_mib"] for t in TOOLS for r in res[(t, work, 1.0)])
        row(work, "workload memory (PSS of its tree), MiB", lambda t, w=work: _stats(
            [r["workload_mib"] for r in res[(t, w, 1.0)]], ".0f"))  # fmt: skip
        row(work, "monitor processes, % of a core", each(work, "monitor_pct", ".2f"))
        row(
            work,
            "of which `tunescope run`'s wrapper, %",
            lambda t, w=work: (
                _stats([r["wrapper_pct"] for r in res[(t, w, 1.0)]], ".3f")
                if t == "tunescope"
                else "–"
            ),
        )
        row(work, "monitor threads in the training process, %", each(work, "threads_pct", ".2f"))
        target = ""
        if work in ("A", "B"):
            ok = ours <= TARGET_RATIO * cheaper
            bound = TARGET_RATIO * cheaper
            target = f"tunescope ≤ {TARGET_RATIO:g}× the cheaper peer ({bound:.2f}): {_verdict(ok)}"
            verdicts.append(
                f"{work}: tunescope {ours:.2f}% ≤ {TARGET_RATIO * cheaper:.2f}% — {_verdict(ok)}"
            )
        row(work, "monitor total, % of a core", each(work, "total_pct", ".2f"), target)
        kept = min(r["kept"] for r in res[("tunescope", work, 1.0)])
        ok = kept >= TARGET_KEPT
        verdicts.append(
            f"{work}: samples kept per second, least round {kept:.3f} ≥ {TARGET_KEPT} — "
            + _verdict(ok)
        )
        row(
            work,
            "memory samples kept per second (min over rounds)",
            lambda t, w=work: format(min(r["kept"] for r in res[(t, w, 1.0)]), ".3f"),
            f"≥ {TARGET_KEPT}: {_verdict(ok)}",
        )
        if work == "A":
            got = sum(r["caught"] for r in res[("tunescope", work, 1.0)])
            n = sum(r["spikes"] for r in res[("tunescope", work, 1.0)])
            ok = n > 0 and got == n
            verdicts.append(f"A: spikes caught {got}/{n} — {_verdict(ok)}")
            row(
                work,
                f"{SPIKE_MIB} MiB × {SPIKE_S:g} s spikes caught (all rounds)",
                lambda t: (
                    f"{sum(r['caught'] for r in res[(t, 'A', 1.0)])}/"
                    f"{sum(r['spikes'] for r in res[(t, 'A', 1.0)])}"
                ),
                f"all: {_verdict(ok)}",
            )
        if work == "F":
            errs = [r["mem_err"] for r in res[("tunescope", work, 1.0)] if r["mem_err"] is not None]
            ok = bool(errs) and max(errs) <= TARGET_MEM_ERR
            verdicts.append(
                f"F: memory off the PSS truth by at most {max(errs, default=float('nan')):.1%}"
                f" — {_verdict(ok)}"
            )
            row(
                work,
                "recorded memory off the tree's PSS, max over rounds",
                lambda t: format(
                    max(
                        (r["mem_err"] for r in res[(t, "F", 1.0)] if r["mem_err"] is not None),
                        default=float("nan"),
                    ),
                    ".1%",
                ),
                f"≤ {TARGET_MEM_ERR:.0%}: {_verdict(ok)}",
            )
        med = _med(res, "tunescope", work, "step_med_us")
        p99 = _med(res, "tunescope", work, "step_p99_us")
        ok_med, ok_p99 = med <= TARGET_STEP_MED_US, p99 <= TARGET_STEP_P99_US
        verdicts.append(
            f"{work}: step call in the loop median {med:.2f} µs ≤ {TARGET_STEP_MED_US:g} — "
            f"{_verdict(ok_med)}, p99 {p99:.1f} µs ≤ {TARGET_STEP_P99_US:g} — {_verdict(ok_p99)}"
        )
        row(
            work,
            "step call in the loop, median µs",
            each(work, "step_med_us", ".2f"),
            f"≤ {TARGET_STEP_MED_US:g}: {_verdict(ok_med)}",
        )
        row(
            work,
            "step call in the loop, p99 µs",
            each(work, "step_p99_us", ".1f"),
            f"≤ {TARGET_STEP_P99_US:g}: {_verdict(ok_p99)}",
        )
        row(
            work,
            f"step calls over {TARGET_STEP_P99_US:g} µs: preempted by the OS / waited (a lock, "
            "the GIL, a page) / all (all rounds)",
            lambda t, w=work: "/".join(
                str(sum(r[k] for r in res[(t, w, 1.0)]))
                for k in ("step_slow_preempted", "step_slow_waited", "step_slow")
            ),
        )
        row(
            work,
            f"the floor: an empty call (`{FLOORS['empty']}`) in the same place, median µs",
            each(work, "step_empty_med_us", ".2f"),
        )
        row(
            work,
            f"the floor of a call with trial.log's keywords: the builtin `{FLOORS['builtin']}`"
            " in the same place, median µs",
            each(work, "step_builtin_med_us", ".2f"),
        )
        row(work, "step call batched, µs per call", each(work, "step_batched_us", ".2f"))
        row(work, "monitor processes' memory, MiB", each(work, "monitor_mib", ".1f"))
        del mem
    fast = [r["total_pct"] for r in res[("tunescope", "B", 0.1)]]
    ok = statistics.median(fast) <= TARGET_FAST_PCT
    verdicts.append(
        f"B at 0.1 s: tunescope {statistics.median(fast):.2f}% ≤ {TARGET_FAST_PCT:g}% — "
        + _verdict(ok)
    )
    lines.append(
        f"| B: tunescope at 0.1 s, monitor total, % of a core | – | – | {_stats(fast, '.2f')} "
        f"| ≤ {TARGET_FAST_PCT:g}: {_verdict(ok)} |"
    )
    return lines, verdicts


def day_table(day: dict[str, dict[str, Any]]) -> list[str]:
    def row(name: str, key: str, fmt: str) -> str:
        base = day["tunescope"][key]
        cells = []
        for t in TOOLS:
            x = day[t].get(key)
            if x is None:
                cells.append("n/a")
                continue
            r = f" ({x / base:.1f}x)" if t != "tunescope" and base > 0 else ""
            cells.append(format(x, fmt) + r)
        return f"| {name} | " + " | ".join(cells) + " | – |"

    return [
        "| 24 h series at 1 Hz | W&B (offline) | MLflow (SQLite) | tunescope (SQLite) | target |",
        "|---|---|---|---|---|",
        row("bytes on disk per point, 24 h 1 Hz series", "day_bytes_per_point", ".2f"),
        row("writing that series, s", "day_write_s", ".1f"),
        row("1,000-point window of it (min/max/mean), ms", "day_window_ms", ".1f"),
        f"| 1,000 sampled points of it (no min/max), ms | n/a | "
        f"{day['mlflow']['day_sampled_ms']:.1f} | n/a | – |",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (at least 3)")
    ap.add_argument("--a-s", type=float, default=40.0, help="loop seconds of workload A")
    ap.add_argument("--b-s", type=float, default=20.0, help="loop seconds of workload B")
    ap.add_argument("--f-s", type=float, default=20.0, help="loop seconds of workload F")
    ap.add_argument(
        "--write-docs", action="store_true", help=f"write {DOC.relative_to(HERE.parent)}"
    )
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        tool, what, interval, seconds = args.child
        return child(tool, what, float(interval), float(seconds))
    if args.rounds < 3:
        ap.error("--rounds: at least 3")
    least_a = SPIKE_EVERY_S / 2 + SPIKE_S + 1
    if args.a_s < least_a:
        ap.error(f"--a-s: at least {least_a:g} (A's first spike comes {SPIKE_EVERY_S / 2:g} s in)")
    seconds = {"A": args.a_s, "B": args.b_s, "F": args.f_s}
    started = time.perf_counter()
    res: Res = {}
    rounds: list[str] = []
    for r in range(args.rounds):
        order = TOOLS[r % len(TOOLS) :] + TOOLS[: r % len(TOOLS)]
        loads = []
        for work in WORKLOADS:
            runs = [(t, 1.0) for t in order] + ([("tunescope", 0.1)] if work == "B" else [])
            for tool, interval in runs:
                got = _run_child(tool, work, interval, seconds[work])
                res.setdefault((tool, work, interval), []).append(got)
                loads.append((got["load1"], got["host_busy_pct"]))
                print(
                    f"  round {r + 1} {work} {tool:<9} {interval:g} s: monitor "
                    f"{got['monitor_pct']:.2f}% + threads {got['threads_pct']:.2f}% of a core, "
                    f"kept {got['kept']:.3f}/s, step {got['step_med_us']:.2f}/"
                    f"{got['step_p99_us']:.1f} µs, "
                    f"load {got['load1']:.1f}, host busy {got['host_busy_pct']:.0f}% "
                    f"({got['phase_s']:.0f} s)",
                    flush=True,
                )
        rounds.append(
            f"round {r + 1} (order {', '.join(NAMES[t] for t in order)}): 1-min load "
            f"{min(x for x, _ in loads):.1f}–{max(x for x, _ in loads):.1f}, host CPU busy "
            f"{min(y for _, y in loads):.0f}–{max(y for _, y in loads):.0f}%"
        )
    day = {t: _run_child(t, "day", 1.0, 0) for t in TOOLS}
    total = time.perf_counter() - started
    lines, verdicts = table(res)
    pss = [x for t in TOOLS for r in res[(t, "A", 1.0)] for x in r["pss_ms_per_gib"]]
    print("\n".join(lines))
    print("\n".join(rounds))
    print("targets: " + "; ".join(verdicts))
    print(
        f"one smaps_rollup read: {statistics.median(pss):.1f} ms of CPU per GiB held "
        f"(median of {len(pss)})"
    )
    print("\n".join(day_table(day)))
    print(f"(whole run {total:.0f} s)")
    if args.write_docs:
        DOC.write_text(
            _doc(res, lines, rounds, verdicts, day, pss, total, seconds), encoding="utf-8"
        )
        print(f"wrote {DOC}")
    return 0


def _doc(
    res: Res,
    lines: list[str],
    rounds: list[str],
    verdicts: list[str],
    day: dict[str, dict[str, Any]],
    pss: list[float],
    total: float,
    seconds: dict[str, float],
) -> str:
    versions = ", ".join(f"{name} {ver}" for name, ver in _versions().items())
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = (
        f"{_cpu_model()}, {psutil.cpu_count()} logical cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}"
    )
    mem = {
        w: statistics.median(r["workload_mib"] for t in TOOLS for r in res[(t, w, 1.0)])
        for w in WORKLOADS
    }
    how = "\n".join(f"- {NAMES[t]}: {day[t]['day_how']}." for t in TOOLS)
    n = len(rounds)
    return f"""# Performance beside W&B and MLflow

Generated by `make bench-peers` (`bench/bench_peers.py --write-docs`, in its own venv
`bench/.venv-peers`); do not edit by hand. One run, every tool side by side on the same
machine, in {n} interleaved rounds (the tools' order turned each round); figures are the
median (min–max) over the rounds. The machine is shared and may be loaded (the load of each
round is below), so read the figures as ratios between the tools measured in this run.

- Machine: {machine}
- Versions: {versions}
- Date: {when}; whole run {total:.0f} s

## The workloads

Each in a fresh process per tool and round, a step every {STEP_S * 1000:.0f} ms marked with the
tool's step call:

- **A** ({seconds["A"]:g} s a round): busy {DUTY:.0%} of each step; every {SPIKE_EVERY_S:g} s a
  {SPIKE_MIB} MiB numpy array is written and held {SPIKE_S:g} s. Memory at a spike's height:
  {mem["A"]:.0f} MiB (PSS).
- **B** ({seconds["B"]:g} s a round): a torch CPU training loop (MLP 1024-2048-1024, batch 64,
  SGD, one thread); {mem["B"]:.0f} MiB (PSS), the allocator taking and giving back pages every
  step.
- **F** ({seconds["F"]:g} s a round): a torch DataLoader with {WORKERS} forked workers over a
  {SHARED_MIB} MiB tensor held by the training process (its pages shared with the workers);
  {mem["F"]:.0f} MiB (PSS of the tree, shared pages once).

Each tool's system monitor at 1 s: W&B offline (`x_stats_sampling_interval=1`), MLflow
`log_system_metrics=True` with a 1 s sampling interval on a SQLite store, tunescope as a script
runs under it, `tunescope run --interval 1 -- python ...` (the wrapper's and the sampler's
CPU both counted), its step through `tunescope.record.current_trial()`; tunescope also at 0.1 s
on B.

Reading PSS (`smaps_rollup`) cost {statistics.median(pss):.1f} ms of CPU per GiB held (median of
{len(pss)} reads at the height of A's spikes); tunescope's sampler reads it in full only when
its process tree changes, when its estimate from `statm` may have drifted 2%, and otherwise
within 0.1% of a core (see [metrics.md](metrics.md)).

## Results

{chr(10).join(lines)}

Targets: {"; ".join(verdicts)}.

Load per round:
{chr(10).join("- " + r for r in rounds)}

## How each figure was read

From inside the training process, over the loop: monitor processes' CPU (W&B: wandb-core and its
children; tunescope: the sampler and `tunescope run`'s wrapper; MLflow runs none) from psutil;
the threads each tool started in the training process (W&B's and tunescope's I/O threads,
MLflow's SystemMetricsMonitor) from `/proc/self/task/TID/stat`, shown apart. The step call
(`wandb.log`, `mlflow.log_metric`, `trial.log`) timed one call at a time in the loop (median,
p99) and, after the loop, in batches, with nothing but the statement as a user writes it between
the two clock reads; on the steps between, in the same place, an empty call and a C builtin
called with `trial.log`'s keywords (`{FLOORS["builtin"]}`) are timed the same way: the floors
any call, and any call of that shape, pays there. A timed call the OS preempted (this thread's
involuntary context switches, from `getrusage`, counted around it) is counted apart among those
over {TARGET_STEP_P99_US:g} µs, since its time is another process's, not the tool's; so is one
that waited (voluntary context switches: a lock, the GIL, a page fault served from disk), whose
time is the tool's or the workload's. Memory samples from each tool's own record, read back
after the loop: W&B's `proc.memory.rssMB` (the training process's RSS) from the offline `.wandb`
file, MLflow's `system/system_memory_usage_megabytes` (the host's memory, so other processes on
the machine add noise), tunescope's `cpu.mem` (PSS of the tree) from the store. On F, at 3
moments of each loop, every process of the tree's `smaps_rollup` is read (the truth) and
compared with the tool's sample nearest in time (within 1 s): W&B's and MLflow's quantities are
not the tree's PSS, so their error there says what they record, not how well. A spike is caught
when a sample inside it (up to {LAG_S} s after it) is at least half its size above the median of
nearby samples outside spikes. CPU times come in clock ticks (10 ms): over a loop of L seconds
one tick is 1/L % of a core, so short loops read coarse figures (a monitor that used no whole
tick reads 0.00).

## A 24 h series

86,400 points 1 s apart written once through each tool's API; bytes added on disk per point;
the median time to read it as a 1,000-point window:

{chr(10).join(day_table(day))}

{how}

"n/a" in the sampled-read row: W&B's sampled history (`Run.history(samples=…)`) is an API of
the W&B server, which an offline run does not have; tunescope's window is already the
1,000-point read, and it keeps each bucket's min, max, mean and count.
"""


if __name__ == "__main__":
    sys.exit(main())
