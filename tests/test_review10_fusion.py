"""Review 10 of the fusion pass's generated code: each test failed before its fix.

Oracle: the unfused graph run op by op (NumPy), bit for bit where the docs promise it."""


import numpy as np
import pytest

import course_lib as cl
from conftest import needs_gxx, skip_without_nvrtc
from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.kernels import nvrtc
from course_lib.passes import fuse_elementwise

needs_emulator = needs_gxx("the CUDA emulator")
needs_nvrtc = skip_without_nvrtc()
VALUES = np.array([1.5, -2.0, 0.0, -0.0, np.nan, np.inf, -np.inf, 3.0, 1e-40, 0.75], np.float32)


def _fused(out):
    (node,) = fuse_elementwise([out])
    assert node.op.name == "fused"
    return node


def _plain(out, feed):
    with np.errstate(all="ignore"):
        return cl.evaluate(out, feed)


@needs_emulator
@pytest.mark.parametrize("mode", ["cpu", "emulator"])
@pytest.mark.parametrize("constant", [1 + 3 * 2**-24, 2.0**128 - 2.0**103])
def test_a_constant_is_written_as_the_float32_numpy_rounds_it_to(constant, mode):
    """The C literal was the double's digits, which the compiler rounds to float directly:
    1 + 3·2⁻²⁴ (a tie) became 1 + 2⁻²³ where NumPy's float32 is 1 + 2⁻²², and 2¹²⁸ − 2¹⁰³
    FLT_MAX where NumPy's is inf."""
    v = cl.variable("v", VALUES.shape, np.float32)
    out = v * constant + 0.5
    expected = _plain(out, {v: VALUES})
    np.testing.assert_array_equal(_fused(out).op.run_kernel(np, VALUES, mode=mode), expected)


@needs_nvrtc
@needs_emulator
def test_constants_and_exponents_beyond_float32_compile_with_nvrtc():
    """``1e+300f`` and ``1e-300f`` (a constant, a power's exponent) are errors for NVRTC
    ("floating constant is out of range"): such a graph did not compile for the GPU. Now
    they are NumPy's float32 values (inf, 0), in the kernel's results too."""
    v = cl.variable("v", VALUES.shape, np.float32)
    out = v * 1e300 + v * 1e-300 + cl.relu(v) ** 1e300 + v**-1e-300
    spec = _fused(out).op.kernel
    nvrtc.compile_source(spec.source, f"{spec.name}.cu", "sm_80")
    expected = _plain(out, {v: VALUES})
    np.testing.assert_array_equal(_fused(out).op.run_kernel(np, VALUES, mode="emulator"), expected)


def _three(n=4096, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    for a in arrays:
        a[: len(VALUES)] = rng.permutation(VALUES)
    return arrays


@pytest.mark.parametrize(
    "expression",
    [lambda a, b, c: cl.maximum(a, b) * c + a * b, lambda a, b, c: cl.relu(a) * c + b * c,
     lambda a, b, c: a**2 * b + c, lambda a, b, c: a**-1 * b - c * c],
    ids=["maximum", "relu", "square", "reciprocal"],
)  # fmt: skip
def test_fused_float32_maximum_and_exact_powers_keep_numpys_bits(expression):
    """numexpr's maximum is float64 only: every op after it rounded once, at the end (a third
    of the elements an ulp off NumPy's float32); and its pow of a named exponent 2.0 or -1.0
    is not NumPy's x * x or 1 / x (an ulp off in a few elements in a thousand)."""
    a, b, c = (cl.variable(name, (4096,), np.float32) for name in "abc")
    out = expression(a, b, c)
    feed = dict(zip((a, b, c), _three()))
    with np.errstate(all="ignore"):
        plain = cl.Executor(out).run(feed)
        optimized = cl.Executor(out, optimize=True).run(feed)
    assert "fused" in [n.op.name for n in cl.topological_order(fuse_elementwise(out))]
    assert optimized.dtype == plain.dtype == np.float32
    assert optimized.tobytes() == plain.tobytes()


@needs_emulator
@pytest.mark.parametrize("mode", ["cpu", "emulator"])
def test_run_kernel_keeps_a_0d_result_0d(mode):
    """np.ascontiguousarray makes a 0-d array 1-d: the result of 0-d inputs had shape (1,)."""
    x, y = cl.variable("x", (), np.float32), cl.variable("y", (), np.float32)
    out = cl.relu(x + y) * 2.0
    a, b = np.array(1.5, np.float32), np.array(-0.25, np.float32)
    result = _fused(out).op.run_kernel(np, a, b, mode=mode)
    assert result.shape == () and result == cl.evaluate(out, {x: a, y: b})


def _sum_program(n):
    v, w = cl.variable("v", (n,), np.float32), cl.variable("w", (n,), np.float32)
    return _fused((v + w) * 2.0).op.numexpr


def test_numexpr_out_overlapping_an_input_is_refused():
    """numexpr reads its inputs block by block as it writes: an ``out`` one element past
    the input it reads gave wrong numbers silently (the compiled loop refuses it too)."""
    n = 100_000
    buffer = np.arange(n + 1, dtype=np.float32)
    with pytest.raises(ParameterError, match="overlap no input"):
        _sum_program(n).evaluate([buffer[:-1], buffer[:-1]], out=buffer[1:])
    assert np.array_equal(buffer, np.arange(n + 1, dtype=np.float32))


@pytest.mark.parametrize(
    "out, error",
    [(np.empty(5, np.float32), ShapeError), (np.empty((2, 10), np.float32), ShapeError),
     (np.empty(10, np.float64), GraphError), (np.empty(10, np.float16), GraphError),
     (np.frombuffer(bytes(40), np.float32), ParameterError)],
    ids=["short", "broadcast_into", "float64", "float16", "read_only"],
)  # fmt: skip
def test_numexpr_out_of_the_wrong_shape_dtype_or_read_only_is_refused(out, error):
    """Such an ``out`` gave None (numexpr's error taken for "cannot run it"), was written and
    then None, or was written and a new array returned instead."""
    ones = np.ones(10, np.float32)
    before = out.copy()
    with pytest.raises(error, match="numexpr program: out must"):
        _sum_program(10).evaluate([ones, ones], out=out)
    assert np.array_equal(out, before, equal_nan=True)
