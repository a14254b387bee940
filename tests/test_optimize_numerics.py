"""Fused code computes what NumPy computes, NaN and infinities included, on every back end:
numexpr, the compiled C++ loop, and the generated CUDA kernel (run in the CPU emulator)."""

import os

import numpy as np
import pytest
from op_specs import UNARY_OPS

import course_lib as cl
from conftest import needs_gxx
from course_lib.kernels import nvrtc
from course_lib.passes import fuse_elementwise
from course_lib.passes.fusion.cpu_loop import LOOP_MIN_SIZE

needs_emulator = needs_gxx("the CUDA emulator")
SPECIAL = np.array([1.0, np.nan, -2.0, np.inf, -np.inf, 0.0, -0.0, 3.5], np.float32)
EXPRESSIONS = {
    "relu": lambda v: cl.relu(v) * 2.0 + 1.0,
    "maximum": lambda v: cl.maximum(v, v * 0.0) + 1.0,
    "maximum_nan_second": lambda v: cl.maximum(v * 0.0, v) - 1.0,
    "inf_constant": lambda v: float("inf") * v + 1.0,
    "minus_inf_constant": lambda v: cl.maximum(v, float("-inf")) * 2.0,
    "nan_constant": lambda v: v * float("nan") + 1.0,
    "pow_half": lambda v: v**0.5 * 2.0,
    "pow_inf": lambda v: v ** float("inf") + 1.0,
    "pow_nan": lambda v: v ** float("nan") * 2.0,
    "pow_zero": lambda v: v**0 + v,
}


def _inputs(n):
    return np.resize(SPECIAL, n)


def _fused(out):
    (node,) = fuse_elementwise([out])
    return node


@pytest.mark.parametrize("n", [8, LOOP_MIN_SIZE], ids=["numexpr", "cpu_loop"])
@pytest.mark.parametrize("name", EXPRESSIONS)
def test_optimized_run_keeps_nan_and_infinities(name, n):
    v = cl.variable("v", (n,), np.float32)
    out = EXPRESSIONS[name](v)
    feed = {v: _inputs(n)}
    with np.errstate(all="ignore"):
        expected = cl.Executor(out).run(feed)
        actual = cl.Executor(out, optimize=True).run(feed)
    np.testing.assert_array_equal(actual, expected)  # NaN equals NaN here, -0.0 equals 0.0


@pytest.mark.parametrize("n", [8, LOOP_MIN_SIZE], ids=["numexpr", "cpu_loop"])
@pytest.mark.parametrize("name", UNARY_OPS)
def test_every_unary_op_keeps_nan_and_infinities_when_fused(name, n):
    """Every one-input op of the library, fused: NaN and ±inf exactly where NumPy has them,
    finite values to rounding (fused code calls the C library's expf, logf, ...: an ulp or so
    from NumPy's), as the fused tests compare them."""
    v = cl.variable("v", (n,), np.float32)
    out = UNARY_OPS[name](v) * 2.0 + 1.0
    assert _fused(out).op.name == "fused", "every unary op should fuse"
    feed = {v: _inputs(n)}
    with np.errstate(all="ignore"):
        expected = cl.Executor(out).run(feed)
        actual = cl.Executor(out, optimize=True).run(feed)
    for where in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(where(actual), where(expected), err_msg=where.__name__)
    finite = np.isfinite(expected)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=2e-5, atol=1e-6)


@needs_emulator
@pytest.mark.parametrize("mode", ["emulator", "cpu"])
@pytest.mark.parametrize("name", ["relu", "maximum", "maximum_nan_second", "inf_constant",
                                  "minus_inf_constant", "nan_constant", "pow_half"])  # fmt: skip
def test_generated_kernel_keeps_nan_and_infinities(name, mode):
    v = cl.variable("v", (len(SPECIAL),), np.float32)
    fused = _fused(EXPRESSIONS[name](v))
    assert fused.op.name == "fused", "the expression should fuse"
    with np.errstate(all="ignore"):
        expected = cl.evaluate(EXPRESSIONS[name](v), {v: SPECIAL})
    actual = fused.op.run_kernel(np, SPECIAL, mode=mode)
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.skipif(not nvrtc.nvrtc_available() and not os.environ.get("CI"),
                    reason="NVRTC missing: the test extra installs it")  # fmt: skip
@pytest.mark.parametrize("name", ["relu", "inf_constant", "nan_constant", "pow_half"])
def test_generated_cuda_with_non_finite_constants_compiles(name):
    v = cl.variable("v", (4,), np.float32)
    nvrtc.compile_source(_fused(EXPRESSIONS[name](v)).op.kernel.source, arch="sm_80")


def test_power_with_a_non_finite_exponent_is_left_unfused():
    v = cl.variable("v", (4,), np.float32)
    optimized = _fused(cl.exp(v ** float("inf")) + 1.0)
    assert "pow" in [n.op.name for n in cl.topological_order([optimized])]


@pytest.mark.parametrize("exponent", ["abc", 1j, None, [2.0]])
def test_power_rejects_an_exponent_that_is_not_a_real_number(exponent):
    with pytest.raises(cl.GraphError, match=r"pow: the exponent must be a real number"):
        cl.variable("x") ** exponent

