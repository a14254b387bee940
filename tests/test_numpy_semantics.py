"""Optimised and unoptimised runs of one graph keep NumPy's dtypes, values and errors: static
dtypes asked of NumPy, constant folding that keeps each result's dtype, fused regions only
where NumPy stays in one dtype, a sigmoid exact far left, and no state borrowed from the
caller (a hostile review's findings, each a test)."""

import warnings

import numpy as np
import pytest

import course_lib as cl
from course_lib.passes import fold_constants

ints = np.array([1, 2, 3])


def both(outputs, feed=None):
    """The unoptimised and the optimised run of ``outputs``."""
    return cl.Executor(outputs).run(feed or {}), cl.Executor(outputs, optimize=True).run(feed or {})


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda: cl.constant(ints) / cl.constant(ints + 1), ints / (ints + 1)),
        (lambda: cl.sin(cl.constant(ints)), np.sin(ints)),
        (lambda: cl.sigmoid(cl.constant(ints)), 1 / (1 + np.exp(-ints))),
        (lambda: cl.mean(cl.constant(ints)), np.mean(ints)),
        (lambda: cl.sum(cl.constant(np.array([100, 100, 100], np.int8))), np.int64(300)),
        (lambda: cl.sum(cl.constant(np.array([True, True, True]))), np.int64(3)),
    ],
    ids=["int/int", "sin(int)", "sigmoid(int)", "mean(int)", "sum(int8)", "sum(bool)"],
)
def test_folding_keeps_numpys_result_and_the_static_dtype_is_it(build, expected):
    y = build()
    plain, optimised = both(y)
    np.testing.assert_allclose(plain, expected, rtol=1e-12)
    same(plain, optimised)
    assert y.dtype == np.asarray(plain).dtype


ELEMENTWISE = {
    "div": lambda x: x / x,
    "exp": cl.exp,
    "sqrt": cl.sqrt,
    "tanh": cl.tanh,
    "sigmoid": cl.sigmoid,
    "silu": cl.silu,
    "neg": lambda x: -x,
    "add": lambda x: x + x,
    "mul 0.5": lambda x: x * x,
}


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int64", "float16", "float32"])
@pytest.mark.parametrize("op", ELEMENTWISE)
def test_static_dtype_is_the_computed_one(op, dtype):
    x = cl.variable("x", (3,), dtype)
    y = ELEMENTWISE[op](x)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            value = cl.evaluate(y, {"x": np.array([0, 1, 1], dtype)})
        except cl.CourseLibError:  # bool - bool, -bool: NumPy refuses; nothing to compare
            return
    assert y.dtype == value.dtype


