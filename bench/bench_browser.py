"""How fast the page draws a long trial in a real (headless) Chromium.

Builds once (cached in bench/out/, git-ignored) a store with one 24-hour trial sampled at 1 Hz
on two GPUs (gpu.util and gpu.mem per GPU, cpu.util and cpu.mem for the trial), an optimizer
step every second and a 3-minute evaluation every 30 minutes. Serves it with the real app
(uvicorn, in a subprocess) and opens the Resource Utilization tab on GPU memory (a marker
metric: the steps arrive as density bins, the evaluations as intervals). Prints:

    browser.first_chart_ms X (target <= 1000)   navigation start -> the page's
                                                 performance mark "chart-drawn" (median)
    browser.zoom_redraw_ms X (target <= 200)    click on Zoom in / Zoom out -> the chart drew
                                                 the refetched window (median)
    browser.page_redraw_ms X (target <= 200)    click on Page back / forward -> the same

"drew" means the page's uPlot draw hook ran for the new window's series (the page fetches the
series first and draws it, then fetches and draws the markers: window.__tunescope.waitForDraw).
The same three moments with the markers drawn as well are printed as browser.*_complete_ms,
without a target (their cost is mostly the server's event query over the window).
Exits 1 when a median misses its target.

Usage: .venv/bin/python bench/bench_browser.py [--repeat N] [--rebuild]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tunescope.metrics import GIB
from tunescope.store import Event, open_store

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
DB = OUT / "bench_browser_v1.db"
WEB = ROOT / "web"
STATIC = ROOT / "src" / "tunescope" / "server" / "static"
T0 = 1_700_000_000.0
DAY = 86_400
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
TARGETS = {"first_chart_ms": 1000.0, "zoom_redraw_ms": 200.0, "page_redraw_ms": 200.0}
# the same moments once the optimizer-step and evaluation markers are drawn too (no target)
WITH_MARKERS = {
    "first_chart_ms": "first_complete_ms",
    "zoom_redraw_ms": "zoom_complete_ms",
    "page_redraw_ms": "page_complete_ms",
}


def build(path: Path) -> None:
    """One run, one completed 24-hour trial: six 1 Hz series, steps, evaluations."""
    tmp = path.with_suffix(".tmp")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    rng = np.random.default_rng(0)
    t = T0 + np.arange(DAY, dtype=np.float64)
    began = time.perf_counter()
    with open_store(tmp) as store:
        run = store.ensure_run("bench-browser-day", start=T0)
        trial = store.create_trial(run.id, "day", {"lr": 2e-4}, start=T0)
        columns = []
        for metric, device, values in (
            ("gpu.util", "0", np.clip(rng.normal(85, 10, DAY), 0, 100)),
            ("gpu.util", "1", np.clip(rng.normal(70, 20, DAY), 0, 100)),
            ("gpu.mem", "0", 40 * GIB + 4 * GIB * np.sin(t / 600.0)),
            ("gpu.mem", "1", 38 * GIB + rng.normal(0, GIB / 4, DAY)),
            ("cpu.util", None, np.clip(rng.normal(30, 8, DAY), 0, 100)),
            ("cpu.mem", None, 12 * GIB + np.cumsum(rng.normal(0, 2e5, DAY))),
        ):
            columns.append((store.series(trial.id, metric, device).id, values))
        for a in range(0, DAY, 3600):
            store.append_samples(
                [
                    (sid, ts, v)
                    for sid, values in columns
                    for ts, v in zip(
                        t[a : a + 3600].tolist(), values[a : a + 3600].tolist(), strict=True
                    )
                ]
            )
        store.add_events(
            Event(trial.id, "optimizer_step", T0 + 20 + i, step=i + 1) for i in range(DAY - 40)
        )
        store.add_events(
            Event(
                trial.id,
                "evaluation",
                T0 + k * 1800.0,
                name=f"eval-{k}",
                step=k * 1800,
                duration=180.0,
            )
            for k in range(1, DAY // 1800)
        )
        store.update_trial(trial.id, state="completed", end=T0 + DAY, heartbeat=T0 + DAY)
        store.compact()
    tmp.replace(path)
    print(
        f"built {path.name}: 6 series x {DAY} samples, {DAY - 40} steps in "
        f"{time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )


def ensure_built() -> None:
    if (STATIC / "app.js").exists():
        return
    if not (WEB / "node_modules").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True)
    subprocess.run(["npm", "run", "build"], cwd=WEB, check=True)


SERVE = """
import sys, uvicorn
from tunescope.server import create_app
uvicorn.run(create_app(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]),
            log_level="warning")
