"""Generate the builtin GPU replay fixtures. THESE FIXTURES ARE SYNTHESIZED, NOT RECORDED.

No GPU was available when they were written, so this script builds NVML readings shaped like
a real LLM fine-tune on Hopper/Ampere boards (phases, power near the limit, temperatures that
climb and settle, GPM activity well under "GPU utilization"), from the public specifications
of the boards. Each file says ``"synthesized": true`` in its header.

To record a real one on a GPU machine while a fine-tune runs::

    python -m tunescope.collect.record_nvml OUT.json --seconds 120 --interval 1 --pid PID

and set ``TUNESCOPE_GPU_REPLAY=OUT.json`` (or copy it into ``src/tunescope/collect/replay/`` to
make it a builtin fixture).

A developer's tool, kept out of the package: regenerate (deterministic; same bytes every time;
OUTDIR defaults to the package's fixture folder, ``src/tunescope/collect/replay/``)::

    python bench/make_replay_fixtures.py [OUTDIR]

Fixtures:

* ``h200_sft``: 2 x H200 (141 GB), one trial with two DDP ranks, one per GPU; GPM supported.
  Model load, then training steps with an evaluation every 40 s and a checkpoint save.
* ``busy_low_sm``: 2 x H100 80GB HBM3; the trial runs on GPU 0 only, small batches that keep
  a kernel always running (utilization ~95%) while GPM SM activity stays ~30% and power low.
  GPU 1 runs another user's job (a foreign pid), which must not be attributed to the trial.
* ``a100_no_gpm``: 2 x A100-SXM4-80GB, DDP over both; GPM unsupported (Ampere) and the driver
  lists no processes (as under some container and MIG setups), so GPU memory can only be
  recorded device-wide.
* ``shared_h100``: 1 x H100 80GB shared by two trials (``trials`` ``a`` and ``b``, played as
  ``shared_h100#a`` / ``#b``), each with its own per-process utilization and memory: trial a
  small (about 18% of the SMs' time, 14 GiB), trial b larger (about 45%, 9 GiB).
* ``mig_h100``: 1 x H100 80GB in MIG mode with three instances (3g.40gb, 2g.20gb, 1g.10gb);
  the trial runs on instance 1 (``0/mig1``), another user's job on instance 0, instance 2 is
  empty. No utilization (NVML has none per instance); memory, processes and GPM per instance.
* ``node_a_8gpu`` / ``node_b_8gpu_slow``: the two nodes of one 16-rank DDP job, 8 x H100 each
  (one fixture per host). Node b's GPUs are power-capped (500 W, SW power cap, SM clock ~1.4
  GHz): they compute longer each step (SM activity ~70%) while node a's finish early and wait
  in NCCL (utilization still ~97%, SM activity ~45%).
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import Any

from tunescope.collect._replay import FIXTURE_DIR, FORMAT, dump_replay

MIB = 1024 * 1024
GIB = 1024 * MIB
IDLE = 0x1
SW_POWER_CAP = 0x4


def _board(
    name: str, uuid: str, memory_total: int, power_limit_w: float, gpm: bool
) -> dict[str, Any]:
    return {
        "name": name,
        "uuid": uuid,
        "memory_total": memory_total,
        "power_limit_mw": int(power_limit_w * 1000),
        "gpm_supported": gpm,
    }


class _Gpu:
    """State of one simulated board: energy counter and temperature integrate over time."""

    def __init__(
        self, rng: random.Random, energy_mj: int, temp: float, limit_w: float, max_clock: int
    ) -> None:
        self.rng = rng
        self.energy = energy_mj
        self.temp = temp
        self.limit = limit_w
        self.max_clock = max_clock

    def frame(
        self,
        dt: float,
        util: float,
        bw: float,
        mem_used: int,
        power_w: float,
        gpm: dict[str, float] | None,
        processes: list[list[int]] | None,
        ambient: float = 31.0,
    ) -> dict[str, Any]:
        r = self.rng
        power_w = min(self.limit, max(60.0, power_w + r.gauss(0, power_w * 0.02)))
        self.energy += int(power_w * 1000 * dt)  # mW x s = mJ
        target = ambient + power_w * 0.055
        self.temp += (target - self.temp) * (1 - math.exp(-dt / 25.0))
        throttle = 0
        clock = self.max_clock
        if util < 5:
            throttle |= IDLE
            clock = 345 if util == 0 else self.max_clock
        if power_w > 0.96 * self.limit:
            throttle |= SW_POWER_CAP
            clock = self.max_clock - 15 * r.randint(4, 10)
        return {
            "util": int(max(0, min(100, round(util)))),
            "mem_bw_util": int(max(0, min(100, round(bw)))),
            "mem_used": int(mem_used),
            "power_mw": int(power_w * 1000),
            "temp": round(self.temp),
            "clock_sm": clock,
            "throttle": throttle,
            "energy_mj": self.energy,
            "gpm": None if gpm is None else {k: round(v, 2) for k, v in gpm.items()},
            "processes": processes,
        }

    def shared(
        self,
        dt: float,
        util: float,
        bw: float,
        power_w: float,
        gpm: dict[str, float],
        procs: list[tuple[int, int, float]],
        driver_mib: int = 430,
    ) -> dict[str, Any]:
        """A frame of a GPU shared by processes ``(pid, bytes, SM utilization %)``."""
        used = sum(m for _, m, _ in procs) + driver_mib * MIB
        f = self.frame(dt, util, bw, used, power_w, gpm, [[p, m] for p, m, _ in procs])
        f["process_util"] = [[p, round(max(0.0, min(100.0, u)), 1)] for p, _, u in procs]
        return f


def _jit(rng: random.Random, v: float, sd: float) -> float:
    return v + rng.gauss(0, sd)


def h200_sft(seconds: int = 120) -> dict[str, Any]:
    """2 x H200, two DDP ranks (pids 4242 rank 0 on GPU 0, 4243 rank 1 on GPU 1)."""
    rng = random.Random(200)
    devices = [
        _board("NVIDIA H200", "GPU-5c1d9a3e-2f47-4b1e-9d0a-7e8c6b2f1a01", 143771 * MIB, 700, True),
        _board("NVIDIA H200", "GPU-8e2f4b6c-3a58-4c2f-8e1b-9f0d7c3a2b02", 143771 * MIB, 700, True),
    ]
    gpus = [_Gpu(rng, 8_214_551_000 + k * 97_000_000, 33.0 + k, 700, 1980) for k in range(2)]
    pids = [4242, 4243]
    frames = []
    for t in range(seconds + 1):
        per = []
        for k, g in enumerate(gpus):
            context = 612 * MIB
            if t < 3:  # CUDA context and model weights loading
                proc_mem = int(context + t * 6 * GIB)
                util, bw, power, gpm = 0.0, 0.0, 118.0, {"sm": 0.0, "tensor": 0.0, "dram": 0.4}
            else:
                # activations and optimizer state grow over the first steps, then plateau
                proc_mem = int(context + 18 * GIB + 56 * GIB * (1 - math.exp(-(t - 3) / 6)))
                phase = t % 40
                if t == 100 or t == 101 or t == 102:  # checkpoint: weights copied to host
                    util, bw, power = _jit(rng, 3, 2), _jit(rng, 2, 1), 165.0
                    gpm = {"sm": 1.5, "tensor": 0.0, "dram": 4.0}
                elif 34 <= phase < 39:  # evaluation: forward only, smaller kernels
                    util, bw, power = _jit(rng, 72, 4), _jit(rng, 28, 3), 410.0
                    gpm = {
                        "sm": _jit(rng, 38, 3),
                        "tensor": _jit(rng, 17, 2),
                        "dram": _jit(rng, 22, 2),
                    }
                else:  # training steps (bf16 LoRA/SFT, large batch)
                    util, bw, power = _jit(rng, 98, 1.2), _jit(rng, 44, 4), _jit(rng, 640, 25)
                    gpm = {
                        "sm": _jit(rng, 71, 3),
                        "tensor": _jit(rng, 44, 3),
                        "dram": _jit(rng, 36, 3),
                    }
            used = proc_mem + 430 * MIB  # the driver's own reservation on top
            per.append(g.frame(1.0, util, bw, used, power, gpm, [[pids[k], proc_mem]]))
        frames.append({"t": float(t), "devices": per})
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": True,
        "description": "SYNTHESIZED (not recorded): 2 x H200 SFT of an 8B model with two DDP "
        "ranks; model load, training, evaluation every 40 s, checkpoint at "
        "100 s. Generated by bench/make_replay_fixtures.py.",
        "interval": 1.0,
        "root_pid": 4242,
        "trial_pids": pids,
        "processes_supported": True,
        "devices": devices,
        "frames": frames,
    }


def busy_low_sm(seconds: int = 90) -> dict[str, Any]:
    """2 x H100; the trial (pid 5150) on GPU 0 only; a foreign job (pid 7777) on GPU 1."""
    rng = random.Random(100)
    devices = [
        _board(
            "NVIDIA H100 80GB HBM3",
            "GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c01",
            81559 * MIB,
            700,
            True,
        ),
        _board(
            "NVIDIA H100 80GB HBM3",
            "GPU-9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b02",
            81559 * MIB,
            700,
            True,
        ),
    ]
    gpus = [_Gpu(rng, 5_102_337_000, 34.0, 700, 1980), _Gpu(rng, 6_993_120_000, 36.0, 700, 1980)]
    frames = []
    for t in range(seconds + 1):
        if t < 2:
            mine = int(612 * MIB + t * 7 * GIB)
            a = gpus[0].frame(
                1.0,
                0,
                0,
                mine + 430 * MIB,
                105.0,
                {"sm": 0.0, "tensor": 0.0, "dram": 0.3},
                [[5150, mine]],
            )
        else:
            # batch size 1, many tiny kernels: a kernel is always resident (utilization high)
            # but few SMs are busy and tensor cores mostly idle.
            mine = int(612 * MIB + 17 * GIB)
            a = gpus[0].frame(
                1.0,
                _jit(rng, 95, 1.5),
                _jit(rng, 9, 2),
                mine + 430 * MIB,
                _jit(rng, 285, 18),
                {"sm": _jit(rng, 30, 2.5), "tensor": _jit(rng, 7, 1.5), "dram": _jit(rng, 12, 2)},
                [[5150, mine]],
            )
        other = int(41 * GIB)
        b = gpus[1].frame(
            1.0,
            _jit(rng, 62, 6),
            _jit(rng, 30, 4),
            other + 430 * MIB,
            _jit(rng, 430, 30),
            {"sm": _jit(rng, 55, 4), "tensor": _jit(rng, 31, 3), "dram": _jit(rng, 27, 3)},
            [[7777, other]],
        )
        frames.append({"t": float(t), "devices": [a, b]})
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": True,
        "description": "SYNTHESIZED (not recorded): single-GPU fine-tune on H100 with batch "
        "size 1: GPU utilization ~95% while GPM SM activity is ~30% (busy but "
        "idle). GPU 1 runs another user's job. Generated by "
        "bench/make_replay_fixtures.py.",
        "interval": 1.0,
        "root_pid": 5150,
        "trial_pids": [5150],
        "processes_supported": True,
        "devices": devices,
        "frames": frames,
    }


def a100_no_gpm(seconds: int = 90) -> dict[str, Any]:
    """2 x A100 80GB, DDP over both, no GPM and no per-process information."""
    rng = random.Random(80)
    devices = [
        _board(
            "NVIDIA A100-SXM4-80GB",
            "GPU-3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e01",
            81920 * MIB,
            400,
            False,
        ),
        _board(
            "NVIDIA A100-SXM4-80GB",
            "GPU-6f7a8b9c-0d1e-4f2a-9b3c-4d5e6f7a8b02",
            81920 * MIB,
            400,
            False,
        ),
    ]
    gpus = [_Gpu(rng, 3_870_004_000 + k * 51_000_000, 32.0, 400, 1410) for k in range(2)]
    frames = []
    for t in range(seconds + 1):
        per = []
        for g in gpus:
            if t < 3:
                used = int(1 * GIB + t * 5 * GIB)
                per.append(g.frame(1.0, 0, 0, used, 70.0, None, None))
            else:
                used = int(16 * GIB + 47 * GIB * (1 - math.exp(-(t - 3) / 5)))
                per.append(
                    g.frame(
                        1.0,
                        _jit(rng, 93, 3),
                        _jit(rng, 52, 5),
                        used,
                        _jit(rng, 370, 20),
                        None,
                        None,
                    )
                )
        frames.append({"t": float(t), "devices": per})
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": True,
        "description": "SYNTHESIZED (not recorded): DDP fine-tune on 2 x A100 80GB; no GPM "
        "(Ampere) and no per-process GPU information from the driver. "
        "Generated by bench/make_replay_fixtures.py.",
        "interval": 1.0,
        "root_pid": 6001,
        "trial_pids": [6001, 6002],
        "processes_supported": False,
        "devices": devices,
        "frames": frames,
    }


H100 = ("NVIDIA H100 80GB HBM3", 81559 * MIB)


def shared_h100(seconds: int = 90) -> dict[str, Any]:
    """1 x H100 shared by two trials: a (pid 3101, small) and b (pid 3202 and a data-loader
    child 3203 that holds no GPU memory)."""
    rng = random.Random(300)
    devices = [_board(H100[0], "GPU-2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d01", H100[1], 700, True)]
    gpu = _Gpu(rng, 4_410_220_000, 33.0, 700, 1980)
    frames = []
    for t in range(seconds + 1):
        a_mem = int(612 * MIB + min(t, 4) / 4 * 13.4 * GIB)
        b_mem = int(612 * MIB + min(t, 4) / 4 * 8.4 * GIB)
        if t < 4:  # both load their weights
            a_u, b_u = 0.0, 0.0
        else:
            a_u, b_u = _jit(rng, 18, 2), _jit(rng, 45, 3)
        # the device is busy whenever either ran (their kernels overlap little: time-sliced)
        util = min(100.0, a_u + b_u + (rng.random() * 3 if t >= 4 else 0))
        gpm = {"sm": 0.6 * util, "tensor": 0.3 * util, "dram": 0.25 * util}
        power = 90.0 + 4.2 * util
        frame = gpu.shared(
            1.0, util, 0.4 * util, power, gpm, [(3101, a_mem, a_u), (3202, b_mem, b_u)]
        )
        frames.append({"t": float(t), "devices": [frame]})
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": True,
        "description": "SYNTHESIZED (not recorded): one H100 80GB shared by two trials (a: "
        "~18% of the SMs' time, 14 GiB; b: ~45%, 9 GiB), with per-process utilization and "
        "memory. Play one trial with shared_h100#a or #b. Generated by "
        "bench/make_replay_fixtures.py.",
        "interval": 1.0,
        "root_pid": 3101,
        "trial_pids": [3101],
        "trials": {"a": [3101], "b": [3202, 3203]},
        "processes_supported": True,
        "devices": devices,
        "frames": frames,
    }


MIG_H100 = (  # (profile, GPU-instance id, memory in MiB as NVML reports it)
    ("3g.40gb", 1, 40320),
    ("2g.20gb", 5, 20096),
    ("1g.10gb", 13, 9856),
)


def mig_h100(seconds: int = 60) -> dict[str, Any]:
    """1 x H100 in MIG mode: the trial (pid 8801) on instance 1 (2g.20gb), another user's
    job (pid 9901) on instance 0 (3g.40gb), instance 2 (1g.10gb) empty."""
    rng = random.Random(700)
    parent_uuid = "GPU-7c8d9e0f-1a2b-4c3d-8e4f-5a6b7c8d9e01"
    devices = [{**_board(H100[0], parent_uuid, H100[1], 700, True), "partitioned": True}]
    for k, (profile, _, mib) in enumerate(MIG_H100):
        devices.append(
            {
                "name": f"{H100[0]} MIG {profile}",
                "uuid": f"MIG-4f5e6d7c-8b9a-5c0d-9e1f-2a3b4c5d6e{k:02d}",
                "memory_total": mib * MIB,
                "power_limit_mw": None,
                "gpm_supported": True,
                "parent": 0,
                "mig": k,
            }
        )
    board = _Gpu(rng, 2_200_410_000, 34.0, 700, 1980)
    frames = []
    for t in range(seconds + 1):
        mine = int(500 * MIB + min(t, 3) / 3 * 11 * GIB)
        other = int(500 * MIB + 27 * GIB)
        sm_mine = 0.0 if t < 3 else _jit(rng, 62, 4)
        sm_other = _jit(rng, 81, 3)
        # the board is busy (not idle-clocked); NVML reports no utilization in MIG mode
        whole = board.frame(
            1.0, 80, 0, mine + other + 3 * 430 * MIB, _jit(rng, 380, 20), None, None
        )
        whole.update(util=None, mem_bw_util=None, processes=None)
        per = [whole]
        for pid, mem, sm in [(9901, other, sm_other), (8801, mine, sm_mine), (None, 0, 0.0)]:
            per.append(
                {
                    "util": None,
                    "mem_bw_util": None,
                    "mem_used": int(mem + 430 * MIB),
                    "power_mw": None,
                    "temp": whole["temp"],
                    "clock_sm": whole["clock_sm"],
                    "throttle": whole["throttle"],
                    "energy_mj": None,
                    "gpm": {
                        "sm": round(sm, 2),
                        "tensor": round(0.55 * sm, 2),
                        "dram": round(0.4 * sm, 2),
                    },
                    "processes": [] if pid is None else [[pid, mem]],
                    "process_util": None,
                }
            )
        frames.append({"t": float(t), "devices": per})
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": True,
        "description": "SYNTHESIZED (not recorded): one H100 80GB in MIG mode (3g.40gb, "
        "2g.20gb, 1g.10gb); the trial on instance 1, another job on instance 0. Per instance: "
        "memory, processes, GPM; no utilization (NVML has none per MIG instance). Generated "
        "by bench/make_replay_fixtures.py.",
        "interval": 1.0,
        "root_pid": 8801,
        "trial_pids": [8801],
        "processes_supported": True,
        "devices": devices,
        "frames": frames,
    }


def _node(first_pid: int, slow: bool, seed: int, seconds: int = 45) -> dict[str, Any]:
    """One node of a 16-rank DDP job over 2 x 8 H100: ranks ``first_pid`` + 0..7, one a GPU.
    ``slow``: the node's GPUs are power-capped at 500 W (clocks down, SW power cap)."""
    rng = random.Random(seed)
    limit = 500.0 if slow else 700.0
    devices = [
        _board(
            H100[0], f"GPU-{seed:04x}{k:04x}-0a1b-4c2d-8e3f-4a5b6c7d8e{k:02d}", H100[1], limit, True
        )
        for k in range(8)
    ]
    gpus = [_Gpu(rng, 3_000_000_000 + k * 41_000_000, 32.0 + k % 3, limit, 1980) for k in range(8)]
    pids = [first_pid + k for k in range(8)]
    frames = []
    for t in range(seconds + 1):
        per = []
        for k, g in enumerate(gpus):
            mem = int(612 * MIB + min(t, 3) / 3 * 52 * GIB)
            if t < 3:
                per.append(
                    g.frame(
                        1.0,
                        0,
                        0,
                        mem + 430 * MIB,
                        110.0,
                        {"sm": 0.0, "tensor": 0.0, "dram": 0.3},
                        [[pids[k], mem]],
                    )
                )
                continue
            if slow:  # computing longer at lower clocks: SM activity high, power at the cap
                sm, power = _jit(rng, 70, 3), _jit(rng, 495, 6)
            else:  # done early, waiting for node b in NCCL all-reduce (a kernel still runs)
                sm, power = _jit(rng, 45, 3), _jit(rng, 455, 20)
            util = _jit(rng, 97, 1.0)
            gpm = {"sm": sm, "tensor": 0.62 * sm, "dram": _jit(rng, 30, 3)}
            f = g.frame(1.0, util, _jit(rng, 38, 3), mem + 430 * MIB, power, gpm, [[pids[k], mem]])
            if slow:  # the cap holds the clocks down all through the step
                f["clock_sm"] = 1380 + 15 * rng.randint(0, 4)
                f["throttle"] |= SW_POWER_CAP
            per.append(f)
        frames.append({"t": float(t), "devices": per})
    what = (
        "node b of a 2-node x 8-GPU DDP job, the SLOW node: its H100s are power-capped at "
        "500 W (SW power cap, SM clock ~1.4 GHz), so each step computes longer (SM activity "
        "~70%) and node a waits for it"
        if slow
        else "node a of a 2-node x 8-GPU DDP job: 8 x H100 at full clocks, finishing each "
        "step early and waiting for the slow node b in NCCL (utilization ~97%, SM activity ~45%)"
    )
    return {
        "format": FORMAT,
        "version": 1,
        "synthesized": True,
        "description": f"SYNTHESIZED (not recorded): {what}. Ranks {8 if slow else 0}-"
        f"{15 if slow else 7} are pids {pids[0]}-{pids[-1]}, one per GPU. Generated by "
        "bench/make_replay_fixtures.py.",
        "interval": 1.0,
        "root_pid": pids[0],
        "trial_pids": pids,
        "processes_supported": True,
        "devices": devices,
        "frames": frames,
    }


def node_a_8gpu() -> dict[str, Any]:
    """Node a (fast) of the 2-node x 8-GPU job."""
    return _node(1000, False, 0xA)


def node_b_8gpu_slow() -> dict[str, Any]:
    """Node b (slow: power-capped) of the 2-node x 8-GPU job."""
    return _node(2000, True, 0xB)


FIXTURES = {
    "h200_sft": h200_sft,
    "busy_low_sm": busy_low_sm,
    "a100_no_gpm": a100_no_gpm,
    "shared_h100": shared_h100,
    "mig_h100": mig_h100,
    "node_a_8gpu": node_a_8gpu,
    "node_b_8gpu_slow": node_b_8gpu_slow,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else FIXTURE_DIR
    for name, build in FIXTURES.items():
        dump_replay(build(), out / f"{name}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
