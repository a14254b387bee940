"""Sums of matrix products as one ``matmul_sum`` (passes.accumulate_products): BLAS adds each
product into the result (GEMM's β = 1, kernels/blas.py). The same values and gradients as the
plain sum; bit for bit where the products are added by NumPy instead; inputs untouched."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.graph import apply, topological_order
from course_lib.kernels import blas
from course_lib.models import count_flops
from course_lib.ops.linalg import MatMulSum
from course_lib.passes import PIPELINE, accumulate_products


def _matrices(rng, dtype, **shapes):
    return {n: rng.standard_normal(s).astype(dtype) for n, s in shapes.items()}


def _variables(arrays):
    return {n: cl.variable(n, a.shape, a.dtype) for n, a in arrays.items()}


def _ops(outputs):
    return [n.op.name for n in topological_order(cl.graph.node_list(outputs, "test"))]


def _run(outputs, arrays, variables):
    feed = {variables[n]: a for n, a in arrays.items()}
    with np.errstate(invalid="ignore"):  # inf · 0 in the products with non-finite values
        values = cl.Executor(outputs).run(feed, allow_unused=True)
    return [cl.to_numpy(v) for v in (values if isinstance(values, list) else [values])]


SHAPES = {"a": (5, 7), "b": (7, 3), "c": (5, 2), "d": (2, 3), "e": (5, 3)}
ORDERS = {  # how a sum of two products and a matrix may be written
    "products first": lambda v: cl.sum_n(v["a"] @ v["b"], v["c"] @ v["d"], v["e"]),
    "matrix first": lambda v: cl.sum_n(v["e"], v["a"] @ v["b"], v["c"] @ v["d"]),
    "matrix between": lambda v: cl.sum_n(v["a"] @ v["b"], v["e"], v["c"] @ v["d"]),
    "add of products": lambda v: v["a"] @ v["b"] + v["c"] @ v["d"],
    "residual add": lambda v: v["e"] + v["a"] @ cl.matrix_transpose(cl.matrix_transpose(v["b"])),
}


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sum_of_products_becomes_one_node_with_the_sums_values(order, dtype, rng):
    arrays = _matrices(rng, dtype, **SHAPES)
    v = _variables(arrays)
    plain = ORDERS[order](v)
    accumulated = accumulate_products(plain)
    assert isinstance(accumulated.op, MatMulSum) and "matmul" not in _ops(accumulated)
    assert accumulated.name == plain.name and accumulated.shape == plain.shape
    frozen = {n: a.copy() for n, a in arrays.items()}
    (want,), (got,) = _run(plain, arrays, v), _run(accumulated, arrays, v)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-13)
    for n in arrays:  # a matrix term is copied before anything is added into it
        np.testing.assert_array_equal(arrays[n], frozen[n])


@pytest.mark.parametrize("order", ORDERS)
def test_without_blas_the_products_are_added_in_the_sums_order_bit_for_bit(order, rng, monkeypatch):
    monkeypatch.setattr(blas, "add_product", lambda out, a, b: False)
    arrays = _matrices(rng, np.float32, **SHAPES)
    arrays["a"][0, 0], arrays["e"][1, 1], arrays["c"][2, 0] = np.inf, np.nan, -np.inf
    v = _variables(arrays)
    plain = ORDERS[order](v)
    (want,), (got,) = _run(plain, arrays, v), _run(accumulate_products(plain), arrays, v)
    np.testing.assert_array_equal(got, want)


def test_blas_adds_transposed_operands_non_finite_values_and_empty_matrices(rng):
    assert blas.available()  # NumPy's wheels bundle OpenBLAS: the fast path is what runs here
    for dtype in (np.float32, np.float64):
        a, b = rng.standard_normal((6, 4)).astype(dtype), rng.standard_normal((3, 4)).astype(dtype)
        a[0, 0], b[2, 3] = np.inf, np.nan
        for left, right in ((a, b.T), (np.asfortranarray(a), b.T), (a, np.ascontiguousarray(b.T))):
            out = rng.standard_normal((6, 3)).astype(dtype)
            with np.errstate(invalid="ignore"):
                want = out + left @ right
            assert blas.add_product(out, left, right)
            np.testing.assert_allclose(out, want, rtol=1e-5, equal_nan=True)
    for m, k, n in ((0, 3, 2), (3, 0, 2), (3, 2, 0)):
        out = np.ones((m, n), np.float32)
        assert blas.add_product(out, np.ones((m, k), np.float32), np.ones((k, n), np.float32))
        np.testing.assert_array_equal(out, 1.0)  # k = 0: nothing added


def test_blas_refuses_what_it_cannot_add_and_writes_nothing(rng):
    a, b = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 5)).astype(
        np.float32
    )
    out = np.zeros((4, 5), np.float32)
    frozen = out.copy()
    frozen.flags.writeable = False
    big = np.zeros((4, 10), np.float32)
    raw = np.zeros(4 * 6 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(4, 6)  # unaligned
    refused = {
        "a strided operand": (out, a[:, ::2].repeat(2, axis=1)[:, ::2], b),
        "a non-contiguous out": (big[:, ::2], a, b),
        "a read-only out": (frozen, a, b),
        "mixed dtypes": (out, a.astype(np.float64), b),
        "an integer out": (out.astype(np.int32), a.astype(np.int32), b.astype(np.int32)),
        "big-endian floats": (out.astype(">f4"), a.astype(">f4"), b.astype(">f4")),
        "an unaligned operand": (out, raw, b),
        "an operand inside out": (big[:, :6].reshape(4, 6).copy(), big[:, :6], b[:6, :6]),
        "inner sizes that differ": (out, a, b[:5]),
        "a batch of matrices": (out[None], a[None], b[None]),
        "lists": (out, a.tolist(), b),
    }
    refused["an operand inside out"] = (big, big[:, :6], rng.standard_normal((6, 10)).astype(
        np.float32))
    for why, (target, left, right) in refused.items():
        before = np.array(target, copy=True)
        assert not blas.add_product(target, left, right), why
        np.testing.assert_array_equal(target, before, err_msg=why)


def test_sums_that_are_left_alone(rng):
    v = _variables(_matrices(rng, np.float32, a=(5, 7), b=(7, 3), e=(5, 3), r=(1, 3)))
    p = v["a"] @ v["b"]
    batched = cl.variable("x", (2, 5, 7), np.float32) @ v["b"]
    wide = cl.variable("w", (5, 3), np.float64)
    unknown = cl.variable("u", (None, 7), np.float32) @ v["b"]
    cases = {
        "a product read again": [p + v["e"], p * 2.0],
        "a product that is an output": [p + v["e"], p],
        "a product added to itself": [cl.sum_n(p, p)],
        "a broadcast term": [p + v["r"]],
        "batched products": [batched + batched],
        "a float64 term": [p + wide],
        "a shape known at run time only": [unknown + unknown],
        "no product": [v["e"] + v["e"]],
    }
    for why, outputs in cases.items():
        assert "matmul_sum" not in _ops(accumulate_products(outputs)), why


def test_gradients_and_tangents_through_matmul_sum_are_the_sums(rng):
    arrays = _matrices(rng, np.float64, **SHAPES)
    v = _variables(arrays)
    plain = ORDERS["matrix between"](v)
    accumulated = accumulate_products(plain)
    wrt = [v[n] for n in "abcde"]
    loss_plain, loss_acc = cl.sum(cl.tanh(plain)), cl.sum(cl.tanh(accumulated))
    want = _run(cl.grad(loss_plain, wrt), arrays, v)
    got = _run(cl.grad(loss_acc, wrt), arrays, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    got_b = _run(cl.grad(loss_acc, [v["b"]]), arrays, v)  # only one input needed
    np.testing.assert_allclose(got_b[0], want[1], rtol=1e-12)
    tangents = {v[n]: cl.variable(f"d{n}", arrays[n].shape, np.float64) for n in "ace"}
    dots = {f"d{n}": rng.standard_normal(arrays[n].shape) for n in "ace"}
    feed = {v[n]: a for n, a in arrays.items()}
    feed |= {tangents[v[n]]: dots[f"d{n}"] for n in "ace"}
    got_t = cl.Executor(cl.jvp(accumulated, tangents)).run(feed, allow_unused=True)
    want_t = cl.Executor(cl.jvp(plain, tangents)).run(feed, allow_unused=True)
    np.testing.assert_allclose(cl.to_numpy(got_t), cl.to_numpy(want_t), rtol=1e-12)


def test_matmul_sum_counts_the_products_and_the_additions():
    a, b = cl.variable("a", (5, 7)), cl.variable("b", (7, 3))
    e = cl.variable("e", (5, 3))
    node = apply(MatMulSum(("product", "matrix", "product")), a, b, e, a, b)
    assert node.shape == (5, 3)
    assert count_flops(node).total == 2 * (2 * 5 * 3 * 7) + 2 * 5 * 3


def test_matmul_sum_refuses_terms_it_does_not_know_and_shapes_that_differ():
    with pytest.raises(cl.GraphError, match="matmul_sum: terms must be"):
        MatMulSum(("product", "sum"))
    with pytest.raises(cl.GraphError, match="matmul_sum: terms must be"):
        MatMulSum(())
    a, b, e = cl.variable("a", (5, 7)), cl.variable("b", (7, 3)), cl.variable("e", (5, 4))
    with pytest.raises(cl.ShapeError, match="matmul_sum: the terms' shapes differ"):
        apply(MatMulSum(("product", "matrix")), a, b, e)
    e = cl.variable("e", (5, 3))
    for terms, inputs in ((("product",), (a, b, e)), (("product", "matrix"), (a, b))):
        with pytest.raises(cl.ShapeError, match=r"matmul_sum: its terms .* take \d inputs"):
            apply(MatMulSum(terms), *inputs)
    for odd in (cl.variable("s", ()), cl.variable("v", (3,))):
        with pytest.raises(cl.ShapeError, match=r"every term and factor is a matrix \(2-D\)"):
            apply(MatMulSum(("product", "matrix")), a, b, odd)


def test_the_pipeline_accumulates_and_the_training_step_does_without_optimize():
    assert accumulate_products in PIPELINE
    from course_lib.models import Llama, LlamaConfig  # noqa: PLC0415
    from course_lib.models.optim import AdamW  # noqa: PLC0415
    from course_lib.models.train import training_step  # noqa: PLC0415

    config = LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=24,
                         vocab_size=11, max_seq_len=8)  # fmt: skip
    model = Llama(config, seed=0)
    run = training_step(model, AdamW(model.params), 2, 8)
    sums = [n for n in run.order if isinstance(n.op, MatMulSum)]
    assert len(sums) == 4  # x̄ of Q/K/V's input and of the gate/up input; two residual adds


def test_on_the_host_the_products_after_the_first_go_to_blas(rng, monkeypatch):
    calls = []
    add_product = blas.add_product
    arrays = _matrices(rng, np.float32, **SHAPES)
    v = _variables(arrays)
    with cl.backend.use_device("cpu"):
        node = accumulate_products(ORDERS["matrix first"](v))
        spy = lambda *args: calls.append(1) or add_product(*args)  # noqa: E731
        monkeypatch.setattr(blas, "add_product", spy)
        _run(node, arrays, v)
    assert len(calls) == 2  # the matrix is copied, both products added into it
