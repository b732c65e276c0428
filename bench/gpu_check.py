"""``make gpu-check``: tunescope's GPU metrics against known workloads on a real NVIDIA GPU.

    python bench/gpu_check.py [--gpu N] [--seconds S] [--out DIR] [--dry]

Each workload runs as a trial under ``tunescope run`` (the real sampler over NVML, into a
SQLite store) on one GPU, while this script polls ``nvidia-smi --query-gpu=...`` and records
the raw NVML readings (``tunescope.collect.record_nvml``):

* ``idle``: a CUDA context, then sleep: utilization and SM activity near 0;
* ``matmul``: bf16 8192 x 8192 matrix products: high utilization, SM and tensor activity;
* ``memcpy``: device-to-device copies of 2 GiB: high DRAM activity, no tensor activity;
* ``alloc10``: exactly 10 GiB allocated and held: GPU memory 10 GiB above ``idle``'s;
* ``pair-a`` + ``pair-b``: two processes on the GPU at once (a: matmuls all the time, holding
  2 GiB; b: matmuls half the time, holding 4 GiB): each trial's ``gpu.proc_util`` and
  ``gpu.mem`` are its own, and their utilizations add up to the device's.

The workloads report torch's own counters (``torch.cuda.memory_allocated``,
``torch.cuda.utilization``). Every check is printed as one row of a table (tunescope's value,
the reference, the tolerance); the exit code is 1 when a row is out of tolerance, 0 when all
pass. Means are taken over each workload's steady part (after its set-up, before its end).
The NVML recordings are written to ``DIR`` (default ``bench/out/gpu_check``) as replay files
(``"synthesized": false``): copy them into ``src/tunescope/collect/replay/`` to make them
fixtures. Without an NVIDIA GPU (no driver, or NVML sees none) it says so and exits 0.
``--dry`` prints the plan and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIB = 1024**3
MIB = 1024**2
STEADY_AFTER = 1.0
"""Seconds after a workload's set-up before its samples count (the first interval)."""
SMI_FIELDS = (
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "power.draw",
    "temperature.gpu",
    "clocks.sm",
)
"""The ``nvidia-smi --query-gpu`` fields polled, in order (MiB, W, °C, MHz, %)."""

WORKLOADS: dict[str, str] = {
    "idle": "a CUDA context, then sleep",
    "matmul": "bf16 8192 x 8192 matrix products",
    "memcpy": "device-to-device copies of 2 GiB",
    "alloc10": "exactly 10 GiB allocated and held",
    "pair-a": "matmuls all the time, holding 2 GiB (beside pair-b)",
    "pair-b": "matmuls half the time, holding 4 GiB (beside pair-a)",
}
EXTRA_BYTES = {"alloc10": 10 * GIB, "pair-a": 2 * GIB, "pair-b": 4 * GIB}
RUNS: tuple[tuple[str, ...], ...] = (("idle",), ("matmul",), ("memcpy",), ("alloc10",))
PAIR = ("pair-a", "pair-b")


