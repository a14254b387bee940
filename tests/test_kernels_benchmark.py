"""benchmarks/gpu.py says so and exits 0 on a machine without a GPU."""

import pytest

from conftest import run_benchmark
from course_lib.backend import gpu_available


@pytest.mark.skipif(gpu_available(), reason="with a GPU the script runs real (long) benchmarks")
def test_gpu_benchmark_without_gpu_exits_cleanly():
    assert "no NVIDIA GPU" in run_benchmark("gpu.py", timeout=120)
