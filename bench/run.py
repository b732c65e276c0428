"""`make bench`: every benchmark, one after another, each printing its figures beside its
targets. Figures are ratios or per-call costs measured side by side within one run, never
assertions in the test suite (shared machines are noisy)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "bench_store.py",
    "bench_record.py",
    "bench_api.py",
    "bench_browser.py",
    "bench_browser_scale.py",
    "bench_soak.py",
    "bench_team.py",
]


def main() -> int:
    failed = []
    for name in BENCHES:
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
    sys.exit(main())
