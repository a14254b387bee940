"""Thread pools on a busy CPU: limit_threads, and the time of a training step said in advance."""

import numexpr
import numpy as np
import pytest

import course_lib as cl
from conftest import pool_threads
from course_lib.models import AdamW, Llama, LlamaConfig, train
from course_lib.models.train import seconds_per_step
from course_lib.perf import limit_threads


def test_limit_threads_sets_every_pool_and_restores_it(two_threads_each):
    assert "blas" in two_threads_each, "NumPy's BLAS is visible to threadpoolctl"
    limits = limit_threads()
    try:
        assert limits.threads == 1
        assert all(counts == {1} for counts in pool_threads().values())
        assert numexpr.get_num_threads() == 1
        assert limits.before["numexpr"] == 2
        for api, counts in two_threads_each.items():
            assert limits.before[api] == max(counts)
        a = np.random.default_rng(0).standard_normal((64, 64))
        np.testing.assert_array_equal(a @ a.T, (a @ a.T).T)  # BLAS still computes
    finally:
        limits.restore()
    assert pool_threads() == two_threads_each
    assert numexpr.get_num_threads() == 2
    assert "_controller" not in repr(limits) and "threads=1" in repr(limits)


def test_limit_threads_to_another_count(two_threads_each):
    limits = limit_threads(3)
    try:
        assert numexpr.get_num_threads() == 3
        assert limits.before["blas"] == 2
    finally:
        limits.restore()


@pytest.mark.parametrize("bad", [0, -1])
def test_limit_threads_refuses_a_count_below_one(bad):
    with pytest.raises(cl.ParameterError, match="at least 1"):
        limit_threads(bad)


@pytest.mark.parametrize("bad", [1.5, True, "2", None])
def test_limit_threads_refuses_a_non_integer(bad):
    with pytest.raises(cl.GraphError, match="limit_threads: threads must be an integer"):
        limit_threads(bad)


TINY = LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=24, vocab_size=64,
                   max_seq_len=16)  # fmt: skip


def test_seconds_per_step_changes_neither_the_model_nor_the_optimizer():
    data = np.random.default_rng(1).integers(0, TINY.vocab_size, 500)
    probed, fresh = Llama(TINY, seed=0), Llama(TINY, seed=0)
    optimizer = AdamW(probed.params, lr=1e-2)
    seconds = seconds_per_step(probed, data, batch=4, seq=12, optimizer=optimizer, repeats=2)
    assert np.isfinite(seconds) and seconds > 0
    assert optimizer.step_count == 0
    for name, value in probed.params.items():
        np.testing.assert_array_equal(value, fresh.params[name])
        assert not optimizer.m[name].any() and not optimizer.v[name].any()
    # the run after the probe is the run without it, loss for loss
    after_probe = train(probed, data, 3, batch=4, seq=12, optimizer=optimizer, progress=False)
    plain = train(fresh, data, 3, batch=4, seq=12, optimizer=AdamW(fresh.params, lr=1e-2),
                  progress=False)  # fmt: skip
    assert after_probe.losses == plain.losses
    assert optimizer.step_count == 3


def test_seconds_per_step_restores_the_step_count_when_the_step_fails():
    model = Llama(TINY, seed=0)
    optimizer = AdamW(model.params)
    model.params["lm_head.weight"] = np.zeros((3, 3), np.float32)  # fails inside the run
    with pytest.raises(cl.ShapeError, match="lm_head.weight"):
        seconds_per_step(model, np.arange(100) % 64, batch=2, seq=8, optimizer=optimizer)
    assert optimizer.step_count == 0
