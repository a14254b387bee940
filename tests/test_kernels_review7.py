"""Review of the products' two vector widths and the causal softmax's exponentials over whole
vectors of 16: each kernel writes only its own part of the output (a guard band of sentinels
around it stays as it was), at either width of the products, and the softmax keeps NumPy's
NaN and infinity rules at the hidden keys its last vector covers."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from conftest import needs_gxx
from course_lib.kernels import cpu_kernels
from course_lib.ops.attention import CausalSoftmax

needs_kernels = needs_gxx("the CPU kernels")

SENTINEL = np.float32(777.0)  # no product or probability below is 777


def _on_kernels(monkeypatch):
    """Every product on the kernels, whatever its size and the pool's thread count (the
    default build's pool follows BLAS's threads; a build off the pool counts one)."""
    monkeypatch.setattr(cpu_kernels, "products_worth_it", lambda *arrays: True)
    monkeypatch.setattr(cpu_kernels, "head_products_fit", lambda pairs, k, n: True)


def _kept(t, s):
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


def _product_case(m, n, k, kind, rng):
    """One product's (a, b, trans, mask, float64 reference): attention's three kinds with
    their causal masks (scores: C's masked entries 0; mix and mix_t: the left matrix's)."""
    if kind == "scores":  # T × d by (S × d)ᵀ, S = n >= T = m
        a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k))
        want = np.where(_kept(m, n), a @ b.T, 0.0)
        return a, b, (False, True), (cpu_kernels.MASK_ON_RESULT, n - m), want
    if kind == "mix":  # T × S by S × d, S = k >= T = m
        p, v = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        return p, v, (False, False), (cpu_kernels.MASK_ON_LEFT, k - m), (p * _kept(m, k)) @ v
    p, a = rng.standard_normal((k, m)), rng.standard_normal((k, n))  # mix_t: Pᵀ (S × T) by T × d
    return p, a, (True, False), (cpu_kernels.MASK_ON_LEFT, m - k), (p * _kept(k, m)).T @ a


# rows: fewer than a block of 6 or 12, whole blocks, ragged; columns ragged around 8, 16, 32;
# inner sizes from 1 (the masked edges are most of the product)
PRODUCT_SHAPES = [(1, 1), (5, 7), (11, 17), (12, 31), (13, 33), (25, 47), (30, 64)]


@needs_kernels
@pytest.mark.parametrize(("rows", "cols"), PRODUCT_SHAPES)
@pytest.mark.parametrize("kind", ["scores", "mix", "mix_t"])
@pytest.mark.parametrize("build", ["default", "narrow"])
def test_the_products_write_only_their_own_block_of_the_output(
    rows, cols, kind, build, narrow, monkeypatch
):
    """C (m × n, rows ldc = n + 5 apart, inside a buffer of sentinels): every element of the
    block is the masked float64 product to float32 rounding, and nothing outside it (the
    padding after each row's n columns, the rows after the last) is written, at either width:
    a block's last columns (fewer than one register block) and last rows (fewer than a block
    of rows) stay inside the matrix."""
    _on_kernels(monkeypatch)
    if build == "narrow":
        monkeypatch.setattr(cpu_kernels, "_library", lambda: narrow)
    rng = np.random.default_rng(rows * 100 + cols)
    for inner in (1, 2, 9):
        m, n, k = (rows, cols + rows, inner) if kind == "scores" else (rows, cols, inner)
        if kind == "mix":
            k = rows + inner - 1  # the keys: at least the queries
        if kind == "mix_t":
            m, k = rows + inner - 1, rows  # S keys >= T queries
        a, b, trans, mask, want = _product_case(m, n, k, kind, rng)
        ldc = n + 5
        guarded = np.full(((m + 2) * ldc,), SENTINEL, np.float32)
        out = guarded[ldc:]  # one row of sentinels before C, one after it
        ld = (a.shape[1], b.shape[1], ldc)
        strides = ((0, 0, 0), (0, 0, 0), (0, 0, 0))
        result = cpu_kernels.head_products(
            a.astype(np.float32), b.astype(np.float32), out, (1, 1, 1), (m, n, k), trans, ld,
            strides, mask,
        )  # fmt: skip
        assert result is not None
        whole = guarded.reshape(m + 2, ldc)
        inside = np.zeros(whole.shape, bool)
        inside[1 : m + 1, :n] = True
        assert (whole[~inside] == SENTINEL).all(), (kind, m, n, k)
        np.testing.assert_allclose(whole[inside].reshape(m, n), want, rtol=1e-5, atol=1e-5)


def _guarded_softmax(s, scale, threads):
    """The causal softmax kernel on ``s`` (rows, T, S) into the front of a buffer with 64
    sentinels after it: the probabilities, and the sentinels as the kernel left them."""
    guarded = np.full(s.size + 64, SENTINEL, np.float32)
    with threadpool_limits(threads):
        cpu_kernels._library().causal_softmax(
            *cpu_kernels._pointers(s, guarded), ctypes.c_longlong(s.size // s.shape[-1]),
            ctypes.c_longlong(s.shape[-2]), ctypes.c_longlong(s.shape[-1]),
            ctypes.c_float(np.float32(scale)),
        )  # fmt: skip
    return guarded[: s.size].reshape(s.shape), guarded[s.size :]


# T ≤ S; S below 16, ragged around 16 and 32, and S − T offsets that put hidden keys inside
# the visible keys' last vector of 16
SOFTMAX_SHAPES = [(1, 1), (3, 7), (15, 15), (17, 17), (5, 21), (31, 33), (40, 97), (1, 50)]


@needs_kernels
@pytest.mark.parametrize(("t", "s"), SOFTMAX_SHAPES)
@pytest.mark.parametrize("scale", [0.3, -1.0, 1e30])
def test_the_causal_softmax_keeps_numpys_rules_at_the_hidden_keys_of_its_last_vector(t, s, scale):
    """NaN, +inf, a huge score and −inf at the hidden keys just after each row's visible
    ones (inside the last vector of 16 the exponentials cover), rows all −inf, a visible
    +inf: NumPy's formula's NaNs and values, the same bits on 1 and 2 threads, and nothing
    written after the last row (its vector of 16 would run past the scores' end)."""
    rng = np.random.default_rng(t * 1000 + s)
    scores = (rng.standard_normal((600, t, s)) * 4).astype(np.float32)  # two threads' rows
    first_hidden = np.arange(t) + (s - t) + 1
    special = [np.nan, np.inf, 1e30, -np.inf]
    for block in range(1, 5):  # blocks 1..4: one special value at each row's first hidden key
        for q in range(t):
            if first_hidden[q] < s:
                scores[block, q, first_hidden[q]] = special[block - 1]
    scores[5, :, :] = -np.inf
    scores[6, t - 1, 0] = np.inf
    with np.errstate(all="ignore"):
        want = CausalSoftmax(scale).on_arrays(np, scores)
    one, after_one = _guarded_softmax(scores, scale, threads=1)
    two, after_two = _guarded_softmax(scores, scale, threads=2)
    assert (after_one == SENTINEL).all() and (after_two == SENTINEL).all()
    assert one.tobytes() == two.tobytes()
    np.testing.assert_array_equal(np.isnan(one), np.isnan(want))
    np.testing.assert_allclose(one, want, rtol=2e-6, atol=1e-7)
