"""Every threshold the findings use, as one named setting each, with its unit and source.

Where an established profiler has a threshold for the same question, the default is its
value and ``source`` names it; where none exists the default is ours and ``source`` says so.
``docs/findings.md`` lists every setting (a test keeps the two in step). Change a setting with
:func:`dataclasses.replace` or by keyword: ``FindingSettings(input_wait_high_pct=30)``.

:func:`load_settings` gives the settings a project chose (what ``tunescope report`` and the
server use), each with where its value came from, highest first:

1. the environment: ``TUNESCOPE_<SETTING>``, the name upper-cased
   (``TUNESCOPE_INPUT_WAIT_HIGH_PCT=30``; an empty value counts as unset);
2. the ``[findings]`` table of ``tunescope.toml``;
3. the ``[tool.tunescope.findings]`` table of ``pyproject.toml``;
4. the default.

The files are looked up from the current directory upwards: the first directory that holds a
``tunescope.toml``, or a ``pyproject.toml`` with a ``[tool.tunescope]`` table, is the project's
(both of its files apply, ``tunescope.toml`` winning key by key); files in the directories
above it are not read. A bad value, an unknown key or a file that is not TOML raises
ConfigError, in one line naming the file (or variable) and the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from tunescope._env import SETTING_PREFIX
from tunescope.errors import ConfigError

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_SOURCE",
    "SETTINGS",
    "EffectiveSettings",
    "FindingSettings",
    "Setting",
    "SettingInfo",
    "config_files",
    "load_settings",
    "setting_info",
]

CONFIG_FILE = "tunescope.toml"
"""The project's own settings file (its ``[findings]`` table)."""
DEFAULT_SOURCE = "default"
"""The source of a setting nothing overrides."""
_TABLE = "findings"

TF_INPUT = (
    "TensorFlow Profiler input-pipeline analyzer "
    "(op_stats_to_input_pipeline_analysis.cc: kHighlyInfeedBoundThresholdInPercent = 20, "
    "kModeratelyInfeedBoundThresholdInPercent = 5)"
)
TORCH_TB = (
    "PyTorch Profiler TensorBoard plugin (torch_tb_profiler run_generator: "
    "recommends num_workers when DataLoader time > 5% of step time)"
)
DCGM_SM = (
    "NVIDIA DCGM profiling metrics, SM Activity (DCGM_FI_PROF_SM_ACTIVE, a 0-1 ratio): "
    "'a value less than 0.5 likely indicates ineffective GPU usage' (0.5 = 50%)"
)
SM_CPU = (
    "Amazon SageMaker Debugger rule CPUBottleneck "
    "(cpu_threshold = 90, gpu_threshold = 10, threshold = 50% of data points)"
)
SM_GPU_MEM = "Amazon SageMaker Debugger rule GPUMemoryIncrease (increase = 5%)"
SM_LOW_GPU = (
    "tunescope default (the issue); compare Amazon SageMaker Debugger rule "
    "LowGPUUtilization, which flags a 95th percentile under 70%"
)
TORCH_RETRIES = (
    "PyTorch CUDA caching allocator, torch.cuda.memory_stats()"
    "['num_alloc_retries']: failed cudaMalloc calls that freed the cache and "
    "retried; any retry means the device was full"
)
OURS = "tunescope default"
VLLM_GOODPUT = (
    "vllm bench serve --goodput (a request is good when each of its TTFT, TPOT and E2EL "
    "meets its target); the 99th percentile as in its reports"
)


class Setting:
    """One threshold of :class:`FindingSettings`: its default, unit, help and source.

    A field of ``FindingSettings`` is a ``Setting``: read on the class it is the typed
    reference a rule names the settings it uses with (``FindingSettings.min_samples``, which
    mypy checks), read on an instance it is the value (a float). A percentage is at most 100
    unless ``over_100`` (a rise or a headroom may exceed the whole); ``least`` is the smallest
    value allowed."""

    def __init__(
        self,
        default: float,
        unit: str,
        help_: str,
        source: str,
        *,
        least: float = 0.0,
        over_100: bool = False,
    ) -> None:
        self.default = default
        self.unit = unit
        self.help = help_
        self.source = source
        self.least = least
        self.most = 100.0 if unit == "%" and not over_100 else None
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Setting: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> float: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Setting | float:
        if obj is None:
            return self
        value: float = obj.__dict__[self.name]
        return value

    def __set__(self, obj: object, value: float) -> None:
        given: object = value  # the dataclass passes the Setting itself for "not given"
        obj.__dict__[self.name] = self.default if given is self else value

    def __repr__(self) -> str:
        return f"FindingSettings.{self.name}"

    def problem(self, v: object) -> str | None:
        """What is wrong with ``v`` as this setting's value (None: nothing)."""
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            return f"must be a number >= 0, not {v!r}"
        if self.most is not None and v > self.most:
            return f"is a percentage: 0 to {self.most:g}, not {v!r}"
        if v < self.least:
            return f"must be at least {self.least:g}, not {v!r}"
        return None


