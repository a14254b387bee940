"""benchmarks/gpu.py says so and exits 0 on a machine without a GPU."""

import pytest

from conftest import run_benchmark
from course_lib.backend import gpu_available


@pytest.mark.skipif(gpu_available(), reason="with a GPU the script runs real (long) benchmarks")
def test_gpu_benchmark_without_gpu_exits_cleanly():
    assert "no NVIDIA GPU" in run_benchmark("gpu.py", timeout=120)


def test_gpu_benchmark_predicts_bounds_without_gpu():
    out = run_benchmark("gpu.py", "--predict", "T4", "--small", timeout=300)
    assert "Roofline bounds on T4" in out and "bounds, not measurements" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("matmul", "copy"))]
    assert len(rows) == 5 and all(float(row[-2]) > 0 for row in rows)
