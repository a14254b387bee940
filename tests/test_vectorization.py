"""The vectorisation experiment: one C source, two builds (SIMD on and off), NumPy's results."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.kernels import emulator
from course_lib.perf import vectorization as vec

needs_compiler = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the loops are compiled with g++",
)
LOOPS = sorted(vec.FLOPS_PER_ELEMENT)


def awkward_inputs(n, rng):
    """Random values in [-0.5, 0.5] with zeros of both signs and subnormals mixed in."""
    a, b = (rng.uniform(-0.5, 0.5, n).astype(np.float32) for _ in range(2))
    special = np.array([0.0, -0.0, 1e-40, -1e-40, 0.5, -0.5], np.float32)
    a[: min(n, 6)], b[-min(n, 6) :] = special[: min(n, 6)], special[: min(n, 6)]
    return a, b


@needs_compiler
@pytest.mark.parametrize("name", LOOPS)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 33, 1001])  # vector bodies and scalar tails
def test_both_builds_give_numpys_float32_results_bit_for_bit(name, n):
    a, b = awkward_inputs(n, np.random.default_rng(n))
    expected = vec.reference(name, a, b).view(np.uint32)
    for vectorize in (False, True):
        got = vec.run_loop(name, a, b, vectorize)
        assert got.dtype == np.float32 and got.shape == (n,)
        np.testing.assert_array_equal(got.view(np.uint32), expected)


@needs_compiler
@pytest.mark.parametrize("name", LOOPS)
def test_nan_and_inf_propagate_like_numpy(name):
    a = np.array([np.nan, np.inf, -np.inf, 0.25, 2.0, np.inf], np.float32)
    b = np.array([1.0, 1.0, 1.0, np.nan, -np.inf, -np.inf], np.float32)
    expected = vec.reference(name, a, b)  # overflows and NaNs raise no warning
    for vectorize in (False, True):
        np.testing.assert_array_equal(vec.run_loop(name, a, b, vectorize), expected)


@needs_compiler
def test_empty_and_zero_d_arrays_and_an_input_used_twice():
    empty = np.empty(0, np.float32)
    assert vec.run_loop("add", empty, empty).shape == (0,)
    scalar = np.array(1.5, np.float32)
    assert vec.run_loop("add", scalar, scalar).shape == ()
    assert vec.run_loop("add", scalar, scalar) == 3.0
    a = np.arange(5, dtype=np.float32)
    out = np.full(5, np.nan, np.float32)
    assert vec.run_loop("add", a, a, False, out) is out
    np.testing.assert_array_equal(out, 2 * a)
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = vec.reference("horner", grid, grid)  # x**64 overflows float32 from x = 4 on
    assert np.isinf(expected).sum() == 8
    np.testing.assert_array_equal(vec.run_loop("horner", grid, grid), expected)


def test_wrong_arrays_are_refused_before_any_c_code_runs():
    a = np.ones(8, np.float32)
    for bad in (np.ones(8), np.ones(16, np.float32)[::2], [1.0] * 8):
        with pytest.raises(GraphError, match="'add'.*C-contiguous float32"):
            vec.run_loop("add", a, bad)
    with pytest.raises(ShapeError, match=r"'add' runs on arrays of one shape.*\(9,\)"):
        vec.run_loop("add", a, np.ones(9, np.float32))
    with pytest.raises(ParameterError, match="out must be writeable and overlap no input"):
        vec.run_loop("add", a, np.ones(8, np.float32), out=a)  # out aliases an input
    locked = np.empty(8, np.float32)
    locked.flags.writeable = False
    with pytest.raises(ParameterError, match="writeable"):
        vec.run_loop("horner", a, a, out=locked)
    with pytest.raises(ValueError, match="no loop named 'mul'.*'add', 'horner'"):
        vec.run_loop("mul", a, a)
    with pytest.raises(ValueError, match="no loop named"):
        vec.measure_vectorization("sub", 8)


def test_horner_steps_match_the_c_source():
    assert f"#define STEPS {vec.HORNER_STEPS}" in vec.SOURCE
    assert vec.FLOPS_PER_ELEMENT["horner"] == 2 * vec.HORNER_STEPS


@needs_compiler
@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) not found")
def test_only_the_vectorised_build_holds_packed_float_arithmetic():
    def disassembly(vectorize):
        path = vec.library_path(vectorize)
        return subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True).stdout

    scalar, vector = disassembly(False), disassembly(True)
    assert vec.library_path(False) != vec.library_path(True)  # the flags are in the cache key
    assert "addps" in vector and "mulps" in vector  # 4 or 8 floats per instruction
    assert "addps" not in scalar and "mulps" not in scalar
    assert "addss" in scalar and "mulss" in scalar  # one float per instruction


@needs_compiler
def test_measurement_and_table_report_both_builds():
    timings = [vec.measure_vectorization(name, 4096, repeats=1) for name in LOOPS]
    for t in timings:
        assert t.n == 4096 and t.array_bytes == 12 * 4096
        assert np.isfinite([t.scalar_seconds, t.vector_seconds]).all()
        assert t.scalar_seconds > 0 and t.vector_seconds > 0
        assert t.speedup == pytest.approx(t.scalar_seconds / t.vector_seconds)
        flops = vec.FLOPS_PER_ELEMENT[t.loop] * 4096
        assert t.gflop_per_s(2.0) == pytest.approx(flops / 2e9)
        assert t.gb_per_s(0.5) == pytest.approx(12 * 4096 / 0.5e9)
    table = vec.vectorization_table(timings)
    assert table.column("loop") == LOOPS
    assert table.column("elements") == ["4,096", "4,096"]
    assert table.column("speed-up") == [f"{t.speedup:.1f}x" for t in timings]