@dataclass(frozen=True)
class FindingSettings:
    """The thresholds of every finding rule (see ``docs/findings.md``)."""

    # --- input-bound
    input_wait_high_pct: Setting = Setting(
        20.0,
        "%",
        "Share of step time waiting for data at or above which a trial is highly input-bound.",
        TF_INPUT,
    )
    input_wait_moderate_pct: Setting = Setting(
        5.0,
        "%",
        "Share of step time waiting for data at or above which a trial is moderately input-bound.",
        f"{TF_INPUT}; {TORCH_TB}",
    )
    input_min_batches: Setting = Setting(
        20, "batches", "Fewest batches timed by trial.watch() before judging.", OURS
    )
    # --- near out-of-memory
    gpu_mem_near_oom_pct: Setting = Setting(
        90.0,
        "%",
        "Peak GPU memory (the trial's, or the device's used memory if higher) as a "
        "share of the device's memory, at or above which the trial is near out-of-memory.",
        f"{OURS} (the issue): 10% left for allocator fragmentation and for peaks shorter than "
        "a sampling interval",
    )
    alloc_retries_min: Setting = Setting(
        1,
        "count",
        "Torch allocator retries (rise of torch.alloc_retries over the trial) at or "
        "above which the trial is near out-of-memory.",
        TORCH_RETRIES,
    )
    cpu_mem_near_limit_pct: Setting = Setting(
        90.0,
        "%",
        "Peak CPU memory of the trial as a share of its memory limit (cgroup limit, "
        "else host RAM), at or above which the trial is near out-of-memory.",
        f"{OURS} (the issue), the same margin as for GPU memory",
    )
    # --- out of memory
    oom_window_s: Setting = Setting(
        60.0,
        "s",
        "Seconds before an out-of-memory end whose memory samples the oom finding shows.",
        f"{OURS} (the issue: the memory series' last minute)",
    )
    # --- GPU under-used / busy but not working
    gpu_underused_util_pct: Setting = Setting(
        50.0,
        "%",
        "Mean GPU utilization while training (evaluations left out) under which a "
        "GPU is under-used.",
        SM_LOW_GPU,
    )
    sm_active_low_pct: Setting = Setting(
        50.0,
        "%",
        "Mean SM activity (GPM) while training under which a GPU is under-used, or, "
        "with high utilization, busy but not working.",
        DCGM_SM,
    )
    busy_util_pct: Setting = Setting(
        80.0,
        "%",
        "Mean GPU utilization while training at or above which a GPU counts as busy "
        "for the busy-but-not-working rule.",
        f"{OURS} (the issue); NVML utilization counts "
        "any time a kernel runs, however few SMs it occupies",
    )
    busy_power_pct: Setting = Setting(
        40.0,
        "%",
        "Where the device has no GPM: mean power draw as a share of the power limit "
        "under which a busy GPU is reported as probably not working (a weaker signal).",
        f"{OURS} (a heuristic: a GPU whose SMs are full draws most of its power limit)",
    )
    # --- CPU-bound
    cpu_bound_cpu_pct: Setting = Setting(
        90.0,
        "%",
        "CPU utilization of the trial (of the capacity it may use) at or above which "
        "a sample counts as CPU-saturated.",
        SM_CPU,
    )
    cpu_bound_window_s: Setting = Setting(
        2.0,
        "s",
        "CPU utilization is averaged over this trailing window before it is compared: the "
        "kernel grants a CPU quota in 100 ms periods, so samples shorter than a second "
        "jitter around the true share.",
        f"{OURS} (Linux CFS bandwidth control: cpu.cfs_period_us defaults to 100 ms)",
    )
    cpu_bound_gpu_pct: Setting = Setting(
        10.0,
        "%",
        "GPU utilization (mean of the trial's GPUs) under which the GPU counts as "
        "waiting in a CPU-saturated sample.",
        SM_CPU,
    )
    cpu_bound_wait_pct: Setting = Setting(
        20.0,
        "%",
        "For trials without a GPU: data-wait share of the period at or above which "
        "the training loop counts as waiting in a CPU-saturated sample.",
        f"{OURS}, the highly input-bound threshold of {TF_INPUT}",
    )
    cpu_bound_share_pct: Setting = Setting(
        50.0,
        "%",
        "Share of training samples that are CPU-saturated while the GPU (or the "
        "loop) waits, at or above which the trial is CPU-bound.",
        SM_CPU,
    )
    # --- idle GPUs
    idle_gpu_util_pct: Setting = Setting(
        5.0,
        "%",
        "GPU utilization at or under which a sample counts as idle.",
        f"{OURS} ('near 0%'; SageMaker Debugger's LowGPUUtilization reports a GPU whose "
        "utilization never leaves 0 as not used)",
    )
    idle_gpu_share_pct: Setting = Setting(
        80.0,
        "%",
        "Share of a GPU's samples that are idle at or above which the GPU the trial "
        "holds is reported idle ('most of the run').",
        OURS,
    )
    idle_stretch_min_s: Setting = Setting(
        300.0,
        "s",
        "Shortest stretch of consecutive idle samples (busy at or under idle_gpu_util_pct) "
        "that counts as an idle stretch of a held GPU: in `tunescope usage` (idle GPU-hours) "
        "and the idle_stretch finding.",
        f"{OURS} (the issue: under 5% busy for at least 5 minutes)",
        least=1.0,
    )
    # --- sweep waste
    sweep_waste_pct: Setting = Setting(
        30.0,
        "%",
        "Share of a run's GPU-hours held by pruned and failed trials at or above which the "
        "sweep_waste finding reports the run.",
        f"{OURS}: with ASHA's defaults (reduction factor 3) about two thirds of the trials "
        "stop early yet hold far less than two thirds of the GPU-hours when pruning is timely",
    )
    sweep_waste_min_trials: Setting = Setting(
        4,
        "trials",
        "Fewest ended trials of a run before sweep_waste judges it (a sweep, not one run).",
        OURS,
        least=1.0,
    )
    # --- memory growth
    growth_min_pct: Setting = Setting(
        5.0,
        "%",
        "Rise of memory over the second half of training, as a share of its level "
        "there, at or above which memory is growing.",
        SM_GPU_MEM,
        over_100=True,
    )
    growth_min_mib: Setting = Setting(
        64.0,
        "MiB",
        "Smallest rise over the second half of training reported as growth "
        "(ignores allocator noise).",
        OURS,
    )
    growth_max_dip_pct: Setting = Setting(
        25.0,
        "%",
        "Largest fall of a segment's mean memory below an earlier segment's (in the second "
        "half of training), as a share of the rise, at or under which memory 'keeps "
        "climbing' (a sawtooth of allocations and frees falls back; a leak does not).",
        OURS,
    )
    growth_segments: Setting = Setting(
        8,
        "segments",
        "Segments the second half of training is cut into to test that memory keeps climbing.",
        OURS,
        least=2,
    )
    # --- evaluation spikes
    eval_spike_min_pct: Setting = Setting(
        10.0,
        "%",
        "Memory an evaluation adds over the level just before it, as a share of "
        "that level, at or above which the evaluation spike is reported.",
        OURS,
        over_100=True,
    )
    eval_spike_min_mib: Setting = Setting(
        64.0, "MiB", "Smallest memory an evaluation must add to be reported.", OURS
    )
    eval_spike_baseline_max_s: Setting = Setting(
        30.0,
        "s",
        "Longest stretch before an evaluation whose memory is its baseline (the level "
        "just before it): as long as the evaluation, at least three sampling intervals, at "
        "most this.",
        f"{OURS}: long enough to average out a few steps, short enough that earlier "
        "growth does not count as the evaluation's",
    )
    # --- right-size
    rightsize_headroom_pct: Setting = Setting(
        20.0,
        "%",
        "Headroom over the peak GPU memory the recommended GPU must hold.",
        f"{OURS} (the issue)",
        over_100=True,
    )
    mig_max_util_pct: Setting = Setting(
        15.0,
        "%",
        "95th percentile of GPU utilization while training at or under which a MIG "
        "slice is considered.",
        f"{OURS} (the issue); a 1g slice has 1/7 of the SMs",
    )
    rightsize_moderate_price_pct: Setting = Setting(
        50.0,
        "%",
        "Price of the recommended GPU, as a share of the current GPU's, at or under which "
        "the right-size finding is moderate (else low).",
        f"{OURS}: at half the price or less, as much is saved as is spent",
    )
    rightsize_slower_util_pct: Setting = Setting(
        50.0,
        "%",
        "Mean GPU utilization at or above which the right-size finding warns that a smaller "
        "GPU may run slower (its saving assumes the same run time).",
        f"{OURS}, the under-used threshold (gpu_underused_util_pct): a GPU busier than "
        "that is not mostly waiting, so fewer SMs may lengthen the run",
    )
    # --- packing trials on one GPU
    pack_mem_pct: Setting = Setting(
        25.0,
        "%",
        "Peak GPU memory of the trial as a share of the device's memory under which the "
        "trial could share the GPU with others (on every GPU it uses).",
        f"{OURS} (the issue): a quarter of the GPU, so four such trials fit on one",
    )
    pack_util_pct: Setting = Setting(
        25.0,
        "%",
        "Mean GPU utilization of the trial's own processes while training (gpu.proc_util; "
        "the device's gpu.util where that is absent) under which the trial could share the "
        "GPU with others (on every GPU it uses).",
        f"{OURS} (the issue): a quarter of the GPU's time, so four such trials fit on one",
    )
    # --- straggler node
    straggler_gap_pct: Setting = Setting(
        25.0,
        "%",
        "How far one node of a multi-node trial must lag the median of the others, as a "
        "share of the busier side, to be reported as the straggler: its mean GPU utilization "
        "that much lower, or, without GPUs, its processes' mean CPU that much higher (the "
        "others wait for it in every collective).",
        f"{OURS} (the issue: 25% lower GPU utilization than the median of the other nodes)",
    )
    straggler_min_diff_pct: Setting = Setting(
        5.0,
        "%",
        "Smallest difference, in percentage points, between the straggler's mean and the "
        "others' median (nodes that all idle differ by noise alone).",
        f"{OURS}, the idle-GPU threshold (idle_gpu_util_pct)",
    )
    # --- serving (load runs)
    serve_min_requests: Setting = Setting(
        10,
        "requests",
        "Fewest requests a load level must have sent before its latency percentiles are "
        "judged against the SLO.",
        f"{OURS}: the 99th percentile of fewer than 10 requests is their maximum",
    )
    serve_busy_pct: Setting = Setting(
        80.0,
        "%",
        "Mean compute activity of the engine while requests wait (SM activity, else GPU "
        "utilization, else the engine's CPU utilization) under which its compute counts as "
        "not busy: the requests wait for a slot, not for compute.",
        f"{OURS}, the busy threshold of busy_not_working (busy_util_pct)",
    )
    serve_waiting_share_pct: Setting = Setting(
        10.0,
        "%",
        "Share of a level's engine samples with requests waiting (serve.waiting > 0, or "
        "serve.requests_deferred rising) at or above which the level queues.",
        f"{OURS}: a tenth of the level, more than the odd burst of a closed loop",
    )
    serve_kv_high_pct: Setting = Setting(
        90.0,
        "%",
        "Peak KV-cache use (serve.kv_use) at or above which a level is KV-cache bound.",
        f"{OURS} (the issue); vLLM preempts requests when its KV cache is full "
        "(gpu_memory_utilization 0.9 leaves the rest for activations)",
    )
    serve_dram_high_pct: Setting = Setting(
        50.0,
        "%",
        "Mean DRAM activity (gpu.dram_active) of the engine's GPU during a level at or above "
        "which decoding counts as memory-bandwidth heavy.",
        f"{OURS}, the under-used threshold of SM activity ({DCGM_SM}) read for memory",
    )
    serve_tensor_low_pct: Setting = Setting(
        20.0,
        "%",
        "Mean tensor-core activity (gpu.tensor_active) under which a bandwidth-heavy level "
        "is decode memory-bandwidth bound (the math units wait on memory).",
        f"{OURS} (the issue: tensor activity low while DRAM activity is high)",
    )
    serve_bw_near_pct: Setting = Setting(
        70.0,
        "%",
        "The bandwidth bound of TPOT (the model's weights read once per decode step at the "
        "GPU's datasheet bandwidth) as a share of the median TPOT measured, at or above which "
        "TPOT is near what the GPU's bandwidth allows.",
        f"{OURS}: decode kernels rarely reach more than 70-80% of datasheet bandwidth",
    )
    serve_slo_margin_pct: Setting = Setting(
        50.0,
        "%",
        "p99 TTFT and TPOT at the top level, as a share of their targets, at or under which "
        "the SLO is met with margin (over-provisioned).",
        f"{OURS}; goodput as {VLLM_GOODPUT}",
    )
    serve_overprov_sm_pct: Setting = Setting(
        30.0,
        "%",
        "Mean SM activity (else GPU utilization) of the engine at the top level under which "
        "its GPU is over-provisioned.",
        f"{OURS} (the issue); compare {DCGM_SM}",
    )
    serve_overprov_kv_pct: Setting = Setting(
        50.0,
        "%",
        "Peak KV-cache use at the top level under which the engine's memory is over-provisioned.",
        f"{OURS} (the issue)",
    )
    # --- data sufficiency
    min_samples: Setting = Setting(
        5, "samples", "Fewest samples of a series (while training) before a rule judges it.", OURS
    )

    def __post_init__(self) -> None:
        for name, setting in SETTINGS.items():
            problem = setting.problem(getattr(self, name))
            if problem is not None:
                raise ConfigError(f"finding setting {name} {problem}")
        if self.input_wait_moderate_pct > self.input_wait_high_pct:
            raise ConfigError("input_wait_moderate_pct must not exceed input_wait_high_pct")


