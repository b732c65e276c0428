"""Benchmark of the sampler's own cost (``make bench-sampler``, part of ``make bench``).

Prints, each beside its target:

* ``sampler.cpu_1hz.N``: the sampler process's CPU time (all its threads, from
  ``/proc/PID/task/*/schedstat``) over a steady stretch after a warm-up, as % of one core, while it
  samples a tree of N sleeping processes at 1 Hz: N = 1 (target <= 0.3), 16 (no target),
  64 with 8 replayed GPUs (target <= 1; the GPUs are the synthetic ``node_a_8gpu`` replay,
  8 x H100).
* ``sampler.cpu_100ms.64``: the same at a 0.1 s interval (target <= 5).
* ``sampler.cpu_1hz.pss``: 16 processes that each map and touch the same multi-GiB shared
  memory file (PSS is computed by walking their page tables, so this is where reading
  ``smaps_rollup`` costs most; no target, compare with ``cpu_1hz.16``), measured over at
  least 60 s, so that the periodic PSS refreshes of idle processes fall in the window.
* ``sampler.cpu_1hz.big``: one process holding ``--big-gib`` GiB of its own memory (1.5 by
  default) that allocates and frees 8 MiB every half second, so its memory moves at every
  sample: the sampler of main read its PSS (about 19 ms of CPU per GB) at every such sample;
  this one follows it from ``statm`` between full reads (target <= 0.3% of a core, as one small
  process). Beside it, ``pss_reads``: the full PSS reads this checkout's sampler made.
* ``sampler.first_sample_ms``: median time from a trial's start (``run.trial()``) to its
  first stored sample, over several trial starts (target <= 200).

``--compare REF`` (default ``main``) runs the sampler of git revision REF (its ``src/``, from
``git archive``) side by side: both samplers watch the same tree at the same time, each into
its own store, so both figures share the machine's load; first-sample latencies alternate
between the two. Without git (or with ``--compare ''``) only this checkout is measured.

Always exits 0: the figures are for people to read (shared machines are noisy).

Usage: python bench/bench_sampler.py [--seconds 20] [--warmup 5] [--pss-gib 2] [--big-gib 1.5]
[--compare REF]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
TICK = os.sysconf("SC_CLK_TCK")
GPUS_8 = "node_a_8gpu"
"""The 8-GPU replay (synthetic: 8 x H100 of one node of a DDP job)."""

TREE = textwrap.dedent(
    """
    import mmap, os, sys, time
    n, size, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    def hold():
        if size:
            fd = os.open(path, os.O_RDONLY)
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            s = 0
            for i in range(0, size, 4096):
                s += m[i]
            return m
    for _ in range(n - 1):
        if os.fork() == 0:
            m = hold()
            os.write(1, b"up\\n")
            time.sleep(3600)
            os._exit(0)
    m = hold()
    os.write(1, b"up\\n")
    time.sleep(3600)
    """
)

BIG = textwrap.dedent(
    """
    import mmap, os, sys, time
    PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    size = int(sys.argv[1])
    held = mmap.mmap(-1, size, PRIVATE)
    for i in range(0, size, 4096):
        held[i] = 1
    os.write(1, b"up\\n")
    while True:
        m = mmap.mmap(-1, 8 << 20, PRIVATE)
        for i in range(0, 8 << 20, 4096):
            m[i] = 1
        time.sleep(0.5)
        m.close()
        time.sleep(0.5)
    """
)

FIRST = textwrap.dedent(
    """
    import sys, time
    import tunescope.record as ts
    from tunescope.store import open_store
    url, n = sys.argv[1], int(sys.argv[2])
    keys = []
    with ts.run("bench-first-sample", store=url, interval=1.0) as run:
        for _ in range(n):
            with run.trial() as trial:
                time.sleep(0.3)
            keys.append(trial.key)
    with open_store(url) as st:
        for key in keys:
            info = st.trial_by_key(key)
            found = st.list_series(info.id, "cpu.procs")
            if not found:  # the trial (0.3 s) ended before the sampler's first sample
                print("none", flush=True)
                continue
            t, _ = st.read_samples(found[0].id)
            print((float(t[0]) - info.start) * 1000.0, flush=True)
    """
)


@contextlib.contextmanager
def session(args: list[str], ups: int) -> Iterator[int]:
    """``python -c ARGS...`` in a session of its own, once it printed ``up`` ``ups`` times;
    yields its pid, and kills the whole session at the end."""
    p = subprocess.Popen(
        [sys.executable, "-c", *args], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert p.stdout is not None
        for _ in range(ups):
            if p.stdout.readline() != b"up\n":
                raise RuntimeError("the processes measured did not start")
        yield p.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # the session this bench started
        p.wait()


def big(size: int) -> contextlib.AbstractContextManager[int]:
    """One process holding ``size`` bytes of its own memory, moving 8 MiB every 0.5 s."""
    return session([BIG, str(size)], 1)


@contextlib.contextmanager
def tree(n: int, shm_bytes: int = 0) -> Iterator[int]:
    """A tree of ``n`` sleeping Python processes (the root and n - 1 forked children), each
    mapping and touching ``shm_bytes`` of one shared memory file; yields the root's pid."""
    path = ""
    if shm_bytes:
        fd, path = tempfile.mkstemp(prefix="tunescope-bench-", dir="/dev/shm")
        try:
            os.posix_fallocate(fd, 0, shm_bytes)
        finally:
            os.close(fd)
    try:
        with session([TREE, str(n), str(shm_bytes), path or "-"], n) as pid:
            yield pid
    finally:
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


def cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` has run: the sum over its threads of
    ``/proc/PID/task/TID/schedstat`` (nanoseconds; a thread that ends in between takes its
    part along, so measure between moments its threads stay the same), else user + system
    of ``/proc/PID/stat`` (clock ticks: 10 ms steps)."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


class Sampler:
    """One sampler process (``src``'s code) watching ``root`` into its own store, with the
    GPU replay ``gpus`` (a builtin fixture's name) or none."""

    def __init__(self, src: Path, tmp: Path, root: int, interval: float, gpus: str | None):
        from tunescope.store import TrialSpec

        key = uuid.uuid4().hex
        spec = TrialSpec(key=key, run="bench-sampler", start=time.time(), interval=interval)
        env = dict(os.environ, PYTHONPATH=str(src))
        env["TUNESCOPE_STORE"] = f"sqlite:///{tmp / (key + '.db')}"
        env["TUNESCOPE_SAMPLER_SPEC"] = spec.to_json()
        env.pop("TUNESCOPE_GPU_REPLAY", None)
        if gpus is not None:
            env["TUNESCOPE_GPU_REPLAY"] = gpus
        cmd = [sys.executable, "-m", "tunescope.collect", "--trial-key", key, "--pid", str(root)]
        self.p = subprocess.Popen(
            [*cmd, "--interval", repr(interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert self.p.stdout is not None
        if self.p.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the sampler of {src} did not start")
        self.c0 = 0.0

    def mark(self) -> None:
        self.c0 = cpu_s(self.p.pid)

    def used(self) -> float:
        return cpu_s(self.p.pid) - self.c0

    def stop(self) -> None:
        assert self.p.stdin is not None
        with contextlib.suppress(OSError):
            self.p.stdin.write(b"stop\n")
            self.p.stdin.close()
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def measure(
    srcs: list[Path],
    tmp: Path,
    root: int,
    interval: float,
    gpus: str | None,
    warmup: float,
    seconds: float,
) -> list[float]:
    """% of one core each ``srcs``' sampler used, all watching ``root`` at once."""
    samplers = [Sampler(src, tmp, root, interval, gpus) for src in srcs]
    try:
        time.sleep(warmup)
        for s in samplers:
            s.mark()
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        return [s.used() / wall * 100.0 for s in samplers]
    finally:
        for s in samplers:
            s.stop()


def pss_reads(gib: float, seconds: float) -> tuple[int, int]:
    """(full PSS reads, samples) of this checkout's HostProbe sampling the big process at
    1 Hz for ``seconds``."""
    from tunescope.collect._host import HostProbe

    with big(int(gib * 2**30)) as root:
        probe = HostProbe(root)
        n = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            probe.sample(time.monotonic())
            n += 1
            time.sleep(1.0)
        reads = probe.pss_reads
        probe.close()
    return reads, n


def first_sample_ms(src: Path, tmp: Path, n: int) -> list[float]:
    """Milliseconds from each of ``n`` trial starts to the trial's first stored sample
    (infinity for a 0.3 s trial that ended before its first sample)."""
    url = f"sqlite:///{tmp / ('first-' + uuid.uuid4().hex + '.db')}"
    env = dict(os.environ, PYTHONPATH=str(src))
    env.pop("TUNESCOPE_GPU_REPLAY", None)
    out = subprocess.run(
        [sys.executable, "-c", FIRST, url, str(n)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [math.inf if x == "none" else float(x) for x in out.stdout.split()]


def checkout(ref: str, tmp: Path) -> Path | None:
    """``src/`` of git revision ``ref`` in a temporary folder, None without git or ref."""
    if not ref:
        return None
    try:
        raw = subprocess.run(
            ["git", "archive", "--format=tar", ref, "src"],
            cwd=HERE.parent,
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    dest = tmp / "baseline"
    dest.mkdir()
    tar = tmp / "baseline.tar"
    tar.write_bytes(raw)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    return dest / "src"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="steady stretch measured")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    ap.add_argument("--pss-gib", type=float, default=2.0, help="shared memory each maps")
    ap.add_argument("--big-gib", type=float, default=1.5, help="memory of the big process")
    ap.add_argument("--starts", type=int, default=7, help="trial starts for first-sample")
    ap.add_argument("--compare", default="main", metavar="REF", help="baseline git revision")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tunescope-bench-sampler-") as name:
        tmp = Path(name)
        base = checkout(args.compare, tmp)
        srcs = [SRC] if base is None else [SRC, base]
        label = "" if base is None else f" ({args.compare}: "

        def show(name: str, got: list[float], target: str, unit: str = "%") -> None:
            then = "" if len(got) < 2 else f"{label}{got[1]:.2f}{unit})"
            print(f"sampler.{name} {got[0]:.2f}{unit}{then} {target}", flush=True)

        gpus = GPUS_8
        runs: list[tuple[str, int, float, str | None, int, str]] = [
            ("cpu_1hz.1", 1, 1.0, None, 0, "(target <= 0.3% of a core)"),
            ("cpu_1hz.16", 16, 1.0, None, 0, "(no target)"),
            ("cpu_1hz.64_8gpu", 64, 1.0, gpus, 0, "(target <= 1% of a core)"),
            ("cpu_100ms.64", 64, 0.1, None, 0, "(target <= 5% of a core)"),
        ]
        pss = int(args.pss_gib * 2**30)
        runs.append(
            (
                "cpu_1hz.pss",
                16,
                1.0,
                None,
                pss,
                f"(16 processes x {args.pss_gib:g} GiB mapped and touched, shared; no target)",
            )
        )
        for name, n, interval, g, shm, target in runs:
            seconds = max(args.seconds, 60.0) if shm else args.seconds
            with tree(n, shm) as root:
                got = measure(srcs, tmp, root, interval, g, args.warmup, seconds)
            show(name, got, target)
        with big(int(args.big_gib * 2**30)) as root:
            got = measure(srcs, tmp, root, 1.0, None, args.warmup, max(args.seconds, 60.0))
        show(
            "cpu_1hz.big",
            got,
            f"({args.big_gib:g} GiB in one process, moving 8 MiB every 0.5 s; "
            "target <= 0.3% of a core)",
        )
        reads = pss_reads(args.big_gib, args.warmup + max(args.seconds, 60.0))
        print(
            f"sampler.pss_reads.big {reads[0]} full PSS reads in {reads[1]} samples "
            f"(this checkout's HostProbe at 1 Hz; main's read at every sample its memory moved)",
            flush=True,
        )
        lat: list[list[float]] = [[] for _ in srcs]
        for _ in range(2):  # alternate the two checkouts
            for i, src in enumerate(srcs):
                lat[i] += first_sample_ms(src, tmp, (args.starts + 1) // 2)
        show(
            "first_sample_ms",
            [statistics.median(x) for x in lat],
            f"(target <= 200; median of {len(lat[0])} trial starts; this checkout's: "
            + " ".join(f"{x:.0f}" for x in lat[0])
            + ")",
            unit="",
        )
        load = os.getloadavg()[0]
        print(f"host.load1 {load:.2f} on {os.cpu_count()} cores", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
