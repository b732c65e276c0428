"""Soak: 20 trials for 5 minutes under random faults, then count what was kept.

Ten trials record into a SQLite file, ten into a private PostgreSQL server (initdb'd here, on
a port of its own). Every few seconds (seeded) one fault strikes: the PostgreSQL server is
restarted or frozen (SIGSTOP) for a few seconds, its client connections are terminated, the
SQLite file is locked by another process (sometimes past the 5 s busy timeout), or a trial's
sampler is killed (kill -9). Each training marks and logs every 200 ms and measures how long
any SDK call, and entering and leaving its trial, held it.

Printed, beside their targets: samples kept against those expected (the seconds each trial
ran, over its interval, less the gaps a killed sampler left, which are recorded as
``sampler_gap`` events), events kept one for one, duplicates (samples at the same time, marks
twice), and the longest hold of a training thread. ``SOAK_SECONDS`` shortens the run;
``SOAK_TRACE=1`` prints each fault's time and the worst-held call with its time and the CPU
the thread used meanwhile (waiting, not working, when that is near zero).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from fault_helpers import SqliteLock, samplers_of  # noqa: E402
from pg_cluster import PrivateCluster, available  # noqa: E402
from tunescope.store import open_store, replay  # noqa: E402

SECONDS = float(os.environ.get("SOAK_SECONDS", "300"))
TRIALS = 20
INTERVAL = 1.0

TRAINING = """
import json, sys, time
import tunescope.record as ts
store, seconds, name, interval = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
t0 = time.monotonic()
run = ts.run("soak", store=store, interval=interval)
t1 = time.monotonic()
trial = run.trial(name).__enter__()
t2 = time.monotonic()
longest, k, at, cpu = 0.0, 0, 0.0, 0.0
end = time.monotonic() + seconds
while time.monotonic() < end:
    a, c = time.monotonic(), time.thread_time()
    trial.mark(f"m{k}")
    trial.log(step=k, loss=float(k))
    if time.monotonic() - a > longest:
        longest, at, cpu = time.monotonic() - a, time.time(), time.thread_time() - c
    k += 1
    time.sleep(0.2)
t3 = time.monotonic()
trial.__exit__(None, None, None)
print(json.dumps({"name": name, "key": trial.key, "marks": k, "run": t1 - t0, "enter": t2 - t1,
                  "leave": time.monotonic() - t3, "call": longest, "call_at": at,
                  "call_cpu": cpu}), flush=True)
