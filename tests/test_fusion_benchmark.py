"""benchmarks/fusion.py runs end to end (tiny sizes; the timing itself is not tested)."""

import os

import pytest

from conftest import run_benchmark
from course_lib.kernels import emulator


@pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the C++ loop needs g++ on PATH",
)
def test_fusion_benchmark_runs_and_prints_the_ratios():
    out = run_benchmark(
        "fusion.py", "--log2n", "12", "--repeats", "1", "--tokens", "8", "--dim", "16"
    )
    assert "N = 4096 float32" in out
    for ratio in (
        "ratio Program 1 / C++ loop",
        "ratio Program 1 / numexpr 1 thread",
        "ratio Program 1 / numexpr 2 threads",
        "ratio Executor unfused / fused",
        "ratio three / merged (NumPy)",
        "ratio three / merged (Executor)",
    ):
        assert ratio in out
