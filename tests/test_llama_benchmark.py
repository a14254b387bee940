"""benchmarks/llama_step.py runs end to end (tiny sizes; the timing itself is not tested)."""

import sys

from conftest import BENCHMARKS, oracle_import, run_benchmark


def test_llama_step_benchmark_runs_and_prints_the_ratio():
    oracle_import("torch")
    out = run_benchmark(
        "llama_step.py",
        *("--batch", "2", "--seq", "16", "--rounds", "1", "--per-block", "1", "--threads", "1"),
    )
    assert "batch 2, seq 16" in out
    assert "ratio course_lib/PyTorch = " in out
    assert "(target <= 1.0)" in out  # issue 25's one-thread target


def test_the_targets_are_issue_25s_on_the_cpu_and_issue_21s_on_a_gpu():
    sys.path.insert(0, str(BENCHMARKS))
    from argparse import Namespace  # noqa: PLC0415

    from llama_step import target  # noqa: PLC0415

    cpu = [target(Namespace(device="cpu", model="tiny", threads=n)) for n in (1, 2, 16)]
    assert cpu == [1.0, 1.2, 1.5]
    assert target(Namespace(device="gpu", model="tiny", threads=1)) == 3.0
    assert target(Namespace(device="gpu", model="gpu", threads=1)) == 1.5


def test_llama_step_profile_prints_each_family_at_one_and_n_threads():
    oracle_import("torch")
    out = run_benchmark(
        "llama_step.py", "--profile",
        *("--batch", "2", "--seq", "16", "--rounds", "1", "--per-block", "1", "--threads", "2"),
    )  # fmt: skip
    assert "--- 1 thread: ms per step by family ---" in out
    assert "--- 2 threads: ms per step by family ---" in out
    for family in ("matrix products", "attention (QK^T, softmax, PV)", "optimizer (AdamW)",
                   "elementwise and norms", "whole step (median)"):  # fmt: skip
        assert out.count(family) == 2, family


def test_torch_events_go_to_the_family_of_their_enclosing_call():
    sys.path.insert(0, str(BENCHMARKS))
    from step_profile import torch_family  # noqa: PLC0415

    assert torch_family("aten::mm", []) == "matrix products"
    assert torch_family("aten::mul", ["Optimizer.step#AdamW.step"]) == "optimizer (AdamW)"
    assert torch_family("aten::mm", ["aten::scaled_dot_product_attention"]).startswith("attention")
    assert torch_family("aten::copy_", []) == "copies, views, bookkeeping"
    assert torch_family("aten::silu", []) == "elementwise and norms"
