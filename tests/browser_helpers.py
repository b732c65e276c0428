"""Helpers of the browser tests (tests/test_browser_*.py; their fixtures are in
browser_fixtures.py): the web build, a recorded run in a real SQLite file, the real server in a
subprocess, and reading the page's test hooks (window.__tunescope).

The run "lora-sweep" began an hour ago and has four trials, one in each state:

* ``trial-0`` completed: 2 GPUs, 50 min at 1 Hz, dense optimizer steps (every 0.5 s, so the
  whole-run window answers bins), evaluations every 500 s lasting 40 s, a GPU-memory spike of
  79 GiB on GPU 0 at 1234 s and a CPU spike at 2000 s, scalars and checkpoints;
* ``trial-1`` running: 1 GPU, started at 600 s, extended every second by a writer thread;
* ``trial-2`` failed after 10 min, input-bound from 330 s to 870 s (its loop waited 45% of
  every step: a high-severity finding); ``trial-3`` running in the store but silent: reads
  ``lost``.

Every trial has findings (memory growth, evaluation spikes, right-size…); ``Recorded.extra``
holds the input-bound span of trial-2.

A second run, named with markup, checks that names are shown as text.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from http_helpers import free_port
from tunescope.metrics import GIB
from tunescope.store import Event, Scalar, Store, open_store

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
STATIC = ROOT / "src" / "tunescope" / "server" / "static"
SCREENSHOTS = ROOT / "docs" / "img"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

EVIL_RUN = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
EVIL_TRIAL = '<img src=x onerror="window.__xss=3">'
SPIKE_T = 1234.0  # seconds after the run began
SPIKE_GIB = 79.0


# ---------------------------------------------------------------------------------- build
def _newest(path: Path) -> float:
    return max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=0.0)


_built = False


def ensure_built() -> None:
    """Build web/ into the package's static/ once per session when it is missing or older
    than its sources (``npm ci`` only when node_modules is missing or older than the
    lock file, e.g. after a dependency was added)."""
    global _built
    if _built:
        return
    bundle = STATIC / "app.js"
    sources = max(
        _newest(WEB / "src"),
        (WEB / "openapi.json").stat().st_mtime,
        (WEB / "package-lock.json").stat().st_mtime,
        (WEB / "build.mjs").stat().st_mtime,
    )
    if not bundle.exists() or bundle.stat().st_mtime < sources:
        try:
            installed = WEB / "node_modules" / ".package-lock.json"
            lock = (WEB / "package-lock.json").stat().st_mtime
            if not installed.is_file() or installed.stat().st_mtime < lock:
                subprocess.run(
                    ["npm", "ci", "--no-audit", "--no-fund"],
                    cwd=WEB,
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
            subprocess.run(
                ["npm", "run", "build"],
                cwd=WEB,
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            )
        except FileNotFoundError:
            pytest.fail(
                "the web page is not built and npm is missing: install Node 20 and run "
                "`cd web && npm ci && npm run build`",
                pytrace=False,
            )
        except subprocess.CalledProcessError as exc:
            pytest.fail(
                f"`npm ci && npm run build` in web/ failed:\n{exc.stdout}\n{exc.stderr}",
                pytrace=False,
            )
    _built = True


# ---------------------------------------------------------------------------------- data
@dataclass
class Recorded:
    url: str
    run_id: int
    run_start: float
    trials: dict[str, int]
    evil_run_id: int
    extra: dict[str, Any] = field(default_factory=dict)


def _write(
    store: Store,
    trial: int,
    metric: str,
    device: str | None,
    t: np.ndarray,
    v: np.ndarray,
    note: str | None = None,
) -> None:
    sid = store.series(trial, metric, device, note).id
    store.append_samples((sid, float(a), float(b)) for a, b in zip(t, v, strict=True))


def _trial_data(
    store: Store,
    trial: int,
    t0: float,
    t1: float,
    gpus: int,
    *,
    spikes: bool,
    seed: int,
    step_every: float,
    eval_every: float,
) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(t0, t1, 1.0)
    x = t - t0
    evals = [
        (t0 + k * eval_every, 40.0)
        for k in range(1, int((t1 - t0) // eval_every) + 1)
        if t0 + k * eval_every + 40 < t1
    ]
    in_eval = np.zeros_like(t, dtype=bool)
    for a, d in evals:
        in_eval |= (t >= a) & (t < a + d)
    cpu = np.clip(35 + 10 * np.sin(x / 90) + rng.normal(0, 3, len(t)), 0, 100)
    cpu[in_eval] += 25
    mem = (12 + 0.0008 * x + rng.normal(0, 0.05, len(t))) * GIB
    if spikes:
        cpu[np.argmin(np.abs(t - (t0 + 2000)))] = 100.0
    _write(store, trial, "cpu.util", None, t, np.clip(cpu, 0, 100))
    _write(store, trial, "cpu.mem", None, t, mem)
    for g in range(gpus):
        util = np.clip(88 + rng.normal(0, 4, len(t)), 0, 100)
        util[in_eval] = 45
        gmem = (30 + 4 * g + rng.normal(0, 0.1, len(t))) * GIB
        gmem[in_eval] += 6 * GIB
        if spikes and g == 0:
            gmem[np.argmin(np.abs(t - (t0 + SPIKE_T)))] = SPIKE_GIB * GIB
        note = None if spikes else "device used memory (per-process unavailable)"
        _write(store, trial, "gpu.util", str(g), t, util)
        _write(store, trial, "gpu.mem", str(g), t, gmem, note)
        _write(store, trial, "gpu.power", str(g), t, 250 + 2.5 * util)
    steps = np.arange(t0 + 30, t1, step_every)
    store.add_events(
        Event(trial, "optimizer_step", float(s), step=i + 1) for i, s in enumerate(steps)
    )
    store.add_events(
        Event(
            trial,
            "evaluation",
            a,
            name=f"eval-{k + 1}",
            step=int((a - t0 - 30) / step_every),
            duration=d,
        )
        for k, (a, d) in enumerate(evals)
    )
    store.add_events(
        Event(
            trial,
            "checkpoint",
            float(steps[i]),
            name=f"checkpoint-{i + 1}",
            step=i + 1,
            data={"path": f"/runs/lora/t{trial}/checkpoint-{i + 1}", "bytes": 134_217_728 + i},
        )
        for i in range(999, len(steps), 1000)
    )
    store.add_scalars(
        Scalar(trial, name, i + 1, float(steps[i]), value)
        for i in range(0, len(steps), 10)
        for name, value in (
            ("train/loss", 2.5 * np.exp(-i / 3000) + 0.3),
            ("train/learning_rate", 1e-4 * (1 - i / len(steps))),
        )
    )
    store.add_scalars(
        Scalar(trial, name, int((a - t0) / step_every), a + d, value)
        for k, (a, d) in enumerate(evals)
        for name, value in (("eval/loss", 2.0 / (k + 2) + 0.4), ("eval/accuracy", 0.5 + 0.08 * k))
    )


GAP_AT = 1500.0  # seconds after the run began: trial-0's sampler restarted (12 s, no samples)
INPUT_BOUND = (330.0, 870.0)  # seconds after the run began: trial-2 waits for its batches
INPUT_WAIT_SHARE = 0.45


def _input_bound(store: Store, trial: int, t0: float, t1: float) -> None:
    """What trial.watch() records for a loop that waits INPUT_WAIT_SHARE of every 1 s step:
    a data_wait event per batch (duration: the wait, value: the step time) and the
    train.data_wait share at 1 Hz."""
    t = np.arange(t0, t1, 1.0)
    store.add_events(
        Event(trial, "data_wait", float(a), duration=INPUT_WAIT_SHARE, value=1.0) for a in t
    )
    _write(store, trial, "train.data_wait", None, t + 1.0, np.full(len(t), 100 * INPUT_WAIT_SHARE))


def build_store(path: Path) -> Recorded:
    now = time.time()
    start = now - 3600.0
    with open_store(path) as store:
        run = store.ensure_run("lora-sweep", start=start)
        a = store.create_trial(
            run.id, "trial-0", {"lr": 1e-4, "rank": 16}, host="node-a", pids=[101], start=start
        )
        _trial_data(
            store, a.id, start, start + 3000, 2, spikes=True, seed=1, step_every=0.5, eval_every=500
        )
        store.add_events(  # the sampler died and was restarted: no samples for 12 s
            [Event(a.id, "sampler_gap", start + GAP_AT, "sampler restarted", None, 12.0)]
        )
        store.update_trial(a.id, state="completed", end=start + 3000, heartbeat=start + 3000)
        b = store.create_trial(
            run.id, "trial-1", {"lr": 3e-4, "rank": 8}, host="node-a", pids=[202], start=start + 600
        )
        _trial_data(
            store,
            b.id,
            start + 600,
            now - 1,
            1,
            spikes=False,
            seed=2,
            step_every=1.0,
            eval_every=400,
        )
        store.update_trial(b.id, heartbeat=now)
        c = store.create_trial(run.id, "trial-2", {"lr": 1e-3}, host="node-b", start=start + 300)
        _trial_data(
            store,
            c.id,
            start + 300,
            start + 900,
            1,
            spikes=False,
            seed=3,
            step_every=1.0,
            eval_every=400,
        )
        _input_bound(store, c.id, start + INPUT_BOUND[0], start + INPUT_BOUND[1])
        store.update_trial(c.id, state="failed", end=start + 900, error="CUDA out of memory")
        d = store.create_trial(run.id, "trial-3", {"lr": 5e-5}, host="node-c", start=start + 1200)
        _trial_data(
            store,
            d.id,
            start + 1200,
            start + 1500,
            1,
            spikes=False,
            seed=4,
            step_every=1.0,
            eval_every=400,
        )
        store.update_trial(d.id, heartbeat=start + 1500)
        evil = store.ensure_run(EVIL_RUN, start=start - 7200)
        e = store.create_trial(evil.id, EVIL_TRIAL, {"note": "<b>bold</b>"}, start=start - 7200)
        _trial_data(
            store,
            e.id,
            start - 7200,
            start - 7000,
            1,
            spikes=False,
            seed=5,
            step_every=1.0,
            eval_every=400,
        )
        store.update_trial(e.id, state="completed", end=start - 7000)
        store.compact()
    return Recorded(
        str(path),
        run.id,
        start,
        {"trial-0": a.id, "trial-1": b.id, "trial-2": c.id, "trial-3": d.id},
        evil.id,
    )


class LiveWriter(threading.Thread):
    """Extends the running trial every second, as its sampler would."""

    def __init__(self, url: str, trial: int) -> None:
        super().__init__(daemon=True, name="live-writer")
        self.url = url
        self.trial = trial
        self.stop = threading.Event()

    def run(self) -> None:
        with open_store(self.url) as store:
            sids = {s.metric + (s.device or ""): s.id for s in store.list_series(self.trial)}
            k = 0
            while not self.stop.wait(1.0):
                now = time.time()
                k += 1
                store.append_samples(
                    [
                        (sids["cpu.util"], now, 50.0 + k % 7),
                        (sids["cpu.mem"], now, 13.0 * GIB),
                        (sids["gpu.util0"], now, 90.0),
                        (sids["gpu.mem0"], now, 31.0 * GIB),
                        (sids["gpu.power0"], now, 470.0),
                    ]
                )
                store.add_events([Event(self.trial, "optimizer_step", now, step=100000 + k)])
                store.update_trial(self.trial, heartbeat=now)


# ---------------------------------------------------------------------------------- server
SERVE = """
import sys, uvicorn
from tunescope.server import create_app
uvicorn.run(create_app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]),
            log_level="warning")
