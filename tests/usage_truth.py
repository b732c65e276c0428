"""A generated store of known usage (SYNTHETIC readings, labelled so: runs are named
``synthetic-…``, every series carries the note ``synthetic``, every trial the param
``synthetic: true``): 3 projects, 5 people, 2 GPU models, 40 trials over 90 days, sampled once
a minute, with planted idle stretches (and idle moments too short to count), failed and pruned
trials, and CPU-only trials.

Each trial is planned minute by minute: minute m of a trial that starts at S is the period
(S + 60 m, S + 60 (m + 1)], summed up by the samples taken at its end, so the truth of every
figure follows from the plan by counting minutes (:func:`truth`), without reading the store.
Utilizations are multiples of 5 %, so every busy figure is a whole number of seconds.

:class:`Counting` wraps a store to count the trials a usage query computes (rather than reads
back from the figures its store kept).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunescope.store import Batch, Store, TrialEnd, TrialSpec, new_key

DAY0 = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()  # a Monday
DAYS = 90
MIB = 1024.0**2
GIB = 1024.0**3
MODELS = {  # name as NVML reports it -> (memory total in bytes, has GPM)
    "NVIDIA H100 80GB HBM3": (81559 * MIB, True),
    "NVIDIA A100-SXM4-80GB": (81920 * MIB, False),
}
PROJECTS = ("vision", "speech", "nlp")
PEOPLE = ("ana", "bo", "chen", "dara", "eli")
HOSTS = ("gpu-node-1", "gpu-node-2", "gpu-node-3")
IDLE_PCT = 5.0
IDLE_MIN_S = 300.0


@dataclass
class GpuPlan:
    index: int
    util: list[float]  # gpu.util per minute
    sm: list[float] | None  # gpu.sm_active per minute (GPM GPUs)
    mem: list[float]  # gpu.mem bytes per minute

    def busy(self) -> list[float]:
        return self.sm if self.sm is not None else self.util


@dataclass
class TrialPlan:
    project: str
    user: str
    run: str
    name: str
    host: str
    model: str | None
    start: float
    minutes: int
    state: str
    gpus: list[GpuPlan]
    cpu_util: list[float]
    cores: float
    objective: float | None = None
    key: str = field(default_factory=new_key)


def _segments(rng: random.Random, minutes: int, plant_idle: bool) -> list[float]:
    """Utilization per minute: busy segments (multiples of 5 %), with a planted idle stretch
    (0-5 %, 5 to 40 minutes) and a short idle moment (under 5 minutes) when asked."""
    out = [float(rng.choice(range(40, 101, 5))) for _ in range(minutes)]
    if plant_idle and minutes >= 60:
        length = rng.randint(5, 40)
        at = rng.randint(0, minutes - length)
        for m in range(at, at + length):
            out[m] = float(rng.choice((0, 5)))
        short = rng.randint(1, 4)
        at2 = rng.randint(0, minutes - short)
        if all(out[m] > IDLE_PCT for m in range(max(0, at2 - 1), min(minutes, at2 + short + 1))):
            for m in range(at2, at2 + short):
                out[m] = 0.0
    return out


def plan(seed: int = 20) -> list[TrialPlan]:
    """The 40 trials (deterministic)."""
    rng = random.Random(seed)
    trials = []
    runs: dict[str, int] = {}
    states = ["completed"] * 26 + ["failed"] * 6 + ["pruned"] * 8
    rng.shuffle(states)
    for i in range(40):
        project = PROJECTS[i % 3]
        sweep = (i // 3) % 2  # two sweeps of 6 or 7 trials per project, one person's each
        user = PEOPLE[(2 * (i % 3) + sweep) % 5]
        run = f"synthetic-{project}-{user}-sweep-{sweep}"
        runs[run] = runs.get(run, 0) + 1
        cpu_only = i % 13 == 7  # three CPU-only trials
        model = None if cpu_only else list(MODELS)[i % 2]
        start = DAY0 + (i * (DAYS - 2) * 36 + rng.randint(0, 1000)) * 60.0  # spread over the days
        if i == 3:
            start = DAY0 + 86400.0 - 30 * 60.0  # crosses the first midnight
        minutes = rng.randint(20, 720)
        if states[i] == "pruned":
            minutes = rng.randint(20, 120)
        gpus = []
        if model is not None:
            gpm = MODELS[model][1]
            for g in range(1 if i % 3 else 2):
                util = _segments(rng, minutes, plant_idle=i % 2 == 0 or g == 1)
                sm = [float(5 * round(u / 10)) for u in util] if gpm else None
                top = rng.choice((12, 30, 74))
                mem = [float(rng.choice(range(4, top + 1, 2))) * GIB for _ in range(minutes)]
                gpus.append(GpuPlan(g, util, sm, mem))
        trials.append(
            TrialPlan(
                project=project,
                user=user,
                run=run,
                name=f"trial-{runs[run] - 1}",
                host=HOSTS[i % 3],
                model=model,
                start=start,
                minutes=minutes,
                state=states[i],
                gpus=gpus,
                cpu_util=[float(rng.choice(range(5, 101, 5))) for _ in range(minutes)],
                cores=float(rng.choice((4, 8, 16))),
                objective=None if states[i] == "failed" else round(rng.uniform(0.2, 1.5), 4),
            )
        )
    return trials


def write(store: Store, trials: Sequence[TrialPlan]) -> None:
    """Write the plan through the store's one write path (batches)."""
    for p in trials:
        spec = TrialSpec(
            key=p.key,
            run=p.run,
            name=p.name,
            params={"synthetic": True, "optuna.direction": "minimize"},
            host=p.host,
            start=p.start,
            interval=60.0,
            project=p.project,
            os_user=p.user,
        )
        samples: list[tuple[str, str | None, str | None, float, float]] = []
        for m in range(p.minutes):
            t = p.start + 60.0 * (m + 1)
            samples.append(("cpu.util", None, "synthetic", t, p.cpu_util[m]))
            samples.append(("cpu.capacity", None, "synthetic", t, p.cores))
            for g in p.gpus:
                d = str(g.index)
                samples.append(("gpu.util", d, "synthetic", t, g.util[m]))
                samples.append(("gpu.mem", d, "synthetic", t, g.mem[m]))
                if p.model is not None:
                    samples.append(("gpu.mem.total", d, "synthetic", t, MODELS[p.model][0]))
                if g.sm is not None:
                    samples.append(("gpu.sm_active", d, "synthetic", t, g.sm[m]))
        where: dict[str, Any] = {"hostname": p.host}
        if p.gpus:
            where["gpus"] = [{"index": g.index, "name": p.model} for g in p.gpus]
        end = TrialEnd(p.state, p.start + 60.0 * p.minutes)
        scalars = () if p.objective is None else (("eval/objective", 1, end.t - 1.0, p.objective),)
        batch = Batch(
            p.key,
            spec=spec,
            samples=tuple(samples),
            scalars=scalars,
            host=p.host,
            where=where,
            end=end,
        )
        for part in batch.split():
            store.write(part)
    store.compact()


