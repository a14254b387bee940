"""Review 9 of the graph optimisation passes: each test failed before its fix.

Oracle: the same graph run unoptimised (op by op, NumPy's semantics)."""

import os

import numpy as np
import pytest

import course_lib as cl
from course_lib.kernels import emulator
from course_lib.passes import fuse_elementwise, merge_matmuls, optimize
from course_lib.passes.fusion.cpu_loop import LOOP_MIN_SIZE

needs_emulator = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the compiled loop and the CUDA emulator need g++ on PATH",
)


def _runs(outputs, feed):
    with np.errstate(all="ignore"):
        plain = cl.Executor(outputs).run(feed, allow_unused=True)
        optimized = cl.Executor(outputs, optimize=True).run(feed, allow_unused=True)
    return plain, optimized


def _assert_same(plain, optimized):
    for want, got in zip(plain, optimized):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_merge_matmuls_keeps_apart_a_weight_of_unknown_dtype():
    """NumPy calls ``float64 == None`` true: a float64 weight and one of unknown dtype were
    concatenated, and the float32 product came back float64."""
    h = cl.variable("h", (2, 3, 2))
    v64, v = cl.variable("V64", (1, 3), np.float64), cl.variable("V", (2, 3))
    outputs = [v64 @ h, v @ h]
    assert "concat" not in [n.op.name for n in cl.topological_order(merge_matmuls(outputs))]
    feed = {h: np.ones((2, 3, 2), np.float32), v64: np.ones((1, 3)),
            v: np.ones((2, 3), np.float32)}  # fmt: skip
    plain, optimized = _runs(outputs, feed)
    assert [a.dtype for a in optimized] == [np.float64, np.float32]
    _assert_same(plain, optimized)


def test_merge_matmuls_leaves_a_right_operand_of_unknown_rank():
    """``W1 @ h, W2 @ h`` with h of unknown shape: a matrix h gives the plain run's products
    (the optimised run raised ShapeError); a vector h, whose product's gradient has no
    rows to transpose, is refused by both runs alike (review 11: give h a shape)."""
    h = cl.variable("h")
    w1, w2 = cl.variable("W1", (2, 3), np.float64), cl.variable("W2", (4, 3), np.float64)
    outputs = [w1 @ h, w2 @ h]
    rng = np.random.default_rng(0)
    weights = {w1: rng.standard_normal((2, 3)), w2: rng.standard_normal((4, 3))}
    _assert_same(*_runs(outputs, {h: rng.standard_normal((3, 2)), **weights}))
    for optimized in (False, True):
        with pytest.raises(cl.ShapeError, match="matmul inputs need 2\\+ dimensions"):
            cl.Executor(outputs, optimize=optimized).run({h: rng.standard_normal(3), **weights})


@pytest.mark.parametrize("n", [6, LOOP_MIN_SIZE], ids=["numexpr", "cpu_loop"])
@pytest.mark.parametrize(
    "sum_of_masks",
    [lambda a, b: (a > 0) + (b > 0), lambda a, b: cl.sum_n(a > 0, b > 0, a < 9),
     lambda a, b: (a > 0) + True],
    ids=["add", "sum_n", "add_true"],
)  # fmt: skip
def test_fused_sum_of_masks_is_a_logical_or(sum_of_masks, n):
    """NumPy adds booleans as a logical or (``True + True`` is True); the fused code took
    them as numbers (2), doubling ``x * (mask_a + mask_b)``."""
    x, a, b = (cl.variable(name, (n,), np.float32) for name in "xab")
    out = x * sum_of_masks(a, b)
    ones = np.ones(n, np.float32)
    plain, optimized = _runs([out], {x: ones, a: ones, b: ones})
    np.testing.assert_array_equal(plain[0], ones)
    _assert_same(plain, optimized)


@pytest.mark.parametrize(
    "masked",
    [lambda x, m: cl.where(m, x, 0.0) * 2.0 + cl.where(m, 1.0, x) * 3.0,
     lambda x, m: cl.where(x > 0.5, cl.cast(x * 4.0, np.int32), x) * 2.0 + 1.0],
    ids=["bool_input", "int_input"],
)  # fmt: skip
def test_gradient_of_an_optimized_graph_with_a_mask_or_integer_input(masked):
    """A fused node with a boolean (a mask used twice) or integer input asked grad() for
    that input's gradient, which refuses it: differentiating the optimised graph raised."""
    x = cl.variable("x", (4,), np.float64)
    out = masked(x, x > 0.0)
    (optimized,) = optimize([out])
    assert "fused" in [n.op.name for n in cl.topological_order(optimized)]
    feed = {x: np.array([1.0, -2.0, 0.25, -0.0])}
    want = cl.evaluate(cl.grad(cl.sum(out), x), feed)
    got = cl.evaluate(cl.grad(cl.sum(optimized), x), feed)
    np.testing.assert_array_equal(got, want)


@needs_emulator
@pytest.mark.parametrize("mode", ["cpu", "emulator"])
def test_generated_code_negates_a_negative_constant(mode):
    """``-(-2.0)`` was written ``(--2.0f)``, a decrement of a literal that no compiler takes."""
    v = cl.variable("v", (8,), np.float32)
    out = v * -cl.constant(-2.0) + cl.sigmoid(cl.constant(-0.0) * v)
    (fused,) = fuse_elementwise([out])
    assert fused.op.name == "fused"
    values = np.linspace(-3, 3, 8, dtype=np.float32)
    expected = cl.evaluate(out, {v: values})
    np.testing.assert_allclose(fused.op.run_kernel(np, values, mode=mode), expected, rtol=1e-6)
