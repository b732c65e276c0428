"""`tunescope load URL`: a sweep of load levels against an OpenAI-compatible server, each
level a trial of one run (see docs/serving.md).

Everything that can be checked is checked before anything is written: the options, the
prompts file, and the server (it must answer ``GET /v1/models`` with a model list). With
``--server-cmd`` the engine is started first under ``tunescope run`` (its own trial in the
same run, sampled like a training), waited for, and stopped after the sweep.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

from tunescope import _clock
from tunescope._names import default_run_name
from tunescope.analyze import Slo, level_stats, parse_slo
from tunescope.errors import ConfigError, NotFound
from tunescope.serving import (
    LevelResult,
    LoadConfig,
    LoadError,
    Origin,
    TokenSpec,
    parse_levels,
    probe,
    read_prompts,
    run_sweep,
)
from tunescope.store import Event, absolute_url, open_store, os_user, project_of, redact

__all__ = ["load_command"]

MAX_REQUESTS = 1_000_000
MAX_SECONDS = 86_400.0
DEFAULT_REQUESTS = 50
"""Requests per level when neither --requests nor --seconds is given."""


def _origin(url: str, option: str) -> Origin:
    try:
        return Origin.parse(url)
    except ValueError as exc:
        raise ConfigError(f"{option}: {exc}") from None


def load_command(
    url: str,
    *,
    concurrency: str | None,
    rate: str | None,
    burstiness: float | None,
    requests: int | None,
    seconds: float | None,
    prompt_tokens: str,
    output_tokens: str,
    prompts: str | None,
    api: str,
    model: str | None,
    slo: str | None,
    engine_metrics: str | None,
    timeout: float,
    ignore_eos: bool,
    seed: int,
    run: str | None,
    store: str | None,
    server_cmd: str | None,
    server_wait: float,
) -> int:
    """Run the sweep; 0 when every level completed, 1 when one failed (the sweep stops
    there, what ran is kept). Bad input raises ConfigError before anything is written."""
    origin = _origin(url, "URL")
    if concurrency is not None and rate is not None:
        raise ConfigError("give --concurrency or --rate, not both")
    if rate is not None:
        mode, levels = "rate", parse_levels(rate, "--rate", integer=False, limit=1e5)
    else:
        mode = "concurrency"
        levels = parse_levels(concurrency or "1", "--concurrency", integer=True, limit=4096)
    if burstiness is not None:
        if mode != "rate":
            raise ConfigError("--burstiness applies to --rate levels only")
        if not (math.isfinite(burstiness) and 0 < burstiness <= 1000):
            raise ConfigError(f"--burstiness {burstiness}: use a number above 0, at most 1000")
    if requests is not None and not 1 <= requests <= MAX_REQUESTS:
        raise ConfigError(f"--requests {requests}: use 1 to {MAX_REQUESTS}")
    if seconds is not None and not (math.isfinite(seconds) and 0 < seconds <= MAX_SECONDS):
        raise ConfigError(f"--seconds {seconds}: use above 0, at most {MAX_SECONDS:g}")
    if not (math.isfinite(timeout) and 0 < timeout <= 3600):
        raise ConfigError(f"--timeout {timeout}: use above 0, at most 3600 seconds")
    if api not in ("completions", "chat"):
        raise ConfigError(f"--api {api!r}: use completions or chat")
    if requests is None and seconds is None:
        requests = DEFAULT_REQUESTS
    target = parse_slo(slo) if slo is not None else Slo()
    slos = {k[:-2]: v for k, v in target.to_dict().items() if v is not None}
    p_tok = TokenSpec.parse(prompt_tokens, "--prompt-tokens")
    o_tok = TokenSpec.parse(output_tokens, "--output-tokens")
    prompt_list = read_prompts(prompts) if prompts is not None else None
    if engine_metrics is not None and engine_metrics.strip().lower() == "none":
        metrics, metrics_path = None, ""
    else:
        murl = engine_metrics
        if murl is None:
            root = origin.prefix[:-3] if origin.prefix.endswith("/v1") else origin.prefix
            murl = f"{origin.scheme}://{origin.host}:{origin.port}{root}/metrics"
        metrics = _origin(murl, "--engine-metrics")
        metrics_path = metrics.prefix or "/metrics"
        metrics = Origin(metrics.scheme, metrics.host, metrics.port, "")
    cmd: list[str] | None = None
    if server_cmd is not None:
        try:
            cmd = shlex.split(server_cmd)
        except ValueError as exc:
            raise ConfigError(f"--server-cmd {server_cmd!r}: {exc}") from None
        if not cmd:
            raise ConfigError("--server-cmd is empty")
        if shutil.which(cmd[0]) is None:
            raise ConfigError(f"--server-cmd: command not found: {cmd[0]}")
    if not (math.isfinite(server_wait) and 0 < server_wait <= 3600):
        raise ConfigError(f"--server-wait {server_wait}: use above 0, at most 3600 seconds")
    store_url = absolute_url(store)
    run_name = run or default_run_name("load")
    if not run_name.strip():
        raise ConfigError("--run must not be empty")
    _clock.start()
    try:
        cfg = LoadConfig(
            url=url,
            origin=origin,
            mode=mode,
            levels=levels,
            requests=requests,
            seconds=seconds,
            prompt_tokens=p_tok,
            output_tokens=o_tok,
            prompts=prompt_list,
            api=api,
            model=model,
            slo=slos,
            metrics=metrics,
            metrics_path=metrics_path,
            timeout=timeout,
            burstiness=(burstiness or 1.0) if mode == "rate" else None,
            ignore_eos=ignore_eos,
            seed=seed,
            run=run_name,
            store_url=store_url,
            project=project_of(store_url),
            os_user=os_user(),
        )
        engine: _Engine | None = None
        try:
            if cmd is not None:
                engine = _Engine(cmd, run_name, store_url)
                key = engine.wait_ready(cfg, server_wait)
                cfg = _with_key(cfg, key)
            try:
                info = probe(cfg)
            except LoadError as exc:
                raise ConfigError(str(exc)) from None
            print(
                f"tunescope: run {run_name!r}: {len(levels)} level(s) against {origin.base} "
                f"(engine {info.engine or 'unknown'}, model {info.model or 'unknown'}) "
                f"-> {redact(store_url)}",
                file=sys.stderr,
            )
            print(_HEADER)
            # what start-up made (imports, the probe) out of the collector's full passes:
            # at hundreds of requests a second each pass walked it all again (~15 µs a request)
            gc.freeze()
            results = run_sweep(cfg, info, lambda r: print(_row(r, target), flush=True))
        finally:
            if engine is not None:
                engine.stop()
    finally:
        _clock.stop()
    failed = [r for r in results if r.failed]
    for r in failed:
        print(f"tunescope: level {r.name} failed: {r.failed}", file=sys.stderr)
    return 1 if failed else 0


def _with_key(cfg: LoadConfig, key: str | None) -> LoadConfig:
    from dataclasses import replace

    return replace(cfg, engine_trial_key=key)


_HEADER = (
    f"{'level':>8} {'ok':>6} {'err':>5} {'req/s':>8} {'out tok/s':>10} "
    f"{'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'E2EL p50':>9} {'goodput':>8}"
)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}ms"


def _per_s(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _row(r: LevelResult, slo: Slo) -> str:
    """One level's line of the table, from the serving analysis' :func:`level_stats` of its
    requests (as they are stored: one ``request`` event each), goodput under ``slo``."""
    s = level_stats([Event(0, *x.event()) for x in r.results], slo)
    line = (
        f"{r.name:>8} {s.ok:>6} {s.errors:>5} {_per_s(s.request_throughput, 2):>8} "
        f"{_per_s(s.output_throughput, 1):>10} {_ms(s.ttft.p50):>9} {_ms(s.ttft.p99):>9} "
        f"{_ms(s.tpot.p50):>9} {_ms(s.e2el.p50):>9} {_per_s(s.goodput, 2):>8}"
    )
    return line + ("  FAILED" if r.failed else "")


class _Engine:
    """The engine started under ``tunescope run`` (its own trial in the run)."""

    def __init__(self, cmd: list[str], run: str, store_url: str):
        self.run = run
        self.store_url = store_url
        self.name = self._free_name()
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tunescope",
                "run",
                "--run",
                run,
                "--trial",
                self.name,
                "--store",
                store_url,
                "--",
                *cmd,
            ],
            env=env,
            start_new_session=True,
        )

    def _free_name(self) -> str:
        with contextlib.suppress(NotFound), open_store(self.store_url) as st:
            names = {t.name for t in st.list_trials(st.get_run(self.run).id)}
            k = 1
            while (name := "engine" if k == 1 else f"engine-{k}") in names:
                k += 1
            return name
        return "engine"

    def _key(self) -> str | None:
        with contextlib.suppress(NotFound), open_store(self.store_url) as st:
            return st.find_trial(st.get_run(self.run).id, self.name).key
        return None

    def wait_ready(self, cfg: LoadConfig, wait: float) -> str | None:
        """Wait until the server answers its model list; the engine trial's key."""
        give_up = time.monotonic() + wait
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ConfigError(f"--server-cmd ended with code {code} before it was ready")
            try:
                probe(cfg)
                break
            except LoadError:
                if time.monotonic() >= give_up:
                    raise ConfigError(
                        f"--server-cmd: {cfg.origin.base} not ready within {wait:g} s"
                    ) from None
                time.sleep(0.25)
        return self._key()

    def stop(self) -> None:
        """SIGTERM to the wrapper (it forwards it to the engine), then SIGKILL after 30 s."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
