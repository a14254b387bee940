"""Review 9 of the ops and reverse mode: integer inputs of the log-sum-exp family, reshape's
-1, split, concat and matmul with sizes unknown when built, permute's and take's input checks,
RMSNorm's dtypes, an integer seed's gradient, and docstrings that said something false (a
hostile review's findings, each a test)."""

import re

import numpy as np
import pytest

import course_lib as cl
import course_lib.ops.elementwise as elementwise

UINT8 = np.array([[0, 1, 254], [200, 2, 3]], np.uint8)
INT8 = np.array([[-128, 1, 127], [100, 2, 3]], np.int8)


def read_only(array):
    array = np.array(array)
    array.flags.writeable = False
    return array


def log_softmax64(a):
    a = a.astype(np.float64)
    m = a.max(-1, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(-1, keepdims=True))


@pytest.mark.parametrize("values", [UINT8, INT8], ids=["uint8", "int8"])
def test_the_log_sum_exp_family_of_integers_does_not_wrap(values):
    # x − max on unsigned or narrow integers wrapped (uint8: 0 − 254 = 2): wrong numbers, no error
    x = cl.variable("x", values.shape, values.dtype)
    expected = log_softmax64(values)
    lse, soft, log_soft, ce = cl.evaluate(
        [cl.logsumexp(x, -1), cl.softmax(x, -1), cl.log_softmax(x, -1),
         cl.cross_entropy(x, np.array([0, 1]))],
        {x: read_only(values)},
    )  # fmt: skip
    assert lse.dtype == np.float16  # NumPy's exp of 8-bit integers, as before
    np.testing.assert_allclose(lse, (values - expected)[:, 0], rtol=1e-3)
    np.testing.assert_allclose(soft, np.exp(expected), atol=1e-3)
    np.testing.assert_allclose(log_soft, expected, rtol=1e-3)
    np.testing.assert_allclose(ce, -(expected[0, 0] + expected[1, 1]) / 2, rtol=1e-3)


def test_logsumexp_of_booleans_takes_the_dtype_of_numpys_exp():
    b = cl.variable("b", (3,), bool)
    out = cl.logsumexp(b)
    value = cl.evaluate(out, {b: np.array([True, False, True])})
    assert out.dtype == value.dtype == np.exp(np.ones(1, bool)).dtype
    np.testing.assert_allclose(value, np.log(2 * np.e + 1), rtol=1e-3)


def test_reshape_refuses_an_ambiguous_minus_one_when_built():
    # the other sizes multiply to 0: NumPy refuses; the static shape held a -1
    z = cl.variable("z", (0, 3), np.float64)
    with pytest.raises(cl.ShapeError, match=r"reshape.*z: \(0, 3\).*-1 is ambiguous"):
        cl.reshape(z, (-1, 0))
    assert cl.reshape(z, (-1, 3)).shape == (0, 3)


def test_reshape_of_an_unknown_shape_keeps_the_sizes_it_names():
    u = cl.variable("u")
    assert cl.reshape(u, (2, -1)).shape == (2, None)


def test_split_along_a_negative_axis_of_an_unknown_rank():
    # the parts indexed axis 0 instead of the last axis
    u = cl.variable("u", None, np.float64)
    values = np.arange(6.0).reshape(2, 3)
    first, rest = cl.evaluate(cl.split(u, [1, 2], axis=-1), {u: read_only(values)})
    np.testing.assert_array_equal(first, values[:, :1])
    np.testing.assert_array_equal(rest, values[:, 1:])


def test_split_refuses_unknown_sizes_with_a_course_lib_error():
    x = cl.variable("x", (3,), np.float64)
    with pytest.raises(cl.GraphError, match="split of x: sizes must be integers"):
        cl.split(x, [None, 2])


def test_concat_of_partially_known_shapes():
    # a size unknown in one input and known in another was "shapes differ"
    p, q = cl.variable("p", (None, 3), np.float64), cl.variable("q", (2, None), np.float64)
    joined = cl.concat([p, q], axis=1)
    assert joined.shape == (2, None)
    value = cl.evaluate(joined, {p: np.ones((2, 3)), q: np.zeros((2, 1))})
    np.testing.assert_array_equal(value, np.concatenate([np.ones((2, 3)), np.zeros((2, 1))], 1))
    with pytest.raises(cl.ShapeError, match="differ outside axis 1"):
        cl.concat([p, cl.variable("r", (4, 1), np.float64), q], axis=1)


def test_concat_of_nothing_is_a_course_lib_error():
    with pytest.raises(cl.ParameterError, match="concat needs at least one node"):
        cl.concat([])


def test_matmul_takes_numpy_and_list_vectors_as_numpy_does():
    # np.ones(3) @ W was refused: "1-D is promoted by matmul()", which it then did not do
    w = cl.variable("W", (3, 2), np.float64)
    values = np.arange(6.0).reshape(3, 2)
    v = np.array([1.0, -2.0, 0.5])
    left, right, explicit = np.ones(3) @ w, w.T @ v, cl.matmul(w, [1.0, 2.0])
    assert (left.shape, right.shape, explicit.shape) == ((2,), (2,), (3,))
    got = cl.evaluate([left, right, explicit], {w: read_only(values)})
    for value, expected in zip(got, [np.ones(3) @ values, values.T @ v, values @ [1.0, 2.0]]):
        np.testing.assert_allclose(value, expected)
    gradient = cl.evaluate(cl.grad(cl.sum(left), w), {w: values})
    np.testing.assert_array_equal(gradient, np.ones((3, 2)))