# ---------------------------------------------------------------------- the workloads (child)
def workload(name: str, seconds: float, report: Path) -> int:
    """Run workload ``name`` on ``cuda:0`` (CUDA_VISIBLE_DEVICES picks the GPU) for
    ``seconds`` after its set-up; write what torch saw to ``report`` (JSON)."""
    import torch

    dev = torch.device("cuda")
    torch.empty(1, device=dev)  # the CUDA context
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    hold = None
    if name in EXTRA_BYTES:
        hold = torch.empty(EXTRA_BYTES[name], dtype=torch.uint8, device=dev)
        hold.fill_(1)  # touch every page
    allocated = torch.cuda.memory_allocated() - before
    if name in ("matmul", "pair-a", "pair-b"):
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    if name == "memcpy":
        src = torch.ones(2 * GIB, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
    torch.cuda.synchronize()
    utils: list[float] = []
    start = time.time()
    while time.time() < start + seconds:
        t = time.time()
        if name in ("matmul", "pair-a", "pair-b"):
            for _ in range(10):
                a @ b
        elif name == "memcpy":
            for _ in range(10):
                dst.copy_(src)
        else:
            time.sleep(0.2)
        torch.cuda.synchronize()
        if name == "pair-b":
            time.sleep(time.time() - t)  # as long idle as busy: about half the time
        try:
            utils.append(float(torch.cuda.utilization()))
        except Exception:  # torch reads it through pynvml; without it there is none
            pass
    end = time.time()
    report.write_text(
        json.dumps(
            {
                "workload": name,
                "pid": os.getpid(),
                "steady_from": start + STEADY_AFTER,
                "steady_to": end,
                "allocated_bytes": allocated,
                "torch_util_mean": sum(utils) / len(utils) if utils else None,
            }
        )
    )
    del hold
    return 0


# ---------------------------------------------------------------------- nvidia-smi
def parse_smi(text: str) -> list[dict[str, float]]:
    """Rows of ``nvidia-smi --query-gpu=timestamp,<SMI_FIELDS> --format=csv,noheader,nounits``
    as {field: value}, with ``t`` (epoch seconds, this machine's clock when polled) added by
    the caller; fields nvidia-smi reports as ``[N/A]`` are left out."""
    rows = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        row: dict[str, float] = {}
        for key, cell in zip(SMI_FIELDS, cells, strict=False):
            try:
                row[key] = float(cell)
            except ValueError:
                continue  # [N/A], [Not Supported]
        rows.append(row)
    return rows


class SmiPoller:
    """Polls nvidia-smi for one GPU once a second in a thread; ``rows`` with ``t``."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self.rows: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        cmd = [
            "nvidia-smi",
            f"--id={self.gpu}",
            "--query-gpu=" + ",".join(SMI_FIELDS),
            "--format=csv,noheader,nounits",
        ]
        while not self._stop.is_set():
            t = time.time()
            out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
            for row in parse_smi(out):
                row["t"] = t
                self.rows.append(row)
            self._stop.wait(max(0.0, 1.0 - (time.time() - t)))

    def __enter__(self) -> SmiPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------- checks
@dataclass(frozen=True)
class Row:
    """One check: tunescope's value, the reference it is held to, and the verdict."""

    workload: str
    what: str
    tunescope: float | None
    reference: float | None
    source: str
    tolerance: str
    ok: bool


def close(value: float | None, ref: float | None, *, absolute: float, relative: float = 0) -> bool:
    """``value`` within ``absolute`` or ``relative`` (a share of ``ref``) of ``ref``; False
    when either is missing."""
    if value is None or ref is None:
        return False
    return abs(value - ref) <= max(absolute, relative * abs(ref))


def near(
    workload: str,
    what: str,
    value: float | None,
    ref: float | None,
    source: str,
    absolute: float,
    relative: float = 0.0,
    unit: str = "",
) -> Row:
    """A row: ``value`` against ``ref`` (from ``source``) within the tolerance."""
    tol = f"±{absolute:g}{unit}" + (f" or ±{relative:.0%}" if relative else "")
    ok = close(value, ref, absolute=absolute, relative=relative)
    return Row(workload, what, value, ref, source, tol, ok)


def bound(
    workload: str, what: str, value: float | None, limit: float, above: bool, unit: str = ""
) -> Row:
    """A row: ``value`` at least (``above``) or at most ``limit``; a missing value fails."""
    ok = value is not None and (value >= limit if above else value <= limit)
    tol = f"{'>=' if above else '<='} {limit:g}{unit}"
    return Row(workload, what, value, limit, "expected", tol, ok)


@dataclass
class Result:
    """What one workload's trial showed: tunescope's steady means per metric (of the GPU
    checked), nvidia-smi's steady means per field, and the workload's own report."""

    name: str
    metrics: dict[str, float]
    smi: dict[str, float]
    report: dict[str, Any]


def checks(results: dict[str, Result], gpm: bool) -> list[Row]:
    """Every check of the plan on what the workloads showed (module doc). Checks of GPM
    metrics (SM, tensor and DRAM activity) only where the GPU has GPM."""
    rows: list[Row] = []
    for name, r in results.items():
        m, s = r.metrics, r.smi
        rows += [
            near(
                name,
                "gpu.util %",
                m.get("gpu.util"),
                s.get("utilization.gpu"),
                "nvidia-smi utilization.gpu",
                10,
                unit=" pts",
            ),
            near(
                name,
                "gpu.mem.used MiB",
                _mib(m.get("gpu.mem.used")),
                s.get("memory.used"),
                "nvidia-smi memory.used",
                300,
                0.03,
                " MiB",
            ),
            near(
                name,
                "gpu.power W",
                m.get("gpu.power"),
                s.get("power.draw"),
                "nvidia-smi power.draw",
                15,
                0.10,
                " W",
            ),
            near(
                name,
                "gpu.temp °C",
                m.get("gpu.temp"),
                s.get("temperature.gpu"),
                "nvidia-smi temperature.gpu",
                3,
                unit=" °C",
            ),
            near(
                name,
                "gpu.clock.sm MHz",
                m.get("gpu.clock.sm"),
                s.get("clocks.sm"),
                "nvidia-smi clocks.sm",
                50,
                0.10,
                " MHz",
            ),
        ]
        torch_util = r.report.get("torch_util_mean")
        if torch_util is not None:
            rows.append(
                near(
                    name,
                    "gpu.util %",
                    m.get("gpu.util"),
                    torch_util,
                    "torch.cuda.utilization()",
                    10,
                    unit=" pts",
                )
            )
    if "idle" in results:
        m = results["idle"].metrics
        rows.append(bound("idle", "gpu.util %", m.get("gpu.util"), 5, above=False))
        if gpm:
            rows.append(bound("idle", "gpu.sm_active %", m.get("gpu.sm_active"), 5, above=False))
    if "matmul" in results:
        m = results["matmul"].metrics
        rows.append(bound("matmul", "gpu.util %", m.get("gpu.util"), 90, above=True))
        rows.append(bound("matmul", "gpu.proc_util %", m.get("gpu.proc_util"), 80, above=True))
        if gpm:
            rows.append(bound("matmul", "gpu.sm_active %", m.get("gpu.sm_active"), 50, True))
            rows.append(
                bound("matmul", "gpu.tensor_active %", m.get("gpu.tensor_active"), 20, True)
            )
    if "memcpy" in results:
        m = results["memcpy"].metrics
        s = results["memcpy"].smi
        rows.append(
            near(
                "memcpy",
                "gpu.mem_bw.util %",
                m.get("gpu.mem_bw.util"),
                s.get("utilization.memory"),
                "nvidia-smi utilization.memory",
                10,
                unit=" pts",
            )
        )
        if gpm:
            rows.append(bound("memcpy", "gpu.dram_active %", m.get("gpu.dram_active"), 40, True))
            rows.append(
                bound("memcpy", "gpu.tensor_active %", m.get("gpu.tensor_active"), 5, False)
            )
            if "matmul" in results:
                sm = results["matmul"].metrics.get("gpu.sm_active")
                rows.append(
                    Row(
                        "memcpy",
                        "gpu.sm_active %",
                        m.get("gpu.sm_active"),
                        sm,
                        "matmul's gpu.sm_active",
                        "lower",
                        _lt(m.get("gpu.sm_active"), sm),
                    )
                )
    if "alloc10" in results and "idle" in results:
        a, i = results["alloc10"], results["idle"]
        rows.append(
            near(
                "alloc10",
                "torch allocated GiB",
                a.report.get("allocated_bytes", 0) / GIB,
                10.0,
                "exactly 10 GiB",
                0,
            )
        )
        rows.append(
            near(
                "alloc10",
                "gpu.mem - idle's GiB",
                _diff(a.metrics, i.metrics, "gpu.mem", GIB),
                10.0,
                "torch.empty(10 GiB)",
                0.25,
                unit=" GiB",
            )
        )
        smi = _sub(a.smi.get("memory.used"), i.smi.get("memory.used"))
        rows.append(
            near(
                "alloc10",
                "memory.used - idle's GiB",
                None if smi is None else smi * MIB / GIB,
                10.0,
                "nvidia-smi memory.used",
                0.5,
                unit=" GiB",
            )
        )
    if all(p in results for p in PAIR):
        a, b = (results[p].metrics for p in PAIR)
        both = _add(a.get("gpu.proc_util"), b.get("gpu.proc_util"))
        rows += [
            near(
                "pair",
                "sum of gpu.proc_util %",
                both,
                a.get("gpu.util"),
                "gpu.util (the device's)",
                15,
                unit=" pts",
            ),
            Row(
                "pair",
                "pair-a gpu.proc_util %",
                a.get("gpu.proc_util"),
                b.get("gpu.proc_util"),
                "pair-b's (half the time)",
                "higher",
                _lt(b.get("gpu.proc_util"), a.get("gpu.proc_util")),
            ),
            bound("pair", "pair-b gpu.proc_util %", b.get("gpu.proc_util"), 5, above=True),
            near(
                "pair",
                "pair-b - pair-a gpu.mem GiB",
                _diff(b, a, "gpu.mem", GIB),
                2.0,
                "4 GiB - 2 GiB held",
                0.3,
                unit=" GiB",
            ),
            near(
                "pair",
                "pair-a gpu.util %",
                a.get("gpu.util"),
                b.get("gpu.util"),
                "pair-b's gpu.util (one device)",
                5,
                unit=" pts",
            ),
        ]
    return rows


def _mib(v: float | None) -> float | None:
    return None if v is None else v / MIB


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _lt(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a < b


def _diff(a: dict[str, float], b: dict[str, float], key: str, unit: float) -> float | None:
    d = _sub(a.get(key), b.get(key))
    return None if d is None else d / unit


def table(rows: Sequence[Row]) -> str:
    """The checks as an aligned text table, one row each, FAIL rows marked."""

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    head = ("workload", "check", "tunescope", "reference", "source", "tolerance", "")
    body = [
        (
            r.workload,
            r.what,
            fmt(r.tunescope),
            fmt(r.reference),
            r.source,
            r.tolerance,
            "ok" if r.ok else "FAIL",
        )
        for r in rows
    ]
    widths = [max(len(x[k]) for x in (head, *body)) for k in range(len(head))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)).rstrip()
        for x in (head, *body)
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------- running (parent)
def steady(samples: list[tuple[float, float]], t0: float, t1: float) -> float | None:
    """Mean of the (t, value) samples inside [t0, t1]; None when there are none."""
    got = [v for t, v in samples if t0 <= t <= t1]
    return sum(got) / len(got) if got else None


def run_workloads(
    names: Sequence[str], gpu: int, seconds: float, out: Path, record_to: Path
) -> tuple[dict[str, Result], dict[str, Any]]:
    """Run ``names`` at once, each a trial under ``tunescope run`` on GPU ``gpu``, polling
    nvidia-smi and recording NVML meanwhile; their results and the recording."""
    from tunescope.collect._gpu import NvmlBackend
    from tunescope.collect.record_nvml import record
    from tunescope.store import open_store

    store_url = str(out / "gpu_check.db")
    run = f"gpu-check-{'+'.join(names)}-{int(time.time())}"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(gpu), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    procs, reports = [], {}
    recording: dict[str, Any] = {}
    backend = NvmlBackend()
    done = threading.Event()

    def rec() -> None:  # until the workloads end (at most 5 minutes)
        recording.update(record(backend, 300.0, 0.5, stop=done.is_set))

    recorder = threading.Thread(target=rec, daemon=True)
    with SmiPoller(gpu) as smi:
        recorder.start()
        for name in names:
            reports[name] = out / f"{name}.report.json"
            reports[name].unlink(missing_ok=True)
            cmd = [
                sys.executable,
                "-m",
                "tunescope",
                "run",
                "--store",
                store_url,
                "--run",
                run,
                "--trial",
                name,
                "--interval",
                "0.5",
                "--",
                sys.executable,
                str(Path(__file__).resolve()),
                "--workload",
                name,
                "--seconds",
                str(seconds),
                "--report",
                str(reports[name]),
            ]
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait() for p in procs]
        done.set()
        recorder.join()
    backend.close()
    if any(codes):
        raise RuntimeError(f"a workload failed (exit codes {codes}); see its output above")
    results: dict[str, Result] = {}
    store = open_store(store_url)
    try:
        trials = {t.name: t for t in store.list_trials(store.get_run(run).id)}
        for name in names:
            rep = json.loads(reports[name].read_text())
            t0, t1 = rep["steady_from"], rep["steady_to"]
            metrics = {}
            for info in store.list_series(trials[name].id):
                if info.device != str(gpu):
                    continue
                ts, vs = store.read_samples(info.id)
                pairs = list(zip(ts.tolist(), vs.tolist(), strict=True))
                mean = steady(pairs, t0, t1)
                if mean is not None:
                    metrics[info.metric] = mean
            smi_means = {}
            for f in SMI_FIELDS:
                pts = [(row["t"], row[f]) for row in smi.rows if f in row]
                v = steady(pts, t0, t1)
                if v is not None:
                    smi_means[f] = v
            results[name] = Result(name, metrics, smi_means, rep)
    finally:
        store.close()
    recording["description"] = (
        "recorded by make gpu-check (bench/gpu_check.py): "
        + "; ".join(f"{n}: {WORKLOADS[n]}" for n in names)
        + f", on GPU {gpu}"
    )
    pids = {n: [json.loads(reports[n].read_text())["pid"]] for n in names}
    if len(names) > 1:
        recording["trials"] = {n.split("-")[-1]: p for n, p in pids.items()}
    first = pids[names[0]]
    recording["root_pid"], recording["trial_pids"] = first[0], first
    from tunescope.collect._replay import dump_replay

    dump_replay(recording, record_to)
    return results, recording


