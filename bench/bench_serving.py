"""Benchmark of the load generator (``tunescope load``), printed beside its targets.

* ``load.cpu_per_100rps``: the generator's own CPU, in % of one core per 100 requests/s, at
  64 concurrent streams against a small real asyncio streaming server in another process
  (tests/scripted_server.py: 16 tokens a request, a chunk each, 5 ms apart). Measured as the
  real CLI's CPU time (user + system, all threads) in a long and a short sweep, the
  difference over the difference in requests: start-up and imports cancel out. Target <= 5.
* ``load.ttft_error_ms``: its TTFT against the engine's own ``timings`` (llama.cpp's server,
  the tests' engine, tests/llamacpp_engine.py): client TTFT minus the engine's prompt time,
  at concurrency 1 (no queue), median over the requests. Target <= 1 ms. What it includes:
  the HTTP exchange both ways and the engine's time from prompt done to the first chunk
  written, besides the client's own delay.
* ``load.client_ttft_error_ms``: the generator's own part of that error: its TTFT against the
  scripted server's (tests/scripted_server.py reports, as llama.cpp's ``timings`` do, the time
  from reading the request's head to handing the first token to its socket), so what remains
  is the request's way there and the first chunk's way back through the kernel and the
  client's event loop.

Each is repeated (min / median / max of the repeats). Exits 0: figures for people to read.

Usage: python bench/bench_serving.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import llamacpp_engine  # noqa: E402
from tunescope.serving import Connection, LoadConfig, Origin, TokenSpec, send  # noqa: E402
from tunescope.store import open_store  # noqa: E402

STREAMS = 64
TOKENS = 16


def _start(cmd: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening "):
        proc.kill()
        raise RuntimeError(f"{cmd[1]} did not start: {line!r}")
    return proc, line.split()[1]


def _sweep_cpu(url: str, seconds: float, db: str) -> tuple[float, int]:
    """CPU seconds of one `tunescope load` at 64 streams for ``seconds``; requests done."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = f"b{time.monotonic_ns()}"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tunescope",
            "load",
            url,
            "--concurrency",
            str(STREAMS),
            "--seconds",
            str(seconds),
            "--output-tokens",
            str(TOKENS),
            "--prompt-tokens",
            "16",
            "--engine-metrics",
            "none",
            "--run",
            run,
            "--store",
            db,
        ],
        check=True,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open_store(db) as st:
        (t,) = st.list_trials(st.get_run(run).id)
        n = len(st.all_events(t.id, kinds=["request"]))
    return cpu, n


def bench_cpu(repeats: int) -> list[tuple[float, float]]:
    """[(% of a core per 100 req/s, req/s)] per repeat."""
    script = str(ROOT / "tests" / "scripted_server.py")
    server, url = _start([sys.executable, script, str(TOKENS), "0.005"])
    out = []
    try:
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "s.db")
            for _ in range(repeats):
                cpu_s, n_s = _sweep_cpu(url, 1.0, db)
                cpu_l, n_l = _sweep_cpu(url, 6.0, db)
                per_req = (cpu_l - cpu_s) / max(1, n_l - n_s)
                out.append((per_req * 100 * 100, (n_l - n_s) / 5.0))
    finally:
        server.terminate()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    return out


def _config(url: str) -> LoadConfig:
    origin = Origin.parse(url)
    return LoadConfig(
        url=url,
        origin=origin,
        mode="concurrency",
        levels=[1],
        requests=None,
        seconds=None,
        prompt_tokens=TokenSpec.parse("16", "-"),
        output_tokens=TokenSpec.parse("8", "-"),
        prompts=None,
        api="completions",
        model=None,
        slo={},
        metrics=None,
        metrics_path="",
        timeout=30.0,
        burstiness=None,
        ignore_eos=True,
        seed=0,
        run="-",
        store_url="-",
        project="-",
        os_user="-",
    )


async def _ttft_errors(url: str, n: int) -> list[float]:
    cfg = _config(url)
    conn = Connection(cfg.origin)
    errs = []
    try:
        for i in range(n + 3):
            # a new prompt each time: no prompt-cache hit
            doc = {
                "prompt": f"request {i} of the benchmark w1 w2 w3",
                "max_tokens": 8,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            body = json.dumps(doc).encode()
            r = await send(conn, cfg, body, i)
            if i < 3 or r.ttft is None or r.engine_timings is None:
                continue  # warm-up
            errs.append((r.ttft - r.engine_timings["prompt_ms"] / 1000.0) * 1000.0)
    finally:
        conn.close()
    return errs


def bench_client_ttft(repeats: int, n: int = 40) -> list[float]:
    """Median TTFT error (ms) against the scripted server's own TTFT, per repeat."""
    script = str(ROOT / "tests" / "scripted_server.py")
    server, url = _start([sys.executable, script, "8", "0.002"])
    try:
        return [statistics.median(asyncio.run(_ttft_errors(url, n))) for _ in range(repeats)]
    finally:
        server.terminate()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()


def bench_ttft(repeats: int, n: int = 40) -> list[float]:
    """Median TTFT error (ms) per repeat."""
    out = []
    with (
        tempfile.TemporaryDirectory() as d,
        llamacpp_engine.engine(Path(d) / "m.gguf", quiet=True) as url,
    ):
        for _ in range(repeats):
            out.append(statistics.median(asyncio.run(_ttft_errors(url, n))))
    return out


def _mmm(xs: list[float]) -> str:
    return f"min {min(xs):.2f} / median {statistics.median(xs):.2f} / max {max(xs):.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cpu = bench_cpu(args.repeats)
    pct = [c for c, _ in cpu]
    print(
        f"load.cpu_per_100rps {statistics.median(pct):.2f} % of a core (target <= 5; "
        f"{_mmm(pct)}; at {STREAMS} streams, {TOKENS} tokens a request, "
        f"{statistics.median([r for _, r in cpu]):.0f} req/s)"
    )
    ttft = bench_ttft(args.repeats)
    print(f"load.ttft_error_ms {statistics.median(ttft):.2f} (target <= 1; {_mmm(ttft)})")
    own = bench_client_ttft(args.repeats)
    print(
        f"load.client_ttft_error_ms {statistics.median(own):.2f} (the generator's own part of "
        f"the above, against a server's own TTFT; {_mmm(own)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
