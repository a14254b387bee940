"""benchmarks/llama_step.py runs end to end (tiny sizes; the timing itself is not tested)."""

from conftest import oracle_import, run_benchmark


def test_llama_step_benchmark_runs_and_prints_the_ratio():
    oracle_import("torch")
    out = run_benchmark(
        "llama_step.py",
        *("--batch", "2", "--seq", "16", "--rounds", "1", "--per-block", "1", "--threads", "1"),
    )
    assert "batch 2, seq 16" in out
    assert "ratio course_lib/PyTorch = " in out
