"""`make gpu-check` without a GPU: a fake Python stands in for the GPU's, records each piece it
is asked to run and fails the ones a test names, so the Makefile's promise is checked here: every
piece runs, even after one fails, and the last line says whether all passed."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIECES = {  # what each piece passes to Python
    "gpu-tests": "-m gpu",
    "gpu-engine": "tests/test_runtime.py",
    "gpu-notebooks": "--nbval-lax",
    "gpu-bench-launch": "benchmarks/kernel_launch.py",
    "gpu-bench-kernels": "benchmarks/gpu.py",
    "gpu-bench-llama-tiny": "benchmarks/llama_step.py --device gpu",
    "gpu-bench-llama-1024": "--model gpu",
}

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _gpu_check(tmp_path: Path, failing: str = "") -> tuple[subprocess.CompletedProcess, str]:
    log, python = tmp_path / "calls.log", tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        + (f'case "$*" in *"{failing}"*) exit 3;; esac\n' if failing else "")
        + "exit 0\n"
    )
    python.chmod(0o755)
    result = subprocess.run(
        ["make", "--no-print-directory", "gpu-check", f"GPU_PYTHON={python}", "GPU_SETUP=",
         "GPU_PYTEST="], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return result, log.read_text()


def test_gpu_check_runs_every_piece(tmp_path):
    result, calls = _gpu_check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("gpu-check: every piece passed")
    for piece, argument in PIECES.items():
        assert argument in calls, f"{piece} did not run"


@pytest.mark.parametrize("failing", ["benchmarks/kernel_launch.py", "-m gpu"])
def test_a_failing_piece_stops_no_other(tmp_path, failing):
    result, calls = _gpu_check(tmp_path, failing)
    assert result.returncode != 0
    assert result.stdout.strip().endswith("gpu-check: a piece failed (see above)")
    for piece, argument in PIECES.items():
        assert argument in calls, f"{piece} did not run after {failing!r} failed"


def test_without_a_gpu_it_says_so(tmp_path):
    result, _ = _gpu_check(tmp_path, failing="gpu_available")
    assert result.returncode != 0
    assert "needs an NVIDIA GPU" in result.stdout


def test_its_setup_installs_cupy_with_the_cuda_libraries():
    # a machine with only a driver: bare cupy-cuda12x finds no CUDA runtime, cuBLAS or NVRTC
    result = subprocess.run(["make", "-n", "-B", "--no-print-directory", "gpu-present"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "-e '.[lab,test,oracle,gpu]'" in result.stdout, result.stdout + result.stderr
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'gpu = ["cupy-cuda12x[ctk]' in pyproject
