"""`make bench`: every benchmark, one after another, each printing its figures beside its
targets. Figures are ratios or per-call costs measured side by side within one run, never
assertions in the test suite (shared machines are noisy).

``python bench/run.py [SECTION...]`` runs only the sections named (``store``, ``record``,
``sampler``, ``api``, ``browser``, ``browser_scale``, ``soak``, ``team``, ``retention``,
``serving``, ``usage``, ``clickhouse``: each
``bench_SECTION.py``); ``make bench-sampler`` runs the sampler's alone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "bench_store.py",
    "bench_record.py",
    "bench_sampler.py",
    "bench_api.py",
    "bench_browser.py",
    "bench_browser_scale.py",
    "bench_soak.py",
    "bench_team.py",
    "bench_retention.py",
    "bench_serving.py",
    "bench_usage.py",
    "bench_clickhouse.py",
]


def main(argv: list[str]) -> int:
    chosen = BENCHES
    if argv:
        chosen = [f"bench_{a}.py" for a in argv]
        unknown = [a for a, n in zip(argv, chosen, strict=True) if n not in BENCHES]
        if unknown:
            sections = ", ".join(n[len("bench_") : -len(".py")] for n in BENCHES)
            print(f"bench/run.py: no section {', '.join(unknown)} (sections: {sections})")
            return 2
    failed = []
    for name in chosen:
        path = HERE / name
        print(f"== {name}", flush=True)
        t = time.perf_counter()
        rc = subprocess.call([sys.executable, str(path)], cwd=HERE.parent)
        print(f"   ({time.perf_counter() - t:.0f} s, exit {rc})\n", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print("targets missed or errors in: " + ", ".join(failed))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