def test_fused_regions_promote_as_numpy_does():
    x, y = cl.variable("x", (2,), "int32"), cl.variable("y", (2,), "float32")
    plain, optimised = both((x + y) * 2.0, {"x": np.array([16777217, 3], np.int32),
                                            "y": np.zeros(2, np.float32)})  # fmt: skip
    same(plain, optimised)
    assert plain[0] == 2 * 16777217  # float64: float32 would round to 16777216
    a, b = cl.variable("a", (2,), "int8"), cl.variable("b", (2,), "float32")
    feed = {"a": np.array([100, 1], np.int8), "b": np.ones(2, np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # int8 overflow wraps, as in NumPy
        same(*both((a + 100) * b, feed))
    x32 = cl.variable("x32", (4,), "float32")
    plain, optimised = both((x32 > 0) * 1.0 * x32, {"x32": np.array([-1, 2, 3, 0.1], np.float32)})
    same(plain, optimised)
    assert plain.dtype == np.float64  # bool * 1.0 is float64 in NumPy
    for optimize in (False, True):  # 1000 does not fit int8: NumPy's error, both ways
        with pytest.raises(cl.NumericError, match="int8"):
            cl.Executor(a * 1000 + b, optimize=optimize).run(feed)


def test_a_fused_region_keeps_an_axis_against_an_empty_one():
    x, y = cl.variable("x", (1, 1), "float64"), cl.variable("y", (0,), "float64")
    plain, optimised = both(cl.exp(x) + y, {"x": np.ones((1, 1)), "y": np.ones(0)})
    assert plain.shape == optimised.shape == (1, 0)


@pytest.mark.parametrize("dtype, far", [("float64", -38.0), ("float32", -20.0)])
@pytest.mark.parametrize("size", [2, 1 << 16])  # NumPy's formula; the CPU kernel
def test_log_sigmoid_far_left_is_exact(dtype, far, size):
    x = cl.variable("x", (size,), dtype)
    y = cl.sum(cl.log(cl.sigmoid(x)))
    (g,) = cl.grad(y, [x])
    feed = {"x": np.full(size, far, dtype)}
    for optimize in (False, True):
        value, slope = cl.Executor([y, g], optimize=optimize).run(feed)
        np.testing.assert_allclose(value / size, far, rtol=1e-5)
        np.testing.assert_allclose(slope, 1.0, rtol=1e-5)


def test_sigmoid_kernel_and_fused_sigmoid_agree_on_specials():
    n = 1 << 16
    a, b = cl.variable("a", (n,), "float32"), cl.variable("b", (n,), "float32")
    feed = {"a": np.full(n, -88.0, np.float32), "b": np.full(n, np.inf, np.float32)}
    same(*both(cl.sigmoid(a) * b, feed))


def test_sigmoid_of_unsigned_ints_does_not_wrap():
    x = cl.variable("x", (2,), "uint8")
    np.testing.assert_allclose(cl.evaluate(cl.sigmoid(x), {"x": np.array([1, 2], np.uint8)}),
                               1 / (1 + np.exp(-np.array([1.0, 2.0]))))  # fmt: skip


def test_an_index_array_is_copied_when_the_node_is_built():
    x = cl.variable("x", (4,), "float64")
    index = np.array([0, 1])
    y = x[index]
    index[:] = 3  # the caller reuses its array
    feed = {"x": np.array([10.0, 20.0, 30.0, 40.0])}
    np.testing.assert_array_equal(cl.evaluate(y, feed), [10.0, 20.0])
    np.testing.assert_array_equal(cl.evaluate(cl.grad(cl.sum(y), [x])[0], feed), [1, 1, 0, 0])


def test_no_derivative_flows_through_a_cast_to_integers():
    x = cl.variable("x", (3,), "float64")
    y = cl.cast(cl.cast(x, "int64"), "float64") * 2.0  # 2 · trunc(x): slope 0
    feed = {"x": np.array([0.3, 1.7, -2.5])}
    np.testing.assert_array_equal(cl.evaluate(cl.grad(cl.sum(y), [x])[0], feed), 0.0)
    tangent = cl.jvp(y, {x: np.ones(3)})
    np.testing.assert_array_equal(cl.Executor(tangent).run(feed, allow_unused=True), 0.0)
    mask = cl.cast(x > 0, "float64") * x  # a float cast still carries its slope
    np.testing.assert_array_equal(cl.evaluate(cl.grad(cl.sum(mask), [x])[0], feed), [1, 1, 0])


def test_folded_numpy_scalars_stay_strongly_typed():
    x32 = cl.variable("x", (2,), "float32")
    same(*both(x32 * cl.exp(cl.constant(2.0)), {"x": np.ones(2, np.float32)}))
    h = cl.variable("h", (2,), "float16")
    plain, optimised = both(h * cl.cast(2.0, "float32"), {"h": np.ones(2, np.float16)})
    same(plain, optimised)
    assert plain.dtype == np.float32


def test_products_of_unknown_dtypes_are_not_merged():
    x, w1, w2 = cl.variable("x", (2, 3)), cl.variable("W1", (3, 4)), cl.variable("W2", (3, 5))
    feed = {"x": np.ones((2, 3), np.float32), "W1": np.full((3, 4), 0.1, np.float32),
            "W2": np.ones((3, 5))}  # fmt: skip
    plain, optimised = both([x @ w1, x @ w2], feed)
    for p, o in zip(plain, optimised):
        same(p, o)


def test_a_tensors_array_without_copy_is_read_only_for_good():
    t = cl.Tensor(np.array([1.0, 2.0, 3.0]))
    view = np.asarray(t, copy=False)
    with pytest.raises(ValueError):
        view[0] = 100.0
    with pytest.raises(ValueError):
        view.flags.writeable = True
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0, 3.0])


def test_an_untaken_branch_of_constants_is_not_computed():
    x = cl.variable("x", (), "float64")

    def invalid():  # row 7 of a 3-row table
        return cl.sum(cl.take(cl.constant(np.ones((3, 2))), cl.constant(np.array([7]))))

    out = cl.cond(x > 0, lambda: x * 2.0, invalid)
    assert cl.evaluate(out, {"x": np.array(1.0)}) == 2.0
    with pytest.raises(cl.OutOfRangeError):
        cl.evaluate(out, {"x": np.array(-1.0)})
    mixed = cl.cond(x > 0, lambda: x * 2.0, lambda: cl.constant(3.0) * 2.0 + x)
    assert cl.evaluate(mixed, {"x": np.array(-1.0)}) == 5.0


@pytest.mark.parametrize("build", [lambda x: x * (cl.constant(1.0) / cl.constant(0.0)),
                                   lambda x: x * cl.constant(10.0) ** 400])  # fmt: skip
def test_python_number_errors_name_the_node_both_ways(build):
    x = cl.variable("x", (2,), "float64")
    for optimize in (False, True):
        with pytest.raises(cl.NumericError, match="at node"):
            cl.Executor(build(x), optimize=optimize).run({"x": np.ones(2)})


def test_eager_arithmetic_errors_are_numeric_errors():
    with pytest.raises(cl.NumericError, match="mul"):
        cl.Tensor(np.array([1, 2], np.int8)) * 1000  # 1000 does not fit int8