SETTINGS: dict[str, Setting] = {
    f.name: f.default for f in dataclasses.fields(FindingSettings) if isinstance(f.default, Setting)
}
"""Every setting by name, in table order."""


@dataclass(frozen=True)
class SettingInfo:
    """One setting as the docs list it."""

    name: str
    default: float
    unit: str
    help: str
    source: str


def setting_info() -> list[SettingInfo]:
    """Every setting of :class:`FindingSettings` with its default, unit, help and source."""
    return [
        SettingInfo(name, float(s.default), s.unit, s.help, s.source)
        for name, s in SETTINGS.items()
    ]


# ---------------------------------------------------------------------- from the project
@dataclass(frozen=True)
class EffectiveSettings:
    """The settings in force and, for each, where its value came from: ``default``, a
    variable (``$TUNESCOPE_INPUT_WAIT_HIGH_PCT``) or a file and its table
    (``/repo/pyproject.toml [tool.tunescope.findings]``)."""

    settings: FindingSettings = field(default_factory=FindingSettings)
    sources: Mapping[str, str] = field(default_factory=dict)

    def source(self, name: str) -> str:
        """Where setting ``name``'s value came from."""
        return self.sources.get(name, DEFAULT_SOURCE)

    def changed(self) -> list[tuple[str, float, str]]:
        """(name, value, source) of every setting not at its default, in table order."""
        return [
            (name, getattr(self.settings, name), self.source(name))
            for name in SETTINGS
            if self.source(name) != DEFAULT_SOURCE
        ]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{name: {"value", "unit", "default", "source"}}`` for every setting (JSON)."""
        return {
            name: {
                "value": getattr(self.settings, name),
                "unit": s.unit,
                "default": s.default,
                "source": self.source(name),
            }
            for name, s in SETTINGS.items()
        }

    @classmethod
    def of(cls, settings: FindingSettings | EffectiveSettings | None) -> EffectiveSettings:
        """``settings`` as effective settings: None gives the defaults; a
        :class:`FindingSettings` counts each value that differs from its default as set by
        the caller (source ``argument``)."""
        if isinstance(settings, EffectiveSettings):
            return settings
        if settings is None:
            return cls()
        return cls(
            settings,
            {
                name: "argument"
                for name, s in SETTINGS.items()
                if getattr(settings, name) != s.default
            },
        )


def _has_tool_table(path: Path) -> bool:
    tool = _read_toml(path).get("tool")
    return isinstance(tool, dict) and "tunescope" in tool


def config_files(start: str | os.PathLike[str] | None = None) -> list[Path]:
    """The project's settings files, lowest precedence first: from ``start`` (default: the
    current directory) upwards, the first directory holding a ``tunescope.toml`` or a
    ``pyproject.toml`` with a ``[tool.tunescope]`` table gives its ``pyproject.toml`` (if it
    has that table) then its ``tunescope.toml`` (if any). ConfigError for a file there that
    is not TOML."""
    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        found = []
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and _has_tool_table(pyproject):
            found.append(pyproject)
        own = folder / CONFIG_FILE
        if own.is_file():
            found.append(own)
        if found:
            return found
    return []


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None


def _file_values(path: Path) -> tuple[dict[str, Any], str]:
    """The ``findings`` table of one settings file and how to name it in messages."""
    data = _read_toml(path)
    if path.name == CONFIG_FILE:
        where, root = f"{path} [{_TABLE}]", data
        prefix = ""
    else:
        where, root = f"{path} [tool.tunescope.{_TABLE}]", data["tool"]["tunescope"]
        prefix = "tool.tunescope."
    if not isinstance(root, dict):
        raise ConfigError(f"{path}: {prefix.rstrip('.')} must be a table")
    for key in root:
        if key != _TABLE:
            raise ConfigError(
                f"{path}: unknown key {prefix}{key} (tunescope reads only [{prefix}{_TABLE}])"
            )
    table = root.get(_TABLE, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {prefix}{_TABLE} must be a table of settings")
    for key, value in table.items():
        if key not in SETTINGS:
            raise ConfigError(f"{where}: unknown setting {key!r} (see docs/findings.md#settings)")
        problem = SETTINGS[key].problem(value)
        if problem is not None:
            raise ConfigError(f"{where}: {key} {problem}")
    return table, where


def _env_values(environ: Mapping[str, str]) -> dict[str, tuple[float, str]]:
    out = {}
    for name, setting in SETTINGS.items():
        var = SETTING_PREFIX + name.upper()
        raw = environ.get(var, "").strip()
        if not raw:
            continue
        try:
            value: object = float(raw)
        except ValueError:
            value = raw
        problem = setting.problem(value)
        if problem is not None:
            raise ConfigError(f"${var}: {name} {problem}")
        assert isinstance(value, float)
        out[name] = (value, f"${var}")
    return out


def load_settings(
    start: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> EffectiveSettings:
    """The finding settings in force (see the module doc for the precedence and the lookup),
    from the files found from ``start`` (default: the current directory) and ``environ``
    (default: ``os.environ``). ConfigError, in one line, for anything wrong."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for path in config_files(start):
        table, where = _file_values(path)
        for key, value in table.items():
            values[key], sources[key] = value, where
    for key, (value, var) in _env_values(os.environ if environ is None else environ).items():
        values[key], sources[key] = value, var
    low, high = "input_wait_moderate_pct", "input_wait_high_pct"
    lo, hi = values.get(low, SETTINGS[low].default), values.get(high, SETTINGS[high].default)
    if lo > hi:  # the one rule between two settings, which may come from two places
        raise ConfigError(
            f"{low} = {lo:g} ({sources.get(low, DEFAULT_SOURCE)}) must not exceed "
            f"{high} = {hi:g} ({sources.get(high, DEFAULT_SOURCE)})"
        )
    return EffectiveSettings(FindingSettings(**values), sources)
