"""``make gpu-check`` (bench/gpu_check.py): what it can show without a GPU. Without one it
says so and succeeds; its checks, table and verdict are held to numbers written here (the
workloads themselves need an NVIDIA GPU and run only there)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.py"
GIB = 1024**3
MIB = 1024**2


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


gc = load()


def test_without_a_gpu_it_says_so_and_succeeds() -> None:
    """The script's entry point where NVML cannot be reached (pynvml blocked, so this holds
    on any machine): one line, exit code 0."""
    code = (
        "import sys, runpy; sys.modules['pynvml'] = None; sys.argv = ['gpu_check.py']; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no NVIDIA GPU to check here")
    assert "pynvml is not installed" in lines[0]


def test_dry_prints_the_plan() -> None:
    said: list[str] = []
    assert gc.main(["--dry", "--gpu", "3", "--seconds", "5"], say=said.append) == 0
    (plan,) = said
    assert "GPU 3, 5 s per workload" in plan
    for name in gc.WORKLOADS:
        assert name in plan


def test_bad_arguments_exit_2() -> None:
    with pytest.raises(SystemExit) as e:
        gc.main(["--seconds", "1"])
    assert e.value.code == 2


def test_parse_smi_leaves_out_what_is_not_reported() -> None:
    rows = gc.parse_smi("97, 41, 81604, 612.34, 64, 1980\n[N/A], 3, 100, [N/A], 40, 345\n")
    assert rows[0] == {
        "utilization.gpu": 97.0,
        "utilization.memory": 41.0,
        "memory.used": 81604.0,
        "power.draw": 612.34,
        "temperature.gpu": 64.0,
        "clocks.sm": 1980.0,
    }
    assert "utilization.gpu" not in rows[1] and rows[1]["clocks.sm"] == 345.0


def test_steady_means_only_the_window() -> None:
    assert gc.steady([(0.0, 100.0), (1.0, 10.0), (2.0, 20.0), (3.0, 0.0)], 1.0, 2.0) == 15.0
    assert gc.steady([(0.0, 1.0)], 5.0, 6.0) is None


def smi(util: float, used_mib: float, mem_util: float = 10.0) -> dict[str, float]:
    return {
        "utilization.gpu": util,
        "utilization.memory": mem_util,
        "memory.used": used_mib,
        "power.draw": 400.0,
        "temperature.gpu": 60.0,
        "clocks.sm": 1980.0,
    }


def metrics(util: float, mem: float, used_mib: float, **more: float) -> dict[str, float]:
    return {
        "gpu.util": util,
        "gpu.mem": mem,
        "gpu.mem.used": used_mib * MIB,
        "gpu.power": 410.0,
        "gpu.temp": 61.0,
        "gpu.clock.sm": 1965.0,
        **more,
    }


def good() -> dict[str, object]:
    R = gc.Result
    ctx = 600 * MIB
    return {
        "idle": R("idle", metrics(0, ctx, 1100, **{"gpu.sm_active": 0.5}), smi(0, 1100), {}),
        "matmul": R(
            "matmul",
            metrics(
                99,
                ctx + GIB,
                2200,
                **{
                    "gpu.proc_util": 98.0,
                    "gpu.sm_active": 80.0,
                    "gpu.tensor_active": 55.0,
                    "gpu.dram_active": 20.0,
                },
            ),
            smi(98, 2200),
            {"torch_util_mean": 97.0},
        ),
        "memcpy": R(
            "memcpy",
            metrics(
                90,
                ctx + 4 * GIB,
                5200,
                **{
                    "gpu.mem_bw.util": 85.0,
                    "gpu.dram_active": 88.0,
                    "gpu.tensor_active": 0.0,
                    "gpu.sm_active": 30.0,
                },
            ),
            smi(91, 5200, mem_util=83.0),
            {},
        ),
        "alloc10": R(
            "alloc10",
            metrics(0, ctx + 10 * GIB, 1100 + 10240),
            smi(0, 1100 + 10240),
            {"allocated_bytes": 10 * GIB},
        ),
        "pair-a": R(
            "pair-a",
            metrics(95, ctx + 2 * GIB, 9000, **{"gpu.proc_util": 63.0}),
            smi(95, 9000),
            {},
        ),
        "pair-b": R(
            "pair-b",
            metrics(95, ctx + 4 * GIB, 9000, **{"gpu.proc_util": 30.0}),
            smi(95, 9000),
            {},
        ),
    }


def test_checks_pass_on_readings_within_tolerance() -> None:
    rows = gc.checks(good(), gpm=True)
    assert [r for r in rows if not r.ok] == []
    assert {r.workload for r in rows} == {
        "idle",
        "matmul",
        "memcpy",
        "alloc10",
        "pair",
        "pair-a",
        "pair-b",
    }
    said: list[str] = []
    assert gc.verdict(rows, Path("out"), said.append) == 0
    assert "FAIL" not in said[0] and f"{len(rows)} of {len(rows)} checks" in said[1]


@pytest.mark.parametrize(
    ("workload", "key", "value", "check"),
    [
        ("matmul", "gpu.util", 70.0, "gpu.util %"),  # 28 points under nvidia-smi's
        ("alloc10", "gpu.mem", 600 * MIB + 9.5 * GIB, "gpu.mem - idle's GiB"),
        ("pair-b", "gpu.proc_util", 55.0, "sum of gpu.proc_util %"),  # 118% of one device
        ("memcpy", "gpu.dram_active", 20.0, "gpu.dram_active %"),
        ("idle", "gpu.sm_active", 30.0, "gpu.sm_active %"),
    ],
)
def test_a_reading_out_of_tolerance_fails_the_check(
    workload: str, key: str, value: float, check: str
) -> None:
    results = good()
    results[workload].metrics[key] = value  # type: ignore[attr-defined]
    rows = gc.checks(results, gpm=True)
    failed = [r for r in rows if not r.ok]
    assert failed and all(r.what == check for r in failed), failed
    said: list[str] = []
    assert gc.verdict(rows, Path("out"), said.append) == 1
    assert any(line.endswith("FAIL") and check in line for line in said[0].splitlines())


def test_without_gpm_no_activity_is_checked_and_a_missing_reading_fails() -> None:
    results = good()
    rows = gc.checks(results, gpm=False)
    assert not any("active" in r.what for r in rows)
    del results["matmul"].metrics["gpu.proc_util"]  # type: ignore[attr-defined]
    (bad,) = [r for r in gc.checks(results, gpm=False) if not r.ok]
    assert bad.what == "gpu.proc_util %" and bad.tunescope is None
    assert gc.verdict([], Path("out"), lambda _: None) == 1  # nothing checked is no pass
