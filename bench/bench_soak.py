"""Soak: 20 trials for 5 minutes under random faults, then count what was kept.

Ten trials record into a SQLite file, ten into a private PostgreSQL server (initdb'd here, on
a port of its own). Every few seconds (seeded) one fault strikes: the PostgreSQL server is
restarted or frozen (SIGSTOP) for a few seconds, its client connections are terminated, the
SQLite file is locked by another process (sometimes past the 5 s busy timeout), or a trial's
sampler is killed (kill -9), the PostgreSQL server turns read-only
(``default_transaction_read_only``, as a standby after a failover does), the disk of the SQLite
file fills up (it lies on a small tmpfs), the spool's disk fills up (a small tmpfs) while the
PostgreSQL server is down, or the trials' clock steps 10 minutes ahead and then back (a
``sitecustomize`` shim in the trial processes shifts ``time.time()``; the system clock is never
touched). Fault classes strike in a seeded, shuffled round, so that even a short soak meets
each. Each training marks and logs every 200 ms and measures how long any SDK call, and
entering and leaving its trial, held it. The tmpfs classes need root (to mount); without it
they are left out, and said so.

Printed, beside their targets: samples kept against those expected (the seconds each trial
ran, over its interval, less the gaps a killed sampler left, which are recorded as
``sampler_gap`` events), events kept one for one, duplicates (samples at the same time, marks
twice), and the longest hold of a training thread; then, per fault class, the samples kept
against those expected in the seconds each of its strikes lasted (plus one), over the trials it
struck, and the duplicates among them. ``SOAK_SECONDS`` shortens the run;
``SOAK_TRACE=1`` prints each fault's time and the worst-held call with its time and the CPU
the thread used meanwhile (waiting, not working, when that is near zero).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

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


CLOCK_SHIM = """
import os, time as _t
_path = os.environ.get("SOAK_CLOCK")
if _path:
    _real, _real_ns, _mono = _t.time, _t.time_ns, _t.monotonic
    _seen = [0.0, -1.0]

    def _offset():
        now = _mono()
        if now - _seen[1] > 0.05:
            _seen[1] = now
            try:
                with open(_path) as f:
                    _seen[0] = float(f.read() or 0)
            except (OSError, ValueError):
                pass
        return _seen[0]

    _t.time = lambda: _real() + _offset()
    _t.time_ns = lambda: _real_ns() + int(_offset() * 1e9)
