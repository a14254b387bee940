"""benchmarks/fusion.py and attention_products.py run end to end (tiny sizes or one repeat;
the timing itself is not tested)."""

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


@pytest.mark.skipif(
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CPU kernels need g++ on PATH",
)
def test_attention_products_benchmark_runs_and_prints_the_ratios():
    out = run_benchmark("attention_products.py", "--threads", "2", "--repeats", "1")
    for header in ("--- 1 thread", "--- 2 threads"):
        assert header in out
    for product in ("scores", "mix p·v", "mix_t"):
        ratios = [line for line in out.splitlines() if line.strip().startswith(product)]
        assert len(ratios) == 2 and all(float(line.split()[-1]) > 0 for line in ratios)
