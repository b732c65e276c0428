"""Helpers shared by the sampler tests: a child process with a non-blocking stdout, the
sampler's command line, and reading a series back."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np

from tunescope.store import Batch, Store, open_store


# ---------------------------------------------------------------------- helpers
class Proc:
    """A child process whose stdout lines arrive on a queue (reads never block the test)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.p.stdout is not None
        with self.p.stdout:
            for raw in self.p.stdout:
                self.lines.put(raw.decode().rstrip("\n"))
        self.lines.put("<eof>")

    def expect(self, timeout: float = 30.0) -> str:
        return self.lines.get(timeout=timeout)

    def send(self, line: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=10)
        for stream in (self.p.stdin, self.p.stderr):
            if stream is not None:
                stream.close()
        self._pump_thread.join(timeout=10)

    def stderr(self) -> str:
        assert self.p.stderr is not None
        return self.p.stderr.read().decode()


def start_root(env_extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A live process (``sleep 120``) to be a trial's root: no ``CUDA_VISIBLE_DEVICES`` but
    what ``env_extra`` gives it."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(env_extra or {})
    return subprocess.Popen(["sleep", "120"], env=env)


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *args]


def make_trial(url: str) -> int:
    with open_store(url) as s:
        return s.create_trial(s.ensure_run("r").id).id


def sampler_args(url: str, trial: int, pid: int, interval: float) -> list[str]:
    """The sampler's command line for a trial already in the store (the store itself goes in
    the environment: see :func:`clean_env`)."""
    del url  # never on the command line
    return [
        sys.executable,
        "-m",
        "tunescope.collect",
        "--trial",
        str(trial),
        "--pid",
        str(pid),
        "--interval",
        str(interval),
    ]


def clean_env(url: str | None = None) -> dict[str, str]:
    """This environment without a GPU replay, with the store ``url`` when given."""
    env = dict(os.environ)
    env.pop("TUNESCOPE_GPU_REPLAY", None)
    if url is not None:
        env["TUNESCOPE_STORE"] = url
    return env


class StoreSink:
    """A sampler's sink that writes each batch at once, so a test reads it back right after
    ``flush()`` (the sampler process uses a Writer, which writes from its own thread)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def put(self, batch: Batch) -> None:
        self.store.write(batch)


def trial_key(url: str, trial: int) -> str:
    with open_store(url) as s:
        return s.get_trial(trial).key


def start_sampler(procs: list[Proc], url: str, trial: int, pid: int, interval: float) -> Proc:
    s = Proc(sampler_args(url, trial, pid, interval), env=clean_env(url))
    procs.append(s)
    assert s.expect() == "ready"
    return s


def stop_sampler(s: Proc) -> None:
    s.send("stop")
    assert s.p.wait(timeout=30) == 0


def sampled_after(url: str, trial: int, mark: float, n: int = 1, timeout: float = 60.0) -> None:
    """Wait until the sampler has stored ``n`` samples taken after ``mark`` (wall clock), so
    that it has seen what the child did before ``mark``, ``n`` times (a loaded machine delays
    samples: a fixed sleep may see none)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open_store(url) as s:
            found = s.list_series(trial, "cpu.capacity")
            if found and (s.read_samples(found[0].id)[0] > mark).sum() >= n:
                return
        time.sleep(0.1)
    raise AssertionError(f"the sampler stored fewer than {n} samples after the mark")


def series(url: str, trial: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    with open_store(url) as s:
        (info,) = s.list_series(trial, metric)
        t, v = s.read_samples(info.id)
    return t, v
