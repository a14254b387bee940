"""benchmarks/gpu.py says so and exits 0 on a machine without a GPU."""

import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.backend import gpu_available

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


@pytest.mark.skipif(gpu_available(), reason="with a GPU the script runs real (long) benchmarks")
def test_gpu_benchmark_without_gpu_exits_cleanly():
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "no NVIDIA GPU" in result.stdout
