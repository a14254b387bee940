"""Engine review, round 5: what a run returns and what it is fed, across runs and devices.

A feed that is an ndarray subclass computes as a plain array (np.matrix would make ``*`` a
matrix product, one way with ``optimize`` and another without); a masked array is refused;
a broadcast output on a device is the caller's own array; an unaligned float32 feed runs
through the fused CPU loop's fallback; a formula too long to write in decimal is refused
with a GraphError."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import GraphError, ParameterError
from course_lib.passes.fusion.cpu_loop import LOOP_MIN_SIZE

MATRIX_WARNING = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")


@MATRIX_WARNING
@pytest.mark.parametrize("optimize", [False, True])
def test_matrix_feed_multiplies_elementwise(optimize):
    x, y = cl.variable("x"), cl.variable("y")
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    product, exp_product = cl.Executor([x * y, cl.exp(x) * y], optimize=optimize).run({x: m, y: m})
    a = np.asarray(m)
    assert not isinstance(cl.to_numpy(product), np.matrix)
    np.testing.assert_allclose(product, a * a)
    np.testing.assert_allclose(exp_product, np.exp(a) * a)


@MATRIX_WARNING
def test_matrix_argument_of_jit_multiplies_elementwise():
    square = cl.jit(lambda a: a * a)
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(square(m), np.asarray(m) ** 2)


def test_masked_array_feed_is_refused():
    x = cl.variable("x")
    masked = np.ma.array([1.0, 2.0, 3.0], mask=[False, True, False])
    with pytest.raises(ParameterError, match="variable x is a masked array.*filled"):
        cl.Executor(x * 2.0).run({x: masked})
    with pytest.raises(ParameterError, match="masked array"):
        cl.Tensor(masked)


@pytest.mark.parametrize("optimize", [False, True])
def test_broadcast_output_on_a_device_is_written_element_by_element(optimize):
    with cl.use_device("strict"):
        x = cl.variable("x", (2, 3), np.float32)
        run = cl.Executor(cl.grad(cl.sum(x), x), optimize=optimize)  # ones, broadcast from 1
        feed = {x: cl.to_device(np.zeros((2, 3), np.float32))}
        g = run.run(feed)
        g[0, 0] = 5.0
        expected = np.ones((2, 3), np.float32)
        expected[0, 0] = 5.0
        np.testing.assert_array_equal(cl.to_numpy(g), expected)
        np.testing.assert_array_equal(cl.to_numpy(run.run(feed)), np.ones((2, 3)))


def test_unaligned_float32_feed_through_the_fused_loop():
    values = np.linspace(-3, 3, LOOP_MIN_SIZE, dtype=np.float32)
    buffer = np.zeros(values.nbytes + 1, np.uint8)
    buffer[1:] = values.view(np.uint8)
    unaligned = np.frombuffer(buffer.data, np.float32, offset=1)  # np.fromfile after a header
    assert not unaligned.flags.aligned
    x = cl.variable("x")
    result = cl.Executor(cl.exp(x) * 2.0 + x, optimize=True).run({x: unaligned})
    np.testing.assert_allclose(result, np.exp(values) * 2 + values, rtol=1e-5, atol=1e-5)


def test_formula_longer_than_python_writes_in_decimal_is_a_graph_error():
    y = cl.variable("x")
    for _ in range(15_000):  # 2^15000 characters: more than 4300 decimal digits to count them
        y = y * y
    with pytest.raises(GraphError, match=r"about 2\^15\d{3} characters"):
        cl.formula(y)


def test_a_masked_array_is_refused_as_a_constant_too_and_taken_when_nothing_is_masked():
    masked = np.ma.array([1.0, 2.0], mask=[False, True])
    x = cl.variable("x")
    for make in (lambda: cl.constant(masked), lambda: x * masked):
        with pytest.raises(ParameterError, match="masked array"):
            make()
    unmasked = np.ma.masked_invalid(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(cl.to_numpy(cl.evaluate(x * unmasked, {x: 2.0})), [2.0, 4.0])