def test_folding_leaves_a_large_broadcast_a_view():
    x = cl.variable("x", (4000, 4000), "float32")
    y = x * cl.broadcast_to(cl.constant(np.float32(2.0)), (4000, 4000))
    (folded,) = fold_constants([y])
    assert not folded.inputs[1].is_constant  # 64 MB as a constant; a view at run time
    small = cl.variable("s", (4, 4), "float32") * cl.broadcast_to(cl.constant(np.float32(2.0)),
                                                                  (4, 4))  # fmt: skip
    assert fold_constants([small])[0].inputs[1].is_constant


@pytest.mark.parametrize("optimize", [False, True])
def test_outputs_are_the_callers_to_change(optimize):
    x = cl.variable("x", (4, 3), "float64")
    c = cl.constant(np.arange(3.0))
    run = cl.Executor([cl.grad(cl.sum(x), [x])[0], c * 2.0], optimize=optimize)
    g, doubled = run.run({"x": np.ones((4, 3))})
    g *= 0.1  # a broadcast gradient and a folded constant: writable copies
    doubled[0] = 100.0
    g, doubled = run.run({"x": np.ones((4, 3))})
    np.testing.assert_array_equal(g, 1.0)
    np.testing.assert_array_equal(doubled, [0.0, 2.0, 4.0])


def test_evaluate_may_be_fed_variables_it_does_not_use():
    x = cl.variable("x", (3,), "float64")
    tangent = cl.jvp(x * 2.0, {x: np.ones(3)})  # does not use x
    with pytest.raises(cl.FeedError, match="do not use"):
        cl.evaluate(tangent, {"x": np.ones(3)})
    np.testing.assert_array_equal(cl.evaluate(tangent, {"x": np.ones(3)}, allow_unused=True), 2.0)


def test_a_gradient_has_its_variables_float_dtype():
    """NumPy promotes float32 · a float64 scalar to float64 inside the op; the gradient goes
    back to the variable's dtype (PyTorch's and JAX's rule), symbolic and eager alike, so a
    float32 parameter updated with its gradient stays float32."""
    from course_lib.runtime import Tensor

    x = cl.variable("x", (3,), np.float32)
    g = cl.grad(cl.sum(x * np.float64(2)), x)
    assert g.dtype == np.float32
    for optimize in (False, True):
        (value,) = cl.Executor([g], optimize=optimize).run({"x": np.ones(3, np.float32)})
        assert value.dtype == np.float32 and np.array_equal(value, [2, 2, 2])
    t = Tensor(np.ones(3, np.float32), requires_grad=True)
    cl.sum(t * np.float64(2)).backward()
    assert t.grad.dtype == np.float32
    w = cl.variable("w", (3,), np.float64)  # a float64 variable stays float64
    assert cl.grad(cl.sum(w * np.float32(2)), w).dtype == np.float64


def test_a_number_seed_is_taken_in_the_outputs_dtype():
    """grad(..., seed=2.0) of a float32 output: the seed is v̄_out in out's dtype, as the
    default ones_like(out) is (it made the float32 variable's gradient float64)."""
    x = cl.variable("x", (3,), np.float32)
    for optimize in (False, True):
        (g,) = cl.Executor([cl.grad(cl.sum(x), x, seed=2.0)], optimize=optimize).run(
            {"x": np.ones(3, np.float32)}
        )
        assert g.dtype == np.float32 and np.array_equal(g, [2, 2, 2])


@pytest.mark.parametrize(
    "loss",
    [lambda w, c: cl.sum(cl.tanh(w * c)), lambda w, c: cl.sum(cl.maximum(w, c)),
     lambda w, c: cl.sum(w * c) * 0.5],
    ids=["tanh", "maximum", "times a number"],
)  # fmt: skip
def test_a_gradient_through_the_rules_numbers_keeps_its_variables_dtype(loss):
    """The rules' own Python numbers (tanh's 1 - y², where's 0.0) leave the adjoint's static
    dtype unknown: the gradient is cast to the float32 variable's dtype then too."""
    w = cl.variable("w", (3,), np.float32)
    g = cl.grad(loss(w, cl.constant(np.array([0.5, 1.0, 2.0]))), w)
    for optimize in (False, True):
        (value,) = cl.Executor([g], optimize=optimize).run({w: np.array([1, 2, 3], np.float32)})
        assert value.dtype == np.float32


def test_a_number_tangent_is_taken_in_its_variables_dtype():
    x = cl.variable("x", (3,), np.float32)
    (t,) = cl.Executor([cl.jvp(cl.reshape(x, (3, 1)), {x: 1})]).run({})
    assert t.dtype == np.float32  # was int64
    (t,) = cl.Executor([cl.jvp(x * x, {x: 1.0})]).run({x: np.ones(3, np.float32)})
    assert t.dtype == np.float32  # was float64
