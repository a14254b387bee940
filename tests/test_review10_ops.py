"""Review 10 of the neural-network ops: the log-sum-exp family and the causal softmax over
empty axes, cross-entropy's targets of shapes unknown when built, max's tangent dtype, and
RoPE on shapes unknown when built (a hostile review's findings, each a test; the oracles
are PyTorch and NumPy)."""

import numpy as np
import pytest
import torch

import course_lib as cl


def _run(outputs, feed):
    """The values of a list of nodes, or of one node."""
    if isinstance(outputs, list):
        return cl.Executor(outputs).run(feed)
    return cl.Executor([outputs]).run(feed)[0]


# ------------------------------------------------------------------ empty axes
@pytest.mark.parametrize("axis", [-1, (0, 1), None])
def test_logsumexp_over_an_empty_axis_is_minus_infinity(axis):
    # NumPy's max of no elements raised (a ParameterError naming the maximum); PyTorch: −inf
    x = cl.variable("x", (2, 0), np.float64)
    y = cl.logsumexp(x, axis)
    value, grad = _run([y, cl.grad(cl.sum(y), [x])[0]], {x: np.zeros((2, 0))})
    expected = torch.logsumexp(torch.zeros(2, 0), () if axis is None else axis).numpy()
    np.testing.assert_array_equal(value, expected)
    assert value.shape == y.shape and grad.shape == (2, 0)


@pytest.mark.parametrize("fn", [cl.softmax, cl.log_softmax], ids=["softmax", "log_softmax"])
def test_softmaxes_of_rows_of_no_elements_are_empty(fn):
    x = cl.variable("x", (3, 0), np.float32)
    y = fn(x)
    value, grad = _run([y, cl.grad(cl.sum(y), [x])[0]], {x: np.zeros((3, 0), np.float32)})
    assert value.shape == grad.shape == (3, 0) and value.dtype == np.float32


def test_causal_attention_of_no_positions_is_empty():
    q = cl.variable("q", (1, 0, 2, 4), np.float64)
    k = cl.variable("k", (1, 0, 1, 4), np.float64)
    out, probs = cl.causal_attention(q, k, k)
    feed = {q: np.zeros((1, 0, 2, 4)), k: np.zeros((1, 0, 1, 4))}
    value, p, gq = _run([out, probs, cl.grad(cl.sum(out), [q])[0]], feed)
    assert value.shape == gq.shape == (1, 0, 2, 4) and p.shape == (1, 2, 0, 0)


def test_causal_softmax_refuses_more_queries_than_keys_when_fed():
    # a shape unknown when built: the first queries saw no key, rows of NaN and no error
    s = cl.variable("s", None, np.float64)
    with pytest.raises(cl.ShapeError, match="causal_softmax: 4 queries but only 2 keys"):
        _run(cl.causal_softmax(s, 0.5), {s: np.ones((4, 2))})


# ------------------------------------------------------------------ cross-entropy
def test_cross_entropy_refuses_broadcast_targets_when_fed():
    # NumPy broadcast (1,) targets over 3 positions: the mean over 3, but the gradient was
    # divided by the targets' count (1): three times PyTorch's
    logits = cl.variable("L", None, np.float64)
    targets = cl.variable("T", None, np.int64)
    loss = cl.cross_entropy(logits, targets)
    feed = {logits: np.ones((3, 4)), targets: np.array([2])}
    for outputs in (loss, cl.grad(loss, [logits])[0]):  # the gradient alone too
        with pytest.raises(cl.ShapeError, match=r"targets \(1,\) must be the logits' shape"):
            _run(outputs, feed)


def test_cross_entropy_takes_logits_of_a_batch_unknown_when_built():
    # (None, 4) logits against (3,) targets were refused when built
    logits = cl.variable("L", (None, 4), np.float64)
    targets = np.array([0, 3, 1])
    values = np.random.default_rng(0).normal(size=(3, 4))
    loss = cl.cross_entropy(logits, targets)
    value, grad = _run([loss, cl.grad(loss, [logits])[0]], {logits: values})
    t = torch.tensor(values, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(t, torch.tensor(targets))
    expected.backward()
    np.testing.assert_allclose(value, expected.item(), rtol=1e-12)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-12)
    with pytest.raises(cl.ShapeError, match=r"targets \(3, 1\) must be the logits' shape"):
        cl.cross_entropy(logits, np.zeros((3, 1), np.int64))


# ------------------------------------------------------------------ max
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [-1, None])
def test_the_tangent_and_gradient_of_max_keep_the_dtype_of_x(dtype, axis):
    # the tie weights were a boolean mask over its count: float64 tangents (and a cast in
    # the gradient) for float32 x
    x = cl.variable("x", (2, 3), dtype)
    values = np.array([[1, 3, 3], [2, 2, 2]], dtype)
    y = cl.max(x, axis)
    tangent = cl.jvp(y, {x: np.ones((2, 3), dtype)})
    grad = cl.grad(cl.sum(y), [x])[0]
    assert tangent.dtype == grad.dtype == dtype
    t, g = _run([tangent, grad], {x: values})
    assert t.dtype == g.dtype == dtype
    np.testing.assert_allclose(t, 1.0)
    tx = torch.tensor(values.astype(np.float64), requires_grad=True)
    (tx.amax(-1) if axis == -1 else tx.max()).sum().backward()
    np.testing.assert_allclose(g, tx.grad.numpy(), rtol=1e-3)


# ------------------------------------------------------------------ RoPE
@pytest.mark.parametrize(
    "seq_axis, shape, message",
    [
        (3, (3, 4, 8), r"a position axis \(seq_axis=3\)"),
        (-4, (3, 4, 8), r"a position axis \(seq_axis=-4\)"),
        (-2, (2, 5, 7), "the last axis must be even, got 7"),
    ],  # fmt: skip
)
def test_rope_checks_a_shape_unknown_when_built(seq_axis, shape, message):
    # seq_axis=3 of a 3-D x silently took axis 0 as the positions (3 % 3); -4 and an odd
    # head size failed in a broadcast or a reshape
    x = cl.variable("x", None, np.float64)
    with pytest.raises(cl.ShapeError, match=message):
        _run(cl.rope(x, seq_axis=seq_axis), {x: np.ones(shape)})