"""


@dataclass
class Server:
    base: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serve(store_url: str, log: Path) -> Server:
    """The real app (tunescope.server.create_app) under uvicorn in a subprocess."""
    port = free_port()
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, store_url, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"the server exited with {proc.returncode}:\n{log.read_text()}", pytrace=False
            )
        try:
            with urllib.request.urlopen(f"{base}/api/health", timeout=2) as resp:
                if resp.status == 200:
                    return Server(base, proc, log)
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(
        f"the server did not answer /api/health within 60 s:\n{log.read_text()}", pytrace=False
    )


# ---------------------------------------------------------------------------------- page hooks
@contextmanager
def watched_page(
    browser: Any, base: str, problems: list[str], timeout_ms: float = 10_000
) -> Iterator[Any]:
    """A fresh page (own storage) at 1280x900 on ``base``, under the page's own
    Content-Security-Policy; a script error or a console error (a CSP violation, an API
    error...) is added to ``problems``, and fails the test when the page is done."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base)
    pg = context.new_page()
    pg.set_default_timeout(timeout_ms)
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    pg.on(
        "console",
        lambda msg: (
            problems.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None
        ),
    )
    yield pg
    context.close()
    assert not problems, "\n".join(problems)


def draws(page: Any) -> int:
    """How many times the main chart has drawn fetched data (window.__tunescope.drawCount)."""
    return int(page.evaluate("() => window.__tunescope.drawCount"))


