"""Review 11: the gradient checker attacked with wrong gradients that passed and right ones
that failed (column-major points, functions that change their argument, large values, float32
inside a float64 graph, a backward rule that ignores its adjoint)."""

import re

import numpy as np
import pytest

import course_lib as cl
from course_lib.gradcheck import check_gradients, check_tangents, numerical_gradient
from course_lib.graph import apply
from course_lib.ops.elementwise import Sin, cos


def test_a_column_major_point_is_perturbed_not_a_copy_of_it():
    """``np.array(x)`` kept a transposed point column-major, so ``reshape(-1)`` was a copy:
    every step was lost and the numeric gradient was 0, which a zero gradient matched."""
    point = np.arange(9.0).reshape(3, 3).T
    np.testing.assert_allclose(numerical_gradient(lambda v: float(np.sum(v**2)), point), 2 * point)
    x = cl.variable("x", shape=(3, 3), dtype=np.float64)
    analytic, numeric = check_gradients(cl.sum(x * x), {x: point})["x"]
    np.testing.assert_allclose(numeric, analytic, rtol=1e-8)
    assert np.abs(numeric).max() > 1


def test_a_function_that_changes_its_argument_does_not_move_the_point():
    def doubled_sum(v):
        v *= 2  # in place: the old loop went on from the doubled point
        return float(v.sum())

    np.testing.assert_allclose(numerical_gradient(doubled_sum, np.ones(3)), 2.0)


def test_large_values_are_stepped_relative_to_their_size():
    """A step of 1e-6 is lost in 1e10's rounding and in f's (1e20): the right gradient 2x
    came out as 3.3e10 or 0."""
    point = np.array([1e10, -3e9, 7e9])
    np.testing.assert_allclose(numerical_gradient(lambda v: float(np.sum(v**2)), point),
                               2 * point, rtol=1e-6)  # fmt: skip
    y = cl.variable("y", shape=(3,), dtype=np.float64)
    analytic, numeric = check_gradients(cl.sum(y * y), {y: point})["y"]
    np.testing.assert_allclose(numeric, analytic, rtol=1e-6)
    analytic, numeric = check_tangents(y * y, {y: point})
    np.testing.assert_allclose(numeric, analytic, rtol=1e-6)


@pytest.mark.parametrize("check", [check_gradients, check_tangents])
def test_a_float32_node_between_float64_variables_is_refused_by_name(check):
    """Differences taken through a cast to float32 are rounded away: a right gradient was 20 %
    off the numeric one."""
    x = cl.variable("x", shape=(3,), dtype=np.float64)
    narrow = cl.cast(x, np.float32)
    message = f"{check.__name__}: node {narrow.name} computes in float32 from the fed variables"
    with pytest.raises(cl.GraphError, match=re.escape(message)):
        check(cl.cast(narrow * narrow, np.float64), {x: np.array([0.3, 1.7, -2.2])})
    scale = cl.constant(np.float32(2.0)) * 3.0  # float32, but no variable reaches it
    result = check(cl.sum(x * scale), {x: np.array([0.3, 1.7, -2.2])})
    analytic, numeric = result["x"] if check is check_gradients else result
    np.testing.assert_allclose(numeric, analytic, rtol=1e-8)


class _SinForgettingItsAdjoint(Sin):
    name = "sin_forgetting_its_adjoint"

    def gradient(self, node, adjoint, needs):
        return [cos(node.inputs[0])]  # not adjoint * cos(x)


def test_a_rule_that_ignores_its_adjoint_fails_under_a_sum():
    """A scalar out was differentiated with the seed 1, so under ``sum`` (whose adjoint is then
    all ones) a rule that drops its adjoint gave the right numbers."""
    x = cl.variable("x", shape=(3,), dtype=np.float64)
    feed = {x: np.array([0.3, 1.0, -2.0])}
    analytic, numeric = check_gradients(cl.sum(apply(_SinForgettingItsAdjoint(), x)), feed)["x"]
    assert not np.allclose(analytic, numeric)
    analytic, numeric = check_gradients(cl.sum(cl.sin(x)), feed)["x"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-8)
