"""benchmarks/llama_step.py times like with like: PyTorch's copy of the model starts from
course_lib's weights and takes the same AdamW steps, and a step that differs stops the run."""

import sys

import numpy as np
import pytest

from conftest import BENCHMARKS, oracle_import
from course_lib.models import LlamaConfig

SMALL = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=64,
                    max_seq_len=16)  # fmt: skip


def test_both_libraries_take_the_same_training_steps():
    oracle_import("torch")
    sys.path.insert(0, str(BENCHMARKS))
    from llama_step import course_lib_step, torch_step  # noqa: PLC0415

    tokens = np.random.default_rng(0).integers(0, SMALL.vocab_size, (2, 16))
    ours = course_lib_step(SMALL, tokens)
    theirs = torch_step(SMALL, tokens, ours)
    losses = np.array([(ours(), theirs()) for _ in range(4)])
    # the steps move the loss far more than the tolerance: a skipped update would show
    assert losses[0, 0] - losses[-1, 0] > 1e-3
    np.testing.assert_allclose(losses[:, 0], losses[:, 1], rtol=1e-5)


def test_the_benchmark_stops_when_the_losses_differ():
    sys.path.insert(0, str(BENCHMARKS))
    from llama_step import same_losses  # noqa: PLC0415

    agree = same_losses({"course_lib": lambda: 2.0, "PyTorch": lambda: 2.0000001})
    assert agree == "  loss at the next step: course_lib 2.000000, PyTorch 2.000000"
    with pytest.raises(SystemExit, match="course_lib 2.000000, PyTorch 2.010000: they differ"):
        same_losses({"course_lib": lambda: 2.0, "PyTorch": lambda: 2.01})


def test_cpu_time_is_for_one_thread_on_the_cpu(monkeypatch, capsys):
    """``--cpu-time`` sums every thread's time, so it is refused with more than one thread
    (before anything is built or timed)."""
    sys.path.insert(0, str(BENCHMARKS))
    import llama_step  # noqa: PLC0415

    monkeypatch.setattr(sys, "argv", ["llama_step.py", "--cpu-time", "--threads", "2"])
    with pytest.raises(SystemExit):
        llama_step.main()
    assert "--cpu-time needs --threads 1" in capsys.readouterr().err


def test_blocked_medians_take_the_clock_they_are_given():
    """A clock that advances 5 per reading times every call at 5 (not the wall time)."""
    import course_lib as cl  # noqa: PLC0415
    from course_lib.perf import blocked_medians  # noqa: PLC0415

    readings = iter(range(0, 10_000, 5))
    medians = blocked_medians({"a": lambda: None, "b": lambda: None}, rounds=2, per_block=2,
                              clock=lambda: next(readings))  # fmt: skip
    assert medians == {"a": 5, "b": 5}
    with pytest.raises(cl.GraphError, match="clock must be a function"):
        blocked_medians({"a": lambda: None}, clock=0.0)
