"""benchmarks/llama_step.py runs end to end (tiny sizes; the timing itself is not tested)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "llama_step.py"


def test_llama_step_benchmark_runs_and_prints_the_ratio():
    pytest.importorskip("torch", reason="the oracle extra (PyTorch) is not installed")
    args = ["--batch", "2", "--seq", "16", "--rounds", "1", "--per-block", "1", "--threads", "1"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "batch 2, seq 16" in result.stdout
    assert "ratio course_lib/PyTorch = " in result.stdout
