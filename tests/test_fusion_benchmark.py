"""benchmarks/fusion.py runs end to end (tiny sizes; the timing itself is not tested)."""

import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.kernels import emulator

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fusion.py"


@pytest.mark.skipif(not emulator.emulator_available(), reason="the C++ loop needs g++ on PATH")
def test_fusion_benchmark_runs_and_prints_the_ratios():
    args = ["--log2n", "12", "--repeats", "1", "--tokens", "8", "--dim", "16"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "N = 4096 float32" in result.stdout
    for ratio in (
        "ratio Program 1 / C++ loop",
        "ratio Program 1 / numexpr 1 thread",
        "ratio Program 1 / numexpr 2 threads",
        "ratio Executor unfused / fused",
        "ratio three / merged (NumPy)",
        "ratio three / merged (Executor)",
    ):
        assert ratio in result.stdout