"""


def main() -> int:
    why = available()
    if why is not None:
        print(f"soak skipped: {why}")
        return 0
    rng = random.Random(8)
    work = Path(tempfile.mkdtemp(prefix="tunescope-soak-"))
    spool = work / "spool"
    env = dict(os.environ, TUNESCOPE_SPOOL=str(spool), TUNESCOPE_LINGER="600")
    os.environ["TUNESCOPE_SPOOL"] = str(spool)
    sqlite_url = str(work / "soak.db")
    open_store(sqlite_url).close()
    cluster = PrivateCluster()
    try:
        pg_url = cluster.fresh_database("soak")
        open_store(pg_url).close()
        urls = [sqlite_url if i % 2 == 0 else pg_url for i in range(TRIALS)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", TRAINING, url, str(SECONDS), f"t{i:02d}", str(INTERVAL)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i, url in enumerate(urls)
        ]
        faults = _strike(rng, cluster, sqlite_url, SECONDS)
        results = []
        for p in procs:
            out, err = p.communicate(timeout=SECONDS + 600)
            if p.returncode != 0:
                print(err[-2000:])
                return 1
            results.append(json.loads(out.strip().splitlines()[-1]))
        cluster.cont()
        if not cluster.running():
            cluster.start()
        deadline = time.monotonic() + 600
        while any(samplers_of(r["key"]) for r in results) and time.monotonic() < deadline:
            time.sleep(1.0)
        for url in (sqlite_url, pg_url):  # what no sampler replayed: `tunescope sync`
            with open_store(url) as st:
                replay(url, st.write)
        return _report(results, urls, faults)
    finally:
        cluster.destroy()


def _strike(
    rng: random.Random, cluster: PrivateCluster, sqlite_url: str, seconds: float
) -> dict[str, int]:
    counts: dict[str, int] = {}
    end = time.monotonic() + seconds - 5
    time.sleep(3.0)
    while time.monotonic() < end:
        kind = rng.choice(["restart", "freeze", "terminate", "lock", "lock-long", "kill-sampler"])
        counts[kind] = counts.get(kind, 0) + 1
        hold = rng.uniform(2.0, 5.0)
        if os.environ.get("SOAK_TRACE"):
            print(f"fault {kind} at {time.time():.1f} for {hold:.1f}", flush=True)
        if kind == "restart":
            cluster.restart_after(hold)
        elif kind == "freeze":
            cluster.freeze()
            time.sleep(hold)
            cluster.cont()
        elif kind == "terminate":
            cluster.terminate_clients()
        elif kind.startswith("lock"):
            with SqliteLock(sqlite_url):
                time.sleep(hold + (4.0 if kind == "lock-long" else 0.0))
        else:
            victims = _all_samplers()
            if victims:
                os.kill(rng.choice(victims), signal.SIGKILL)
        time.sleep(rng.uniform(2.0, 6.0))
    return counts


def _all_samplers() -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tunescope.collect" in args and b"--trial-key" in args:
                out.append(int(entry))
    return out


def _report(results: list[dict[str, object]], urls: list[str], faults: dict[str, int]) -> int:
    expected = kept = events_lost = dup_samples = dup_marks = 0
    gap_s = 0.0
    states: dict[str, int] = {}
    for r, url in zip(results, urls, strict=True):
        with open_store(url) as st:
            info = st.trial_by_key(str(r["key"]))
            states[info.state] = states.get(info.state, 0) + 1
            times: list[float] = []
            for s in st.list_series(info.id, "cpu.procs"):
                times.extend(st.read_samples(s.id)[0].tolist())
            ev = st.all_events(info.id)
            marks = [e.name for e in ev if e.kind == "mark"]
            gaps = [e.duration or 0.0 for e in ev if e.kind == "sampler_gap"]
        span = (info.end or time.time()) - info.start
        gap_s += sum(gaps)
        expected += int((span - sum(gaps)) / INTERVAL)
        kept += len(set(times))
        dup_samples += len(times) - len(set(times))
        dup_marks += len(marks) - len(set(marks))
        events_lost += int(str(r["marks"])) - len(set(marks))
    holds = {k: max(float(str(r[k])) for r in results) for k in ("run", "enter", "leave", "call")}
    if os.environ.get("SOAK_TRACE"):
        worst = max(results, key=lambda r: float(str(r["call"])))
        print(f"worst call {worst}", flush=True)
    longest = max(holds.values())
    ratio = kept / expected if expected else 0.0
    rows = [
        ("faults struck", ", ".join(f"{k} {v}" for k, v in sorted(faults.items())), ""),
        ("trials completed", f"{states.get('completed', 0)} of {len(results)}", f"{len(results)}"),
        (
            "samples kept / expected (outside recorded gaps)",
            f"{kept} / {expected} = {ratio:.4f}",
            ">= 0.98",
        ),
        ("seconds in recorded sampler gaps", f"{gap_s:.1f}", "(context)"),
        ("events lost", str(events_lost), "0"),
        ("duplicate samples, duplicate events", f"{dup_samples}, {dup_marks}", "0, 0"),
        ("longest hold of a training thread", f"{longest:.3f} s", "<= 1.0 s"),
        (
            "  by run(), entering a trial, leaving it, one SDK call",
            " / ".join(f"{holds[k]:.3f}" for k in ("run", "enter", "leave", "call")),
            "(context)",
        ),
    ]
    width = max(len(a) for a, _, _ in rows)
    print(f"soak: {len(results)} trials, {SECONDS:.0f} s, interval {INTERVAL} s")
    for a, b, c in rows:
        print(f"  {a:<{width}}  {b:<30}  {('target ' + c) if c else ''}")
    ok = (
        states.get("completed", 0) == len(results)
        and ratio >= 0.98
        and events_lost == 0
        and dup_samples == 0
        and dup_marks == 0
        and longest <= 1.0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
