"""Benchmark of the SDK's cost to training (``make bench``).

Prints:

* ``hook.median_us``: median cost of one optimizer-step hook call in the training thread, the
  dispatch measured directly (batches of calls, many batches), against the 5 µs target.
* ``watch.median_us``: the same for one batch through ``trial.watch`` (no target; context).
* ``train.overhead_ratio``: a CPU torch training loop's time with tunescope (trial with its
  sampler at 1 Hz, optimizer hook, ``watch`` on the data, a scalar every 10 steps) over its
  time without, measured side by side in one process: repetitions interleaved A B B A …, the
  median of the per-pair ratios, against the 1.01 target. Trial start and end (sampler
  launch, final flush) are outside the timed loop.
* ``train.cpu_ratio``: the same pairs in CPU seconds (the training process, all threads,
  plus the sampler process) — what tunescope costs in CPU, less sensitive to other load.

Always exits 0: the figures are for people to read; noisy shared machines can miss the
ratio target by their own noise, which the spread line shows.

Usage: python bench/bench_record.py [--seconds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch
from torch import nn

import tunescope.record as ts
from tunescope.record import _state


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def _data(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(64, 512, generator=g), torch.randint(0, 10, (64,), generator=g))
        for _ in range(n)
    ]


def _loop(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    log: Callable[[int, float], None] | None,
) -> None:
    for i, (x, y) in enumerate(batches):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log is not None and i % 10 == 0:
            log(i, loss.item())


def bench_hook(store: str) -> tuple[float, float]:
    """Median µs per optimizer-hook call and per watched batch, inside a trial."""
    _, opt = _model()
    hook = _state.on_optimizer_step
    per_hook: list[float] = []
    per_batch: list[float] = []
    items = list(range(1000))
    with ts.run("bench-hook", store=store, sampler=False) as run, run.trial() as trial:
        rec = _state.current()
        assert rec is not None
        for _ in range(300):
            t0 = time.perf_counter()
            for _ in range(1000):
                hook(opt, (), {})
            per_hook.append((time.perf_counter() - t0) / 1000 * 1e6)
            rec.steps.clear()  # untimed: keep the synthetic flood out of the store
        plain = []
        for _ in range(50):
            t0 = time.perf_counter()
            for _ in items:
                pass
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _ in trial.watch(items):
                pass
            per_batch.append((time.perf_counter() - t0) / len(items) * 1e6)
            rec.events.clear()
        base = statistics.median(plain) / len(items) * 1e6
    return statistics.median(per_hook), statistics.median(per_batch) - base


@dataclass
class Overhead:
    wall_with: list[float] = field(default_factory=list)
    wall_without: list[float] = field(default_factory=list)
    cpu_with: list[float] = field(default_factory=list)
    cpu_without: list[float] = field(default_factory=list)
    thread_with: list[float] = field(default_factory=list)
    thread_without: list[float] = field(default_factory=list)
    step_s: float = 0.0

    def ratios(self) -> list[float]:
        return [w / o for w, o in zip(self.wall_with, self.wall_without, strict=True)]

    def thread_ratio(self) -> float:
        return statistics.median(
            w / o for w, o in zip(self.thread_with, self.thread_without, strict=True)
        )

    def cpu_ratio(self) -> float:
        return statistics.median(
            w / o for w, o in zip(self.cpu_with, self.cpu_without, strict=True)
        )


def _cpu(pid: int | None = None) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def bench_overhead(store: str, seconds: float, pairs: int = 30) -> Overhead:
    """Time the same loop without and with tunescope, interleaved A B B A …"""
    model, opt = _model()
    calib = _data(20)
    _loop(model, opt, calib, None)  # warm up
    t0 = time.perf_counter()
    _loop(model, opt, calib, None)
    out = Overhead(step_s=(time.perf_counter() - t0) / len(calib))
    data = _data(max(50, int(seconds / (2 * pairs) / out.step_s)))
    with ts.run("bench-overhead", store=store, interval=1.0) as run:

        def plain() -> None:
            c0, t0, h0 = _cpu(), time.perf_counter(), time.thread_time()
            _loop(model, opt, data, None)
            out.wall_without.append(time.perf_counter() - t0)
            out.thread_without.append(time.thread_time() - h0)
            out.cpu_without.append(_cpu() - c0)

        def recorded() -> None:
            with run.trial() as trial:
                sampler = trial._sampler.pid if trial._sampler is not None else None
                s0 = _cpu(sampler) if sampler else 0.0
                c0, t0, h0 = _cpu(), time.perf_counter(), time.thread_time()
                _loop(model, opt, trial.watch(data), lambda i, loss: trial.log(step=i, loss=loss))
                out.wall_with.append(time.perf_counter() - t0)
                out.thread_with.append(time.thread_time() - h0)
                c1 = _cpu()
                s1 = _cpu(sampler) if sampler else 0.0
                out.cpu_with.append(c1 - c0 + s1 - s0)

        for k in range(pairs):
            for fn in (plain, recorded) if k % 2 == 0 else (recorded, plain):
                fn()
    return out


def _median_ci(xs: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median: the order statistics
    whose binomial(n, 1/2) tail probabilities bracket 2.5% and 97.5%."""
    from math import comb

    xs = sorted(xs)
    n = len(xs)
    cdf, k = 0.0, 0
    while k < n and cdf + comb(n, k) / 2**n < 0.025:
        cdf += comb(n, k) / 2**n
        k += 1
    return xs[max(0, k - 1)], xs[min(n - 1, n - k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--seconds", type=float, default=45.0, help="approximate total time of the timed loops"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)  # steadier on small shared machines; the sampler gets a core
    with tempfile.TemporaryDirectory(prefix="tunescope-bench-") as tmp:
        store = str(Path(tmp) / "bench.db")
        hook_us, watch_us = bench_hook(store)
        print(f"hook.median_us {hook_us:.2f} (target <= 5)")
        print(f"watch.median_us {watch_us:.2f} (per batch, no target)")
        o = bench_overhead(store, args.seconds)
        ratios = o.ratios()
        lo, hi = _median_ci(ratios)
        print(
            f"train.overhead_ratio {statistics.median(ratios):.3f} (target <= 1.01; 95% CI of "
            f"the median {lo:.3f}-{hi:.3f} from the pair-to-pair spread)"
        )
        print(
            f"train.overhead_pairs {' '.join(f'{r:.3f}' for r in ratios)} "
            f"(sum ratio {sum(o.wall_with) / sum(o.wall_without):.3f}; step "
            f"{o.step_s * 1e3:.1f} ms; torch threads 1; sampler 1 Hz)"
        )
        print(
            f"train.thread_cpu_ratio {o.thread_ratio():.3f} (CPU time of the training thread "
            "itself, with/without: what the hooks, watch and log add to the loop; no target)"
        )
        print(
            f"train.cpu_ratio {o.cpu_ratio():.3f} (CPU time of the training process, plus the "
            "sampler's, with/without; less sensitive to other load; no target)"
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"host.load1 {load:.2f} on {os.cpu_count()} cores (above ~1 the ratio is noise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