"""


def serve(db: Path) -> tuple[str, subprocess.Popen[bytes]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(db), str(port)], env=env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/api/health", timeout=2):
                return base, proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}") from None
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start within 60 s")


CLICK_AND_WAIT = """async (label) => {
  const h = window.__tunescope;
  const n = h.drawCount;
  const button = document.querySelector(`button[aria-label="${label}"]`);
  const t0 = performance.now();
  button.click();
  await h.waitForDraw(n);
  const drawn = performance.now() - t0;
  await h.waitForDraw(n, true);
  return [drawn, performance.now() - t0];
}"""


def measure(base: str, repeat: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    url = f"{base}/#/runs/1/resources?metric=gpu.mem&trial=1"
    out: dict[str, list[float]] = {k: [] for k in [*TARGETS, *WITH_MARKERS.values()]}

    def click(page: Any, label: str, key: str) -> None:
        drawn, complete = page.evaluate(CLICK_AND_WAIT, label)
        out[key].append(drawn)
        out[WITH_MARKERS[key]].append(complete)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for i in range(repeat + 1):  # the first load warms the server and the disk cache
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.goto(url)
                page.wait_for_function(
                    "() => performance.getEntriesByName('chart-complete').length > 0"
                )
                marks = page.evaluate("""() => ['chart-drawn', 'chart-complete'].map(
                    (m) => performance.getEntriesByName(m)[0].startTime)""")
                if i:
                    out["first_chart_ms"].append(marks[0])
                    out["first_complete_ms"].append(marks[1])
                if i == repeat:
                    draw = page.evaluate("() => window.__tunescope.lastDraw")
                    print(
                        f"  first draw: {sum(s['count'] for s in draw['series'])} points "
                        f"over {len(draw['series'])} GPUs, {draw['markers']['stepBins']} "
                        f"step bins, {draw['markers']['evals']} evaluations",
                        file=sys.stderr,
                    )
                    for _ in range(repeat):
                        click(page, "Zoom in", "zoom_redraw_ms")
                        click(page, "Zoom out", "zoom_redraw_ms")
                    page.evaluate(CLICK_AND_WAIT, "Zoom in")
                    page.evaluate(CLICK_AND_WAIT, "Zoom in")
                    for _ in range(repeat):
                        click(page, "Page back", "page_redraw_ms")
                        click(page, "Page forward", "page_redraw_ms")
                context.close()
        finally:
            browser.close()
    return out


def run_and_report(
    prefix: str,
    db: Path,
    build_db: Callable[[Path], None],
    measure_at: Callable[[str, int], dict[str, list[float]]],
    targets: dict[str, float],
    with_markers: Iterable[str],
) -> tuple[bool, dict[str, list[float]]]:
    """The browser benches' one main: arguments, the cached store (built when missing or on
    ``--rebuild``), the page built, a server over it, the measurements, and each figure's
    median printed beside its target. Returns (a target missed, the measurements)."""
    about = sys.modules["__main__"].__doc__ or " "
    parser = argparse.ArgumentParser(description=about.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed loads / clicks each")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached store")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.rebuild or not db.exists():
        build_db(db)
    ensure_built()
    base, proc = serve(db)
    try:
        results = measure_at(base, max(1, args.repeat))
    finally:
        proc.terminate()
        proc.wait(10)
    missed = False
    for key, target in targets.items():
        values = results[key]
        med = statistics.median(values)
        missed |= med > target
        print(
            f"{prefix}.{key} {med:.0f} (target <= {target:.0f})  "
            f"[min {min(values):.0f}, max {max(values):.0f}, n={len(values)}]"
        )
    for key in with_markers:
        values = results[key]
        print(
            f"{prefix}.{key} {statistics.median(values):.0f} (markers drawn too; no target)  "
            f"[min {min(values):.0f}, max {max(values):.0f}, n={len(values)}]"
        )
    return missed, results


def main() -> int:
    missed, _ = run_and_report("browser", DB, build, measure, TARGETS, WITH_MARKERS.values())
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