def last_draw(page: Any) -> dict[str, Any]:
    return dict(page.evaluate("() => window.__tunescope.lastDraw"))


def after_draw(page: Any, count: int, **match: Any) -> dict[str, Any]:
    """Wait for a complete main-chart draw (markers included) after the ``count``-th whose
    fields equal ``match``."""
    page.wait_for_function(
        """([n, m]) => { const h = window.__tunescope;
             return h.drawCount > n && h.lastDraw && h.lastDraw.complete &&
               Object.entries(m).every(([k, v]) => h.lastDraw[k] === v); }""",
        arg=[count, match],
    )
    return last_draw(page)


def shown_span(page: Any) -> tuple[float, float]:
    """The span the time range control shows, in seconds since the run began."""
    el = page.locator(".timerange")
    return float(el.get_attribute("data-from")), float(el.get_attribute("data-to"))


def painted(page: Any, chart: str = "main") -> int:
    """Pixels of the chart's canvas painted in a series colour (blue/violet lines and bands)."""
    return int(
        page.evaluate(
            """(chart) => {
             const c = document.querySelector(`[data-chart="${chart}"] canvas`);
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
             let n = 0;
             for (let i = 0; i < d.length; i += 4)
               if (d[i + 3] > 0 && d[i + 2] > 150 && d[i + 2] - d[i] > 60) n++;
             return n; }""",
            chart,
        )
    )


def open_resources(page: Any, rec: Recorded, query: str = "") -> dict[str, Any]:
    """Open the run's Resource Utilization tab by URL and wait for its first chart."""
    page.goto(f"/#/runs/{rec.run_id}/resources{query}")
    return after_draw(page, 0)