def no_gpu() -> str | None:
    """Why there is no NVIDIA GPU to check here, None when there is one."""
    from tunescope.collect._gpu import NvmlBackend
    from tunescope.errors import CollectError

    try:
        backend = NvmlBackend()
    except CollectError as exc:
        return str(exc)
    try:
        if backend.device_count() <= 0:
            return "NVML sees no GPU"
    finally:
        backend.close()
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not on PATH"
    return None


def plan(gpu: int, seconds: float, out: Path) -> str:
    lines = [f"gpu-check plan: GPU {gpu}, {seconds:g} s per workload, output in {out}"]
    for run in (*RUNS, PAIR):
        lines.append("  " + " + ".join(f"{n} ({WORKLOADS[n]})" for n in run))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, *, say: Callable[[str], None] = print) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_check.py", description=__doc__.split("\n")[0])
    p.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to check (0)")
    p.add_argument("--seconds", type=float, default=10.0, help="steady seconds per workload")
    p.add_argument("--out", type=Path, default=Path("bench/out/gpu_check"), help="output folder")
    p.add_argument("--dry", action="store_true", help="print the plan and exit")
    p.add_argument("--workload", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    p.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.seconds < 3:
        p.error("--seconds must be at least 3")
    if args.workload:
        return workload(args.workload, args.seconds, args.report)
    if args.dry:
        say(plan(args.gpu, args.seconds, args.out))
        return 0
    why = no_gpu()
    if why is not None:
        say(f"gpu-check: no NVIDIA GPU to check here ({why}); nothing to check")
        return 0
    try:
        import torch
    except ImportError:
        say("gpu-check: torch is not installed (pip install 'tunescope[torch]')")
        return 1
    if not torch.cuda.is_available():
        say("gpu-check: this torch has no CUDA (a CPU build?); install a CUDA build of torch")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    say(plan(args.gpu, args.seconds, args.out))
    results: dict[str, Result] = {}
    gpm = False
    for run in (*RUNS, PAIR):
        name = "pair" if run == PAIR else run[0]
        say(f"running {' + '.join(run)} ...")
        got, rec = run_workloads(run, args.gpu, args.seconds, args.out, args.out / f"{name}.json")
        results.update(got)
        gpm = gpm or any(d.get("gpm_supported") for d in rec.get("devices", []))
    return verdict(checks(results, gpm), args.out, say)


def verdict(rows: Sequence[Row], out: Path, say: Callable[[str], None] = print) -> int:
    """Print the table and a summary line; 1 when a check is out of tolerance, else 0."""
    say(table(rows))
    failed = sum(not r.ok for r in rows)
    say(
        f"gpu-check: {len(rows) - failed} of {len(rows)} checks within tolerance; NVML "
        f"recordings in {out} (copy them into src/tunescope/collect/replay/ as fixtures)"
    )
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
