"""How fast the page answers at scale, in a real (headless) Chromium: a run of 64 trials and a
comparison of 8 pinned 24-hour series.

Builds once (cached in bench/out/, git-ignored) a store with one run of 64 trials, written in
bulk through the store API (``append_samples`` an hour at a time, ``add_events``,
``add_scalars``): 8 trials ran 24 h in parallel, sampled at 1 Hz (gpu.mem and gpu.util of one
GPU, cpu.util: 8 x 86,400 samples per metric), with an optimizer step every second and a
3-minute evaluation every 30 minutes; the 56 others ran an hour each, one after another over
the day, with the same metrics, steps and evaluations. Every trial logged train/loss and
train/learning_rate every 10 steps. Serves it with the real app (uvicorn, in a subprocess;
bench_browser.py's server) and measures in the page, with its hooks (window.__tunescope,
web/README.md):

    scale.run_first_chart_ms (<= 1000)  navigation to the run (the Training tab, its curves of
                                         64 trials) -> the performance mark "scalars-drawn"
    scale.cmp_first_chart_ms (<= 1000)  navigation to Resource Utilization with the 8 long
                                         trials' GPU memory pinned -> the last of the 9 charts
                                         (main + 8 stacked) drew data (__tunescope.firstDrawn)
    scale.cmp_zoom_ms        (<= 200)   click on Zoom in / Zoom out -> all 9 charts drew the
                                         new window (__tunescope.waitForCharts)
    scale.cmp_page_ms        (<= 200)   click on Page back / forward -> the same
    scale.trial_switch_ms    (<= 200)   choose another of the 64 trials in Select Trials ->
                                         the main chart drew it

Each is a median over --repeat loads or clicks after one warm-up load; the warm-up load's
Training tab is printed as scale.run_first_chart_cold_ms, without a target (the server then
computes the 64 trials' findings and reads their curves for the first time; it remembers
both for finished trials). The same moments with
every chart's markers drawn as well are printed as scale.*_complete_ms without a target (their
cost is mostly the server's event queries). Exits 1 when a median misses its target.

Usage: .venv/bin/python bench/bench_browser_scale.py [--repeat N] [--rebuild]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench_browser import CHROMIUM, CHROMIUM_ARGS, OUT, run_and_report
from tunescope.metrics import GIB
from tunescope.store import Event, Scalar, open_store

DB = OUT / "bench_browser_scale_v2.db"
T0 = 1_700_000_000.0
DAY = 86_400
HOUR = 3_600
LONG = 8  # trials that ran the whole day (the pinned ones)
TRIALS = 64
PINNED = "gpu.mem"
TARGETS = {
    "run_first_chart_ms": 1000.0,
    "cmp_first_chart_ms": 1000.0,
    "cmp_zoom_ms": 200.0,
    "cmp_page_ms": 200.0,
    "trial_switch_ms": 200.0,
}
# the same moments once the markers are drawn too (no target)
WITH_MARKERS = {
    "cmp_first_chart_ms": "cmp_first_complete_ms",
    "cmp_zoom_ms": "cmp_zoom_complete_ms",
    "cmp_page_ms": "cmp_page_complete_ms",
    "trial_switch_ms": "trial_switch_complete_ms",
}


def _trial(store: Any, run: int, k: int, start: float, length: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    trial = store.create_trial(run, f"t{k:02d}", {"lr": 1e-4 * (1 + k % 8), "seed": k}, start=start)
    t = start + np.arange(length, dtype=np.float64)
    columns = []
    for metric, device, values in (
        ("gpu.mem", "0", (30 + 4 * np.sin(t / 600.0) + rng.normal(0, 0.1, length)) * GIB),
        ("gpu.util", "0", np.clip(rng.normal(85, 10, length), 0, 100)),
        ("cpu.util", None, np.clip(rng.normal(30, 8, length), 0, 100)),
    ):
        columns.append((store.series(trial.id, metric, device).id, values))
    for a in range(0, length, HOUR):
        store.append_samples(
            [
                (sid, ts, v)
                for sid, values in columns
                for ts, v in zip(
                    t[a : a + HOUR].tolist(), values[a : a + HOUR].tolist(), strict=True
                )
            ]
        )
    steps = range(length - 40)
    store.add_events(Event(trial.id, "optimizer_step", start + 20 + i, step=i + 1) for i in steps)
    store.add_events(
        Event(
            trial.id,
            "evaluation",
            start + j * 1800.0,
            name=f"eval-{j}",
            step=j * 1800,
            duration=180.0,
        )
        for j in range(1, length // 1800)
    )
    store.add_scalars(
        Scalar(trial.id, name, i + 1, start + 20 + i, value)
        for i in range(0, len(steps), 10)
        for name, value in (
            ("train/loss", 2.5 * np.exp(-i / (length / 4)) + 0.3 + 0.01 * (k % 8)),
            ("train/learning_rate", 1e-4 * (1 - i / length)),
        )
    )
    store.update_trial(trial.id, state="completed", end=start + length, heartbeat=start + length)
    return int(trial.id)


def build(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    began = time.perf_counter()
    with open_store(tmp) as store:
        run = store.ensure_run("bench-scale-sweep", start=T0)
        for k in range(TRIALS):
            if k < LONG:
                _trial(store, run.id, k, T0, DAY, k)
            else:  # one after another over the day, an hour each
                _trial(store, run.id, k, T0 + (k - LONG) * (DAY - HOUR) / (TRIALS - LONG), HOUR, k)
        store.compact()
    tmp.replace(path)
    print(
        f"built {path.name}: {TRIALS} trials, {LONG} x 3 series x {DAY} samples + "
        f"{TRIALS - LONG} x 3 x {HOUR}, in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )


# Clicks a toolbar button, or picks a trial, and waits for the charts named in `ids` to draw
# (then to draw with their markers): [ms to drawn, ms to complete].
ACT_AND_WAIT = """async ([ids, label, trial]) => {
  const h = window.__tunescope;
  const after = Object.fromEntries(ids.map((id) => [id, h.draws[id] ?? 0]));
  const t0 = performance.now();
  if (trial === null) {
    document.querySelector(`button[aria-label="${label}"]`).click();
  } else {
    const sel = document.getElementById("select-trials");
    sel.value = String(trial);
    sel.dispatchEvent(new Event("change", { bubbles: true }));
  }
  const within = (p, what) => Promise.race([p, new Promise((_, no) => setTimeout(() => no(
    new Error(`${what} within 30 s: draws ${JSON.stringify(h.draws)}, ` +
      `before ${JSON.stringify(after)}, errors ${JSON.stringify(h.errors)}`)),
    30000))]);
  const drawn = await within(h.waitForCharts(after), "no redraw");
  const complete = await within(h.waitForCharts(after, true), "no complete redraw");
  return [drawn - t0, complete - t0];
}"""


def measure(base: str, repeat: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {
        k: [] for k in [*TARGETS, *WITH_MARKERS.values(), "run_first_chart_cold_ms"]
    }
    long_ids = list(range(1, LONG + 1))  # trial ids in creation order
    charts = ["main", *(f"cmp-{t}-{PINNED}" for t in long_ids)]
    cmp = ",".join(f"{t}:{PINNED}" for t in long_ids)
    resources = f"{base}/#/runs/1/resources?metric={PINNED}&trial=1&cmp={cmp}"

    def act(page: Any, ids: list[str], key: str, label: str, trial: int | None = None) -> None:
        drawn, complete = page.evaluate(ACT_AND_WAIT, [ids, label, trial])
        out[key].append(drawn)
        out[WITH_MARKERS[key]].append(complete)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for i in range(repeat + 1):  # the first loads warm the server and the disk cache
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                page = context.new_page()
                page.goto(f"{base}/#/runs/1")
                page.wait_for_function(
                    "() => performance.getEntriesByName('scalars-drawn').length > 0",
                    timeout=60_000,
                )
                lines = page.locator('[data-scalar="train/loss"] .legend-item').count()
                drawn_at = page.evaluate(
                    "() => performance.getEntriesByName('scalars-drawn')[0].startTime"
                )
                out["run_first_chart_ms" if i else "run_first_chart_cold_ms"].append(drawn_at)
                page.close()
                page = context.new_page()
                page.on("pageerror", lambda exc: print(f"  page error: {exc}", file=sys.stderr))
                page.goto(resources)
                page.wait_for_function(
                    """(ids) => ids.every((id) => window.__tunescope.firstDrawn[id] !== undefined
                        && window.__tunescope.charts[id].complete)""",
                    arg=charts,
                    timeout=60_000,
                )
                first, complete = page.evaluate(
                    """(ids) => [Math.max(...ids.map((id) => window.__tunescope.firstDrawn[id])),
                        performance.now()]""",
                    charts,
                )
                if i:
                    out["cmp_first_chart_ms"].append(first)
                    # polled, so an upper bound: when the page was seen complete
                    out["cmp_first_complete_ms"].append(complete)
                if i == repeat:
                    drawn = page.evaluate(
                        "(ids) => ids.map((id) => window.__tunescope.charts[id].series[0].count)",
                        charts,
                    )
                    print(
                        f"  {lines} training curves; first draw: {sum(drawn)} points over "
                        f"{len(charts)} charts",
                        file=sys.stderr,
                    )
                    for _ in range(repeat):
                        act(page, charts, "cmp_zoom_ms", "Zoom in")
                        act(page, charts, "cmp_zoom_ms", "Zoom out")
                    page.evaluate(ACT_AND_WAIT, [charts, "Zoom in", None])
                    page.evaluate(ACT_AND_WAIT, [charts, "Zoom in", None])
                    for _ in range(repeat):
                        act(page, charts, "cmp_page_ms", "Page back")
                        act(page, charts, "cmp_page_ms", "Page forward")
                    # a trial switch redraws the main chart only; the stacked ones stay
                    for j in range(repeat):
                        act(page, ["main"], "trial_switch_ms", "", LONG + 1 + j)
                context.close()
        finally:
            browser.close()
    return out


def main() -> int:
    missed, results = run_and_report("scale", DB, build, measure, TARGETS, WITH_MARKERS.values())
    cold = results["run_first_chart_cold_ms"][0]
    print(
        f"scale.run_first_chart_cold_ms {cold:.0f} (the server's first request for the run: "
        "it computes 64 trials' findings and reads their curves; no target)"
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
