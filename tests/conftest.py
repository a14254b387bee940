import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(  # CI is reproducible (a fixed example sequence); dev runs explore
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)  # fmt: skip
settings.register_profile("dev", max_examples=15, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def oracle_import(module: str) -> ModuleType:
    """Import a module of the ``oracle`` extra (torch, transformers).

    Missing, the calling test (or module, at import time) is skipped with a reason — except
    when the environment variable ``CI`` is set: CI installs the extra, so the ImportError
    propagates and the test fails instead of silently skipping.
    """
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"the oracle extra ({module}) is not installed")


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``benchmarks/<script>`` with ``args`` in a fresh interpreter; return its stdout
    (the run must exit 0; its stderr is the failure message otherwise)."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout

