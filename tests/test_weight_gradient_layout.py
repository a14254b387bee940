"""A linear layer's weight gradient comes out in the weight's own layout: for ``x @ Wᵀ`` the
product ``gᵀ·x`` (row-major, like W), not a transposed view of ``xᵀ·g`` that the optimiser's
kernels would copy first. Values equal the plain rule's; other products keep the plain rule."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import Llama, LlamaConfig

TRANSPOSES = {
    "transpose": cl.transpose,
    "matrix_transpose": cl.matrix_transpose,
    "permute (1, 0)": lambda w: cl.transpose(w, (1, 0)),
    "permute (-1, 0)": lambda w: cl.transpose(w, (-1, 0)),
}


@pytest.mark.parametrize("name", TRANSPOSES)
def test_the_weight_gradient_of_x_times_w_transposed_is_row_major(name):
    rng = np.random.default_rng(0)
    x_value, w_value = rng.standard_normal((7, 5)), rng.standard_normal((3, 5))
    g_value = rng.standard_normal((7, 3))
    x, w = cl.variable("x", (7, 5)), cl.variable("w", (3, 5))
    y = cl.matmul(x, TRANSPOSES[name](w))
    dw, dx = cl.grad(cl.sum(y * cl.constant(g_value)), [w, x])
    got_w, got_x = cl.evaluate([dw, dx], {"x": x_value, "w": w_value})
    np.testing.assert_allclose(got_w, g_value.T @ x_value, rtol=1e-13)
    np.testing.assert_allclose(got_x, g_value @ w_value, rtol=1e-13)
    shapes = [n.shape for n in cl.topological_order(dw) if n.op.name == "matmul"]
    assert (3, 5) in shapes and (5, 3) not in shapes  # gᵀ·x, shaped like w, not xᵀ·g
    assert cl.to_numpy(got_w).flags.c_contiguous


def test_other_products_keep_the_plain_rule():
    """A batched left operand, an untransposed right one, a permutation that is no transpose:
    the adjoint of the right operand is xᵀ·g (summed over the batch), as before."""
    rng = np.random.default_rng(1)
    cases = {
        "batched x": ((2, 4, 5), (3, 5), cl.transpose),
        "plain W": ((4, 5), (5, 3), lambda w: w),
        "identity permute": ((4, 5), (5, 3), lambda w: cl.transpose(w, (0, 1))),
    }
    for label, (x_shape, w_shape, view) in cases.items():
        x_value, w_value = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
        x, w = cl.variable("x", x_shape), cl.variable("w", w_shape)
        y = cl.matmul(x, view(w))
        dw = cl.grad(cl.sum(y * y), w)
        eps = 1e-6
        numeric = np.zeros(w_shape)
        f = cl.sum(y * y)
        for idx in np.ndindex(w_shape):
            bumped = w_value.copy()
            bumped[idx] += eps
            up = cl.evaluate(f, {"x": x_value, "w": bumped})
            bumped[idx] -= 2 * eps
            numeric[idx] = (up - cl.evaluate(f, {"x": x_value, "w": bumped})) / (2 * eps)
        got = cl.evaluate(dw, {"x": x_value, "w": w_value})
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-6, err_msg=label)


def test_a_training_step_hands_the_optimiser_row_major_gradients():
    """Every gradient the LLaMA's AdamW reads is C-contiguous (no transposed copy per moment)."""
    model = Llama(LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=24,
                              vocab_size=32, max_seq_len=8), seed=0)  # fmt: skip
    graph, grads = model.loss_graph(2, 8)
    tokens = np.random.default_rng(0).integers(0, 32, (2, 8))
    names = list(grads)
    values = cl.evaluate([grads[n] for n in names], model.feed(graph, tokens))
    for name, value in zip(names, values):
        assert cl.to_numpy(value).flags.c_contiguous, name
