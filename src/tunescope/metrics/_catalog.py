"""The metric catalog: one row per metric, read by the sampler, the store, the API, the page
and the docs (docs/metrics.md is checked against it by the tests).

Values are stored in base units (bytes, percent, watts, degrees Celsius, MHz, joules, seconds);
``scale`` turns a stored value into the display ``unit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["host", "nvml", "gpm", "torch", "sdk", "engine"]
Scope = Literal["trial", "gpu", "host", "netns"]

GIB = 1024.0**3
_MIB = 1024.0**2


@dataclass(frozen=True)
class Metric:
    """One row of the catalog.

    key: stable identifier used in the store, the API and URLs (``gpu.mem``).
    label: what the page and reports call it ("GPU Memory Usage").
    unit: display unit; ``scale`` multiplies a stored base-unit value into it.
    source: which probe produces it (``engine``: a serving engine's own metrics, scraped by
        ``tunescope load``; see docs/serving.md).
    scope: ``trial`` (the trial's process tree), ``gpu`` (one series per GPU index),
        ``host`` (the whole machine) or ``netns`` (the network namespace of the trial: Linux
        counts network bytes per interface, not per process).
    headline: one of the four metrics of the seed page, shown first.
    markers: whether optimizer-step and evaluation markers are drawn on its chart.
    max_value: a fixed top for the y axis in display units (100 for percentages), else None.
    equivalent: the psutil call or ``nvidia-smi --query-gpu=`` field that gives the same number.
    description: one sentence for the docs and tooltips.
    """

    key: str
    label: str
    unit: str
    scale: float
    source: Source
    scope: Scope
    headline: bool
    markers: bool
    max_value: float | None
    equivalent: str
    description: str

    def display(self, value: float | None) -> float | None:
        """A stored value in display units; None stays None (missing, never zero)."""
        return None if value is None else value * self.scale


def _m(
    key: str,
    label: str,
    unit: str,
    source: Source,
    scope: Scope,
    equivalent: str,
    description: str,
    *,
    scale: float = 1.0,
    headline: bool = False,
    markers: bool = False,
    max_value: float | None = None,
) -> Metric:
    return Metric(
        key,
        label,
        unit,
        scale,
        source,
        scope,
        headline,
        markers,
        max_value,
        equivalent,
        description,
    )


CATALOG: tuple[Metric, ...] = (
    # --- the four headline metrics of the Resource Utilization page ---------------------
    _m(
        "cpu.util",
        "CPU Utilization Percent",
        "%",
        "host",
        "trial",
        "sum of psutil.Process.cpu_times() deltas over the process tree / (wall time x cores "
        "the trial may use)",
        "CPU time of the trial's process tree as a percentage of the CPU capacity it may use "
        "(its cgroup quota or CPU affinity, not the host's core count).",
        headline=True,
        max_value=100.0,
    ),
    _m(
        "gpu.util",
        "GPU Utilization Percent",
        "%",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=utilization.gpu",
        "Percentage of the sample period in which one or more kernels ran on the GPU, by any "
        "process: the whole device's, shared with whoever else runs on it (the trial's own "
        "share is gpu.proc_util); the mean of the driver's utilization samples since the "
        "previous sample (nvmlDeviceGetSamples), else the driver's own last period. High "
        "values do not prove useful work: compare with SM activity.",
        headline=True,
        max_value=100.0,
    ),
    _m(
        "cpu.mem",
        "CPU Memory Usage",
        "GiB",
        "host",
        "trial",
        "sum of psutil.Process.memory_full_info().pss over the process tree",
        "RAM held by the trial's process tree, each page counted once (proportional set size, "
        "so forked data-loader workers that share pages are not double-counted).",
        scale=1 / GIB,
        headline=True,
        markers=True,
    ),
    _m(
        "gpu.mem",
        "GPU Memory Usage",
        "GiB",
        "nvml",
        "gpu",
        "nvidia-smi --query-compute-apps=pid,used_memory (summed over the trial's pids)",
        "VRAM held by the trial's processes on each GPU. Where the driver cannot attribute "
        "memory to processes, the device's used memory is recorded and the series is flagged; "
        "a process query that fails after it has worked leaves a gap, never 0.",
        scale=1 / GIB,
        headline=True,
        markers=True,
    ),
    # --- further metrics -------------------------------------------------------------------
    _m(
        "cpu.mem.limit",
        "CPU Memory Limit",
        "GiB",
        "host",
        "trial",
        "cgroup memory.max, else psutil.virtual_memory().total",
        "The most RAM the trial may hold: its cgroup memory limit, else the host's RAM.",
        scale=1 / GIB,
    ),
    _m(
        "cpu.capacity",
        "CPU Capacity",
        "cores",
        "host",
        "trial",
        "min(cgroup cpu.max quota/period, len(os.sched_getaffinity(pid)))",
        "How many cores' worth of CPU time the trial may use; 100% CPU utilization means this.",
    ),
    _m(
        "cpu.procs",
        "Processes",
        "count",
        "host",
        "trial",
        "len([p] + p.children(recursive=True))",
        "Number of live processes in the trial's process tree (training, data-loader workers, "
        "children).",
    ),
    _m(
        "host.cpu.util",
        "Host CPU Utilization",
        "%",
        "host",
        "host",
        "psutil.cpu_percent()",
        "CPU use of the whole machine across all its cores, every process included.",
        max_value=100.0,
    ),
    _m(
        "host.mem.used",
        "Host Memory Used",
        "GiB",
        "host",
        "host",
        "psutil.virtual_memory().total - available",
        "RAM in use on the whole machine, every process included.",
        scale=1 / GIB,
    ),
    _m(
        "disk.read",
        "Disk Read",
        "MiB/s",
        "host",
        "trial",
        "sum of psutil.Process.io_counters().read_bytes deltas over the process tree / wall time",
        "Bytes the trial's process tree read from storage per second (/proc/PID/io "
        "read_bytes): reads served from the page cache do not count.",
        scale=1 / _MIB,
    ),
    _m(
        "disk.write",
        "Disk Write",
        "MiB/s",
        "host",
        "trial",
        "sum of psutil.Process.io_counters().write_bytes deltas over the process tree / wall time",
        "Bytes the trial's process tree wrote towards storage per second (/proc/PID/io "
        "write_bytes, counted when the page cache is dirtied): checkpoints, logs, caches.",
        scale=1 / _MIB,
    ),
    _m(
        "net.recv",
        "Network Received",
        "MiB/s",
        "host",
        "netns",
        "received bytes of every interface but lo in /proc/PID/net/dev of the trial's root "
        "process, deltas / wall time",
        "Bytes received per second by the network namespace of the trial, loopback excluded: "
        "the trial's own traffic in a container, the whole machine's when it shares the "
        "host's namespace (Linux keeps no per-process network counters).",
        scale=1 / _MIB,
    ),
    _m(
        "net.sent",
        "Network Sent",
        "MiB/s",
        "host",
        "netns",
        "transmitted bytes of every interface but lo in /proc/PID/net/dev of the trial's root "
        "process, deltas / wall time",
        "Bytes sent per second by the network namespace of the trial, loopback excluded: "
        "the trial's own traffic in a container, the whole machine's when it shares the "
        "host's namespace (Linux keeps no per-process network counters).",
        scale=1 / _MIB,
    ),
    _m(
        "gpu.proc_util",
        "GPU Utilization (trial's processes)",
        "%",
        "nvml",
        "gpu",
        "nvidia-smi pmon -s u (sm %), summed over the trial's pids",
        "SM utilization of the trial's own processes on the GPU: the share of the sample "
        "period in which their kernels ran (NVML per-process samples), so trials packed on "
        "one GPU each see their own. Absent on MIG instances and where the driver lists no "
        "processes.",
        max_value=100.0,
    ),
    _m(
        "gpu.mem.used",
        "GPU Memory Used (device)",
        "GiB",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=memory.used",
        "VRAM in use on the whole device, by every process (NVML memory info v2: the "
        "driver's reserved memory is not counted, as in nvidia-smi; v1 on drivers without "
        "v2).",
        scale=1 / GIB,
        markers=True,
    ),
    _m(
        "gpu.mem.total",
        "GPU Memory Total",
        "GiB",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=memory.total",
        "The device's VRAM capacity.",
        scale=1 / GIB,
    ),
    _m(
        "gpu.mem_bw.util",
        "GPU Memory Bandwidth Utilization",
        "%",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=utilization.memory",
        "Percentage of the last sample period in which device memory was read or written.",
        max_value=100.0,
    ),
    _m(
        "gpu.power",
        "GPU Power",
        "W",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=power.draw",
        "Power the board draws. Often a better proxy for real work than GPU utilization.",
    ),
    _m(
        "gpu.power.limit",
        "GPU Power Limit",
        "W",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=enforced.power.limit",
        "The power limit the driver enforces on the board.",
    ),
    _m(
        "gpu.temp",
        "GPU Temperature",
        "°C",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=temperature.gpu",
        "GPU core temperature.",
    ),
    _m(
        "gpu.clock.sm",
        "GPU SM Clock",
        "MHz",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=clocks.sm",
        "Current streaming-multiprocessor clock; drops under thermal or power throttling.",
    ),
    _m(
        "gpu.throttle",
        "GPU Throttle Reasons",
        "bitmask",
        "nvml",
        "gpu",
        "nvidia-smi --query-gpu=clocks_event_reasons.active",
        "NVML clock-event reasons bitmask (0 = none; 0x4 power cap, 0x20/0x40 thermal); "
        "nvmlDeviceGetCurrentClocksEventReasons, or the older ThrottleReasons call on drivers "
        "before R535.",
    ),
    _m(
        "gpu.energy",
        "GPU Energy",
        "kJ",
        "nvml",
        "gpu",
        "nvmlDeviceGetTotalEnergyConsumption (mJ since driver load)",
        "Energy the board has used since the trial's first GPU sample.",
        scale=1e-3,
    ),
    _m(
        "gpu.sm_active",
        "SM Activity",
        "%",
        "gpm",
        "gpu",
        "NVML GPM NVML_GPM_METRIC_SM_UTIL; DCGM field 1002 DCGM_FI_PROF_SM_ACTIVE "
        "(dcgmi dmon -e 1002) is the same as a 0-1 ratio: x100 to compare",
        "Share of streaming multiprocessors busy, averaged over the sample period (NVML GPM, "
        "Hopper and newer; GPM pairs samples at least 150 ms apart, so at `--interval 0.1` "
        "every other sample has none). The true measure of compute, unlike GPU utilization.",
        max_value=100.0,
    ),
    _m(
        "gpu.tensor_active",
        "Tensor Core Activity",
        "%",
        "gpm",
        "gpu",
        "NVML GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        "Share of time tensor cores were busy (NVML GPM, Hopper and newer).",
        max_value=100.0,
    ),
    _m(
        "gpu.dram_active",
        "DRAM Activity",
        "%",
        "gpm",
        "gpu",
        "NVML GPM NVML_GPM_METRIC_DRAM_BW_UTIL",
        "Device memory bandwidth used as a percentage of peak (NVML GPM, Hopper and newer).",
        max_value=100.0,
    ),
    _m(
        "torch.mem.allocated",
        "Torch Allocated",
        "GiB",
        "torch",
        "gpu",
        "torch.cuda.memory_allocated(device)",
        "GPU memory held by live tensors, as the training process's torch allocator sees it.",
        scale=1 / GIB,
        markers=True,
    ),
    _m(
        "torch.mem.reserved",
        "Torch Reserved",
        "GiB",
        "torch",
        "gpu",
        "torch.cuda.memory_reserved(device)",
        "GPU memory the torch caching allocator holds, tensors and cache together.",
        scale=1 / GIB,
        markers=True,
    ),
    _m(
        "torch.alloc_retries",
        "Torch Allocation Retries",
        "count",
        "torch",
        "gpu",
        "torch.cuda.memory_stats(device)['num_alloc_retries']",
        "Times the caching allocator had to free its cache and retry: a sign of memory "
        "pressure just short of an out-of-memory error.",
    ),
    _m(
        "train.step_time",
        "Step Time",
        "s",
        "sdk",
        "trial",
        "mean interval between batches handed out by trial.watch()",
        "Mean wall time of one training step (data wait included) over the sample period.",
    ),
    _m(
        "train.data_wait",
        "Data-Wait Share",
        "%",
        "sdk",
        "trial",
        "sum of waits for the next batch / sum of step times, from trial.watch()",
        "Share of step time spent waiting for the next batch: high means input-bound.",
        max_value=100.0,
    ),
    _m(
        "train.throughput",
        "Optimizer Steps per Second",
        "steps/s",
        "sdk",
        "trial",
        "optimizer steps recorded in the sample period / its length",
        "Training throughput in optimizer steps per second.",
    ),
    _m(
        "serve.running",
        "Engine Running Requests",
        "count",
        "engine",
        "trial",
        "vllm: vllm:num_requests_running; sglang: sglang:num_running_reqs; tgi: "
        "tgi_batch_current_size; llamacpp: llamacpp:requests_processing; triton: "
        'nv_trt_llm_request_metrics{request_type="scheduled"}; nim: num_requests_running',
        "Requests the serving engine is processing (in its running batch or slots).",
    ),
    _m(
        "serve.waiting",
        "Engine Waiting Requests",
        "count",
        "engine",
        "trial",
        "vllm: vllm:num_requests_waiting; sglang: sglang:num_queue_reqs; tgi: tgi_queue_size; "
        "llamacpp: llamacpp:requests_deferred; triton: nv_inference_pending_request_count; nim: "
        "num_requests_waiting",
        "Requests queued at the serving engine, waiting for a slot or a batch place.",
    ),
    _m(
        "serve.kv_use",
        "Engine KV-Cache Use",
        "%",
        "engine",
        "trial",
        "vllm: vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc; sglang: "
        "sglang:token_usage; llamacpp: llamacpp:kv_cache_usage_ratio; triton: "
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"} / '
        'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}; nim: '
        "gpu_cache_usage_perc",
        "Share of the serving engine's KV cache in use (an engine's 0-1 ratio shown as a "
        "percentage).",
        max_value=100.0,
    ),
    _m(
        "serve.preemptions",
        "Engine Preemptions",
        "count",
        "engine",
        "trial",
        "vllm: vllm:num_preemptions_total",
        "Requests the serving engine preempted since it started, for lack of KV cache "
        "(cumulative).",
    ),
    _m(
        "serve.prompt_tokens",
        "Engine Prompt Tokens",
        "count",
        "engine",
        "trial",
        "vllm: vllm:prompt_tokens_total; sglang: sglang:prompt_tokens_total; tgi: "
        "tgi_request_input_length_sum; llamacpp: llamacpp:prompt_tokens_total; nim: "
        "prompt_tokens_total",
        "Prompt tokens the serving engine processed since it started (cumulative; llama.cpp "
        "leaves out tokens reused from its cache).",
    ),
    _m(
        "serve.gen_tokens",
        "Engine Generated Tokens",
        "count",
        "engine",
        "trial",
        "vllm: vllm:generation_tokens_total; sglang: sglang:generation_tokens_total; tgi: "
        "tgi_request_generated_tokens_sum; llamacpp: llamacpp:tokens_predicted_total; nim: "
        "generation_tokens_total",
        "Tokens the serving engine generated since it started (cumulative).",
    ),
    _m(
        "serve.requests_deferred",
        "Engine Deferred Requests",
        "count",
        "engine",
        "trial",
        "llamacpp: llamacpp:requests_deferred",
        "Requests llama.cpp's server deferred because every slot was busy (a gauge, as it "
        "reports it).",
    ),
    _m(
        "serve.ttft_mean",
        "Engine Mean TTFT",
        "s",
        "engine",
        "trial",
        "vllm: vllm:time_to_first_token_seconds; sglang: sglang:time_to_first_token_seconds; "
        "nim: time_to_first_token_seconds",
        "Mean time to first token the serving engine measured over the last scrape interval "
        "(from its histogram).",
    ),
    _m(
        "serve.itl_mean",
        "Engine Mean Inter-Token Latency",
        "s",
        "engine",
        "trial",
        "vllm: vllm:inter_token_latency_seconds or vllm:time_per_output_token_seconds; sglang: "
        "sglang:inter_token_latency_seconds or sglang:time_per_output_token_seconds; tgi: "
        "tgi_request_mean_time_per_token_duration; nim: time_per_output_token_seconds",
        "Mean time between output tokens the serving engine measured over the last scrape "
        "interval (from its histogram).",
    ),
)

_BY_KEY = {m.key: m for m in CATALOG}


def metric(key: str) -> Metric:
    """The catalog row for ``key``; KeyError names the unknown key."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"unknown metric {key!r}; known: {', '.join(_BY_KEY)}") from None


def headline() -> tuple[Metric, ...]:
    """The four metrics of the seed page, in its order."""
    return tuple(m for m in CATALOG if m.headline)