# ------------------------------------------------------------------ the truth, by counting


def _idle_minutes(busy: Sequence[float]) -> set[int]:
    out: set[int] = set()
    run: list[int] = []
    for m, v in enumerate([*busy, 101.0]):
        if v <= IDLE_PCT:
            run.append(m)
            continue
        if len(run) * 60.0 >= IDLE_MIN_S:
            out.update(run)
        run = []
    return out


def _keys(p: TrialPlan, t_end: float) -> dict[str, str | None]:
    day = dt.datetime.fromtimestamp(t_end - 60.0, dt.UTC).date()
    year, week, _ = day.isocalendar()
    return {
        "project": p.project,
        "user": p.user,
        "run": p.run,
        "host": p.host,
        "gpu_model": p.model,
        "day": day.isoformat(),
        "week": f"{year}-W{week:02d}",
    }


def truth(
    trials: Sequence[TrialPlan],
    by: Sequence[str],
    since: float,
    until: float,
    prices: Mapping[str, float] | None = None,
) -> dict[tuple[str | None, ...], dict[str, Any]]:
    """Every figure of every group, by counting the plan's minutes inside [since, until]."""
    prices = prices or {}
    rows: dict[tuple[str | None, ...], dict[str, Any]] = {}
    for p in trials:
        idle = [_idle_minutes(g.busy()) for g in p.gpus]
        for m in range(p.minutes):
            t1 = p.start + 60.0 * (m + 1)
            if t1 - 60.0 < since or t1 > until:
                continue
            k = _keys(p, t1)
            key = tuple(k[b] for b in by)
            r = rows.setdefault(
                key,
                {
                    "gpu_held_s": 0.0,
                    "gpu_busy_s": 0.0,
                    "gpu_idle_s": 0.0,
                    "mem_sum": 0.0,
                    "mem_peak": None,
                    "cpu_core_s": 0.0,
                    "cpu_quota_core_s": 0.0,
                    "trials": set(),
                    "failed_gpu_s": 0.0,
                    "pruned_gpu_s": 0.0,
                    "lost_quota": 0.0,
                    "cost_usd": None,
                    "busy_by": set(),
                },
            )
            r["trials"].add(p.key)
            r["cpu_core_s"] += p.cpu_util[m] / 100.0 * p.cores * 60.0
            r["cpu_quota_core_s"] += p.cores * 60.0
            if p.state in ("failed", "pruned"):
                r["lost_quota"] += p.cores * 60.0
            for g, idle_g in zip(p.gpus, idle, strict=True):
                assert p.model is not None
                r["gpu_held_s"] += 60.0
                r["gpu_busy_s"] += g.busy()[m] / 100.0 * 60.0
                r["gpu_idle_s"] += 60.0 if m in idle_g else 0.0
                share = g.mem[m] / MODELS[p.model][0]
                r["mem_sum"] += share * 60.0
                r["mem_peak"] = share if r["mem_peak"] is None else max(r["mem_peak"], share)
                r["busy_by"].add("sm_active" if g.sm is not None else "util")
                if p.state == "failed":
                    r["failed_gpu_s"] += 60.0
                if p.state == "pruned":
                    r["pruned_gpu_s"] += 60.0
                if p.model in prices:
                    r["cost_usd"] = (r["cost_usd"] or 0.0) + prices[p.model] / 60.0
    out = {}
    for key, r in rows.items():
        held = r["gpu_held_s"]
        lost = r["failed_gpu_s"] + r["pruned_gpu_s"]
        base = held if held > 0 else r["cpu_quota_core_s"]
        lost = lost if held > 0 else r["lost_quota"]
        out[key] = {
            "gpu_held_s": held,
            "gpu_busy_s": r["gpu_busy_s"],
            "gpu_idle_s": r["gpu_idle_s"],
            "busy_by": "+".join(sorted(r["busy_by"])) or None,
            "mem_peak_pct": None if r["mem_peak"] is None else 100.0 * r["mem_peak"],
            "mem_mean_pct": 100.0 * r["mem_sum"] / held if held > 0 else None,
            "cpu_core_s": r["cpu_core_s"],
            "cpu_quota_core_s": r["cpu_quota_core_s"],
            "trials": len(r["trials"]),
            "failed_gpu_s": r["failed_gpu_s"],
            "pruned_gpu_s": r["pruned_gpu_s"],
            "failed_pruned_pct": 100.0 * lost / base if base > 0 else None,
            "cost_usd": r["cost_usd"],
        }
    return out


# ------------------------------------------------------------------ a store as usage reads it


class Counting:
    """A store as usage_of sees it, counting the trials it computes (each is listed once by
    ``trial_usage``); ``fresh``: without the kept usage (a store that keeps none)."""

    def __init__(self, store: Store, *, fresh: bool = False) -> None:
        self._store = store
        self._fresh = fresh
        self.computed: list[int] = []

    def list_series(self, trial_id: int, metric: str | None = None) -> Any:
        self.computed.append(trial_id)
        return self._store.list_series(trial_id, metric)

    def __getattr__(self, name: str) -> Any:
        if self._fresh and name in ("kept_usage", "keep_usage", "unkept_usage"):
            raise AttributeError(name)
        return getattr(self._store, name)
