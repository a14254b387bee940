"""Review 11 of the neural-network ops: RoPE's tables in float64 for float64 x and its
integer inputs, the norms' weight shapes, attention's kv heads, the causal softmax of integer
scores and matmul's operands of ranks unknown when built (a hostile review's findings, each
a test; the oracles are PyTorch and NumPy)."""

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib.kernels import reference


def _run(outputs, feed):
    """The values of a list of nodes, or of one node."""
    if isinstance(outputs, list):
        return cl.Executor(outputs).run(feed)
    return cl.Executor([outputs]).run(feed)[0]


# ------------------------------------------------------------------ RoPE
def _torch_rope(x, start, theta=10000.0):
    """Hugging Face's ``x·cos + rotate_half(x)·sin`` (positions on axis -2), its angles and
    tables in float64."""
    t, d = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(torch.arange(start, start + t, dtype=torch.float64), inv_freq)
    cos, sin = (torch.cat([a, a], -1) for a in (angles.cos(), angles.sin()))
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + rotated * sin


def test_rope_of_float64_x_uses_float64_tables():
    # the tables were float32 for every dtype: float64 RoPE was 2e-7 off, its gradient too
    rng = np.random.default_rng(0)
    xv, gv = rng.normal(size=(2, 3, 9, 16)), rng.normal(size=(2, 3, 9, 16))
    x = cl.variable("x", xv.shape, np.float64)
    y = cl.rope(x, start=5)
    value, grad = _run([y, cl.grad(cl.sum(y * cl.constant(gv)), [x])[0]], {x: xv})
    t = torch.tensor(xv, requires_grad=True)
    expected = _torch_rope(t, 5)
    (expected * torch.tensor(gv)).sum().backward()
    np.testing.assert_allclose(value, expected.detach().numpy(), rtol=0, atol=1e-14)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=0, atol=1e-14)


def test_rope_of_float32_x_keeps_float32_tables_bit_for_bit():
    xv = np.random.default_rng(1).normal(size=(2, 7, 8)).astype(np.float32)
    x = cl.variable("x", xv.shape, np.float32)
    cos, sin = (a[3:] for a in reference.rope_tables(10, 8))
    np.testing.assert_array_equal(_run(cl.rope(x, start=3), {x: xv}), reference.rope(xv, cos, sin))


@pytest.mark.parametrize("known", [True, False], ids=["built", "fed"])
def test_rope_refuses_integer_x(known):
    # the tables were cast to x's dtype: int64 cos and sin of 0s and 1s, a silent wrong answer
    x = cl.variable("x", (2, 5, 6), np.int64 if known else None)
    error = cl.ShapeError if known else cl.ParameterError  # as the executor classes them
    with pytest.raises(error, match="rope rotates floating-point x, got int64"):
        _run(cl.rope(x), {x: np.ones((2, 5, 6), np.int64)})


# ------------------------------------------------------------------ norms
@pytest.mark.parametrize("shape", [(1, 4), (3, 4), (1,), (2, 3, 4)])
@pytest.mark.parametrize("which", ["weight", "bias"])
def test_layer_norm_refuses_parameters_not_of_x_last_size(which, shape):
    # NumPy broadcast them: a weight per element, or a bias that made the output larger;
    # PyTorch's layer_norm wants both of the normalised shape
    x = cl.variable("x", (3, 4), np.float64)
    params = {"weight": cl.variable("w", (4,)), "bias": cl.variable("b", (4,))}
    params[which] = cl.variable("p", shape)
    with pytest.raises(cl.ShapeError, match=f"layer_norm needs x .* and a {which} \\(n,\\)"):
        cl.layer_norm(x, params["weight"], params["bias"])


def test_rms_norm_checks_its_weight_when_fed():
    # shapes unknown when built: a (3, 4) weight was taken as one weight per element
    x, w = cl.variable("x", None, np.float64), cl.variable("w", None, np.float64)
    with pytest.raises(cl.ShapeError, match="a weight \\(n,\\) of x's last size"):
        _run(cl.rms_norm(x, w), {x: np.ones((3, 4)), w: np.ones((3, 4))})


def test_rms_norm_takes_a_weight_of_size_unknown_when_built():
    # a weight (None,) was refused: None != 4
    x, w = cl.variable("x", (3, 4), np.float64), cl.variable("w", (None,), np.float64)
    xv, wv = np.arange(12.0).reshape(3, 4), np.arange(4.0)
    expected = torch.nn.functional.rms_norm(torch.tensor(xv), (4,), torch.tensor(wv), 1e-5)
    np.testing.assert_allclose(_run(cl.rms_norm(x, w), {x: xv, w: wv}), expected.numpy())


# ------------------------------------------------------------------ attention
def test_causal_attention_refuses_k_and_v_of_different_kv_heads():
    # each product grouped the queries by its own operand: head h read k's head h // 2 but
    # v's head h // 4, with no error
    q = cl.variable("q", (1, 3, 4, 8))
    k, v = cl.variable("k", (1, 3, 2, 8)), cl.variable("v", (1, 3, 1, 8))
    with pytest.raises(cl.ShapeError, match="k has 2 kv heads but v has 1"):
        cl.causal_attention(q, k, v)


def test_attention_of_no_kv_heads_says_so():
    # it was a NumericError, "integer modulo by zero"
    q, k = cl.variable("q", (1, 3, 4, 8)), cl.variable("k", (1, 3, 0, 8))
    with pytest.raises(cl.ShapeError, match="at least one kv head, got 0"):
        cl.head_scores(q, k)


@pytest.mark.parametrize("queries, keys", [(2, 3), (0, 0)])
def test_causal_softmax_of_integer_scores_is_a_float_softmax(queries, keys):
    # the scale was cast to int64 (0.5 became 0) and the −∞ mask too, then exp's float output
    # could not be cast back: a GraphError; softmax takes integers as floats (PyTorch too)
    sv = np.arange(queries * keys).reshape(1, queries, keys) % 5
    s = cl.variable("s", sv.shape, np.int64)
    value = _run(cl.causal_softmax(s, 0.5), {s: sv})
    kept = torch.ones(queries, keys, dtype=torch.bool).tril(keys - queries)
    expected = (torch.tensor(sv, dtype=torch.float64) * 0.5).masked_fill(~kept, -torch.inf)
    assert value.dtype == np.float64
    np.testing.assert_allclose(value, expected.softmax(-1).numpy(), rtol=1e-14)


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize("shapes", [((3, 4), (4,)), ((4,), (4, 2)), ((4,), (4,))])
def test_matmul_of_vectors_of_rank_unknown_when_built_is_refused_when_fed(shapes):
    # the product ran (NumPy's rules) but its gradient failed in a transpose ("axis -2 is out
    # of bounds"): matmul() promotes a 1-D operand only when it knows it is one
    x, y = cl.variable("x", None, np.float64), cl.variable("y", None, np.float64)
    z = cl.matmul(x, y)
    with pytest.raises(cl.ShapeError, match="matmul inputs need 2\\+ dimensions"):
        _run(z, {x: np.ones(shapes[0]), y: np.ones(shapes[1])})