"""
"""sitecustomize.py of the trial processes: time.time() is the real clock plus the seconds
written in $SOAK_CLOCK (re-read every 50 ms), so a clock step strikes them and nothing else."""

BASE_FAULTS = ["restart", "freeze", "terminate", "lock", "lock-long", "kill-sampler"]
ROOT_FAULTS = ["disk-full", "spool-full"]
"""Classes that need a tmpfs (root, to mount it)."""
STRUCK = {
    "restart": "postgresql",
    "freeze": "postgresql",
    "terminate": "postgresql",
    "read-only": "postgresql",
    "spool-full": "postgresql",
    "lock": "sqlite",
    "lock-long": "sqlite",
    "disk-full": "sqlite",
    "clock-step": "all",
}
"""Which trials each class strikes (kill-sampler: the one whose sampler was killed)."""


class Strike(NamedTuple):
    kind: str
    start: float
    end: float
    key: str | None = None


def _mount(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)])
    return out.returncode == 0


def _fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte (a file, removed to heal)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * (1 << 20)
        with contextlib.suppress(OSError):
            while True:
                if f.write(chunk) < len(chunk):
                    break
        with contextlib.suppress(OSError):
            while f.write(b"\0" * 4096):
                pass
    return filler


def main() -> int:
    why = available()
    if why is not None:
        print(f"soak skipped: {why}")
        return 0
    rng = random.Random(8)
    work = Path(tempfile.mkdtemp(prefix="tunescope-soak-"))
    spool, disk = work / "spool", work / "disk"
    mounted = [d for d, size in ((spool, "16m"), (disk, "64m")) if _mount(d, size)]
    kinds = [*BASE_FAULTS, "read-only", "clock-step"]
    if len(mounted) == 2:
        kinds += ROOT_FAULTS
    else:
        print(f"soak: {', '.join(ROOT_FAULTS)} left out (mounting a tmpfs needs root)")
    shim = work / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(CLOCK_SHIM)
    clock = work / "clock"
    clock.write_text("0")
    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(
        os.environ,
        TUNESCOPE_SPOOL=str(spool),
        TUNESCOPE_LINGER="600",
        PYTHONPATH=path,
        SOAK_CLOCK=str(clock),
    )
    os.environ["TUNESCOPE_SPOOL"] = str(spool)
    sqlite_url = str(disk / "soak.db")
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
        strikes = _strike(rng, kinds, cluster, sqlite_url, spool, disk, clock, SECONDS)
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
        return _report(results, urls, strikes)
    finally:
        cluster.destroy()
        for d in mounted:
            subprocess.run(["umount", "-l", str(d)])


def _strike(
    rng: random.Random,
    kinds: list[str],
    cluster: PrivateCluster,
    sqlite_url: str,
    spool: Path,
    disk: Path,
    clock: Path,
    seconds: float,
) -> list[Strike]:
    strikes: list[Strike] = []
    order: list[str] = []
    end = time.monotonic() + seconds - 5
    time.sleep(3.0)
    while time.monotonic() < end:
        if not order:
            order = rng.sample(kinds, len(kinds))
        kind = order.pop()
        hold = rng.uniform(2.0, 5.0)
        if os.environ.get("SOAK_TRACE"):
            print(f"fault {kind} at {time.time():.1f} for {hold:.1f}", flush=True)
        t0, key = time.time(), None
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
        elif kind == "read-only":
            cluster.configure(default_transaction_read_only="on")
            time.sleep(hold)
            cluster.configure(default_transaction_read_only="off")
        elif kind == "disk-full":
            filler = _fill(disk)
            time.sleep(hold)
            filler.unlink()
        elif kind == "spool-full":
            filler = _fill(spool)
            cluster.restart_after(hold)
            filler.unlink()
        elif kind == "clock-step":
            clock.write_text("600")
            time.sleep(hold / 2)
            clock.write_text("-600")
            time.sleep(hold / 2)
            clock.write_text("0")
        else:
            victims = _all_samplers()
            if victims:
                pid = rng.choice(victims)
                key = _key_of(pid)
                os.kill(pid, signal.SIGKILL)
        strikes.append(Strike(kind, t0, time.time(), key))
        time.sleep(rng.uniform(2.0, 6.0))
    return strikes


def _key_of(pid: int) -> str | None:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return args[args.index(b"--trial-key") + 1].decode()
    except (OSError, ValueError, IndexError):
        return None


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


def _report(results: list[dict[str, object]], urls: list[str], strikes: list[Strike]) -> int:
    expected = kept = events_lost = dup_samples = dup_marks = 0
    gap_s = 0.0
    states: dict[str, int] = {}
    faults: dict[str, int] = {}
    for strike in strikes:
        faults[strike.kind] = faults.get(strike.kind, 0) + 1
    per_class: dict[str, list[int]] = {k: [0, 0, 0] for k in faults}  # kept, expected, dups
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
            spans = [(e.t, e.t + (e.duration or 0.0)) for e in ev if e.kind == "sampler_gap"]
        kind = "postgresql" if url.startswith("postgresql") else "sqlite"
        for strike in strikes:
            struck = STRUCK.get(strike.kind)
            if struck in (kind, "all") or (strike.key is not None and strike.key == r["key"]):
                one = _in_window(times, spans, info.start, info.end, strike)
                was = per_class[strike.kind]
                per_class[strike.kind] = [a + b for a, b in zip(was, one, strict=True)]
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
    for k, (k_kept, k_expected, k_dups) in sorted(per_class.items()):
        k_ratio = k_kept / k_expected if k_expected else 1.0
        rows.append(
            (
                f"  {k}: samples kept / expected, duplicates",
                f"{k_kept} / {k_expected} = {k_ratio:.4f}, {k_dups}",
                ">= 0.98, 0",
            )
        )
    width = max(len(a) for a, _, _ in rows)
    print(f"soak: {len(results)} trials, {SECONDS:.0f} s, interval {INTERVAL} s")
    for a, b, c in rows:
        print(f"  {a:<{width}}  {b:<30}  {('target ' + c) if c else ''}")
    classes_held = all((e == 0 or k / e >= 0.98) and d == 0 for k, e, d in per_class.values())
    ok = classes_held and (
        states.get("completed", 0) == len(results)
        and ratio >= 0.98
        and events_lost == 0
        and dup_samples == 0
        and dup_marks == 0
        and longest <= 1.0
    )
    return 0 if ok else 1


def _in_window(
    times: list[float],
    gaps: list[tuple[float, float]],
    start: float,
    end: float | None,
    strike: Strike,
) -> tuple[int, int, int]:
    """(kept, expected, duplicates) of one trial's samples in the seconds one strike lasted
    (plus one after it), within the trial's life and outside its recorded sampler gaps."""
    a, b = max(start, strike.start), min(end if end is not None else strike.end, strike.end + 1)
    if b <= a:
        return 0, 0, 0
    covered = sum(max(0.0, min(b, g1) - max(a, g0)) for g0, g1 in gaps)
    inside = [t for t in times if a <= t <= b and not any(g0 <= t <= g1 for g0, g1 in gaps)]
    return len(set(inside)), int((b - a - covered) / INTERVAL), len(inside) - len(set(inside))


if __name__ == "__main__":
    sys.exit(main())