def test_matmul_of_vectors_with_sizes_unknown_when_built():
    # reshape to (1, None) failed when run; an operand of unknown shape crashed with TypeError
    v = cl.variable("v", (None,), np.float64)
    w, batch = cl.variable("W", (3, 2), np.float64), cl.variable("b", (None, 3, 2), np.float64)
    u = cl.variable("u")
    vw = cl.matmul(v, w)
    assert vw.shape == (2,)
    feed = {v: np.ones(3), w: np.ones((3, 2)), batch: np.ones((4, 3, 2)), u: np.ones((5, 3, 2))}
    cases = [(vw, (2,)), (cl.matmul(v, v), ()), (cl.matmul(v, batch), (4, 2)),
             (cl.matmul(v, u), (5, 2)), (cl.matmul(cl.matrix_transpose(u), v), (5, 2))]  # fmt: skip
    got = cl.evaluate([c for c, _ in cases], feed, allow_unused=True)
    for value, (node, shape) in zip(got, cases):
        assert np.shape(value) == shape, node
        np.testing.assert_array_equal(value, 3.0)
    dv, db = cl.evaluate(cl.grad(cl.sum(cl.matmul(v, batch)), [v, batch]), feed, allow_unused=True)
    np.testing.assert_array_equal(dv, 8.0)
    np.testing.assert_array_equal(db, 1.0)


@pytest.mark.parametrize("shape, axes", [((3, 2), (3, 0)), ((3, 2), (-3, 0)), ((), (0,))])
def test_permute_names_axes_out_of_range(shape, axes):
    # "tuple index out of range", or a bare ZeroDivisionError for a 0-d input
    x = cl.variable("x", shape, np.float64)
    with pytest.raises(cl.ShapeError, match=re.escape(f"x: {shape}") + ".*not a permutation"):
        cl.permute(x, axes)


@pytest.mark.parametrize("table", [2.0, cl.variable("s", (), np.float64)], ids=["number", "0-d"])
def test_take_refuses_a_table_without_rows_when_built(table):
    # a bare AttributeError (a number) or "tuple index out of range" (0-d) when run
    with pytest.raises(cl.ShapeError, match="take picks rows.*0-d"):
        cl.take(table, np.array([0]))


def test_rms_norm_promotes_a_wider_weight_as_numpy_does():
    # out *= w cast a float64 weight's product down to float32
    rng = np.random.default_rng(0)
    x32, w64 = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=3)
    x, w = cl.variable("x", (2, 3), np.float32), cl.variable("w", (3,), np.float64)
    out = cl.rms_norm(x, w)
    value = cl.evaluate(out, {x: read_only(x32), w: read_only(w64)})
    expected = w64 * x32 / np.sqrt(np.mean(x32 * x32, -1, keepdims=True) + 1e-5)
    assert out.dtype == value.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_rms_norm_refuses_integer_x_when_built():
    x, w = cl.variable("x", (2, 3), np.int64), cl.variable("w", (3,), np.float64)
    with pytest.raises(cl.ShapeError, match="rms_norm.*floating-point x, got int64"):
        cl.rms_norm(x, w)


def test_a_gradient_from_an_integer_seed_has_the_variables_dtype():
    # the gradient of a float32 variable came out int64
    x = cl.variable("x", (3,), np.float32)
    gradient = cl.grad(cl.sum(x), x, seed=cl.constant(np.int64(3)))
    value = cl.evaluate(gradient, {x: np.ones(3, np.float32)})
    assert gradient.dtype == value.dtype == np.float32
    np.testing.assert_array_equal(value, 3.0)


def test_maximum_documents_the_tie_rule_it_follows():
    x, y = cl.variable("x", (), np.float64), cl.variable("y", (), np.float64)
    dx, dy = cl.evaluate(cl.grad(cl.maximum(x, y), [x, y]), {x: 1.0, y: 1.0})
    assert dx == dy == 0.5
    assert "halves" in cl.maximum.__doc__ and "goes to x" not in cl.maximum.__doc__


def test_elementwise_docstring_describes_the_sigmoid_it_computes():
    x = cl.variable("x", (2,), np.float64)
    value = cl.evaluate(cl.sigmoid(x), {x: np.array([-20.0, 0.0])})
    np.testing.assert_allclose(value, 1 / (1 + np.exp([20.0, 0.0])), rtol=1e-15)
    assert "tanh form" not in elementwise.__doc__


@pytest.mark.parametrize("taken", [True, False])
def test_a_gradient_through_cond_has_one_dtype_whichever_branch_runs(taken):
    # the taken branch's float64 constant made the float32 gradient float64 (static: float32)
    x, p = cl.variable("x", (3,), np.float32), cl.variable("p", (), bool)
    out = cl.cond(p, lambda: x * np.float64(2.0), lambda: x)
    gradient = cl.grad(cl.sum(out), x)
    value = cl.evaluate(gradient, {x: np.ones(3, np.float32), p: np.array(taken)})
    assert gradient.dtype == value.dtype == np.float32
    np.testing.assert_array_equal(value, 2.0 if taken else 1.0)
