"""Review 8: forward mode (jvp, Dual), jacobian and sharpness, and the gradient checks, at
their edges: bad seeds, bad feeds, edge points of pow, the finite-difference study."""

import numpy as np
import pytest

import course_lib as cl
from course_lib import gradcheck
from course_lib.gradcheck import check_gradients, check_tangents, numerical_gradient


def _run(node, feed):
    return cl.Executor(node).run(feed, allow_unused=True)


# ------------------------------------------------------------------ Dual
@pytest.mark.parametrize(
    "make",
    [lambda: cl.Dual(1.0) + "2", lambda: cl.Dual("3", 1.0), lambda: cl.Dual(1.0, 1j),
     lambda: cl.Dual(1.0) * np.array([2.0, 3.0]), lambda: cl.Dual(None)],
    ids=["plus text", "text value", "complex tangent", "times an array", "None"],
)  # fmt: skip
def test_a_dual_refuses_what_is_not_one_real_number(make):
    """Dual(1.0) + "2" was Dual(3.0, 0.0): float("2") accepted the text."""
    with pytest.raises(cl.GraphError, match="Dual: (val|dot) must be a real number"):
        make()


def test_a_dual_keeps_numpy_numbers_and_0d_arrays():
    assert cl.Dual(np.float32(2.0), np.array(1.0)) * np.float64(3.0) == cl.Dual(6.0, 3.0)
    assert cl.Dual(True, 0) == cl.Dual(1.0, 0.0)


def test_a_dual_exponent_is_a_clear_error():
    """It was "unsupported operand type(s) for ** or pow(): 'float' and 'Dual'"."""
    with pytest.raises(cl.GraphError, match=r"Dual \*\* p: the exponent must be a number"):
        cl.Dual(2.0, 1.0) ** cl.Dual(3.0, 0.0)


@pytest.mark.parametrize("p", [0.5, 1 / 3, -1, 2, 3, 0, 1, -0.5, 1.5])
def test_dual_pow_at_edge_points_is_the_graphs_pow_and_jvp(p):
    """√0 raised ZeroDivisionError ("0.0 cannot be raised to a negative power"), (-8) ** (1/3)
    a TypeError about complex numbers, 1e200 ** 2 an OverflowError; the graph's pow gives
    the slope +inf, NaN and inf (docs/architecture.md, "Derivatives at edge points")."""
    points = np.array([0.0, -0.0, -8.0, np.inf, -np.inf, np.nan, 1e200, 2.0])
    x = cl.variable("x", points.shape, np.float64)
    with np.errstate(all="ignore"):
        value, tangent = _run([x**p, cl.jvp(x**p, {x: np.ones(points.size)})], {x: points})
    duals = [cl.Dual(v, 1.0) ** p for v in points]
    np.testing.assert_array_equal([d.val for d in duals], value)
    np.testing.assert_array_equal([d.dot for d in duals], tangent)


# ------------------------------------------------------------------ jvp
def test_jvp_names_tangents_that_are_not_a_mapping():
    x = cl.variable("x", (3,), np.float64)
    with pytest.raises(cl.GraphError, match=r"jvp: tangents must be a mapping.*got list"):
        cl.jvp(x * 2.0, [np.ones(3)])


@pytest.mark.parametrize("shape", [(2,), (4,)])
def test_jvp_names_the_variable_of_a_tangent_of_the_wrong_shape(shape):
    """It was broadcast_to's error about a const[2], naming neither jvp nor x."""
    x = cl.variable("x", (3,), np.float64)
    with pytest.raises(cl.ShapeError, match=rf"jvp: the tangent of x has shape \({shape[0]},\)"):
        cl.jvp(x * 2.0, {x: np.ones(shape)})
    with pytest.raises(cl.ShapeError, match=r"jvp: the tangent of x has shape \(4,\)"):
        cl.jvp(x * 2.0, {x: cl.variable("t", (4,))})


def test_an_array_tangent_is_taken_in_its_float_variables_dtype():
    """A boolean mask as the tangent was a boolean tangent (and -mask failed in NumPy); a
    float64 array seed gave a float32 variable float64 tangents (a number seed did not)."""
    x = cl.variable("x", (3,), np.float64)
    mask = np.array([True, False, True])
    (t,) = _run([cl.jvp(x, {x: mask})], {x: np.ones(3)})
    assert t.dtype == np.float64
    np.testing.assert_array_equal(_run(cl.jvp(-x, {x: mask}), {x: np.ones(3)}), [-1, 0, -1])
    np.testing.assert_array_equal(_run(cl.jvp(cl.sum(x), {x: np.arange(3)}), {x: np.ones(3)}), 3)
    x32 = cl.variable("x32", (3,), np.float32)
    (t,) = _run([cl.jvp(x32 * 2.0, {x32: np.ones(3)})], {x32: np.ones(3, np.float32)})
    assert t.dtype == np.float32


def test_a_tangent_that_is_not_numbers_names_jvp_and_its_variable():
    x = cl.variable("x", (3,), np.float64)
    with pytest.raises(cl.GraphError, match="jvp: the tangent of x: .*complex128"):
        cl.jvp(x * 2.0, {x: np.ones(3) * 1j})


# ------------------------------------------------------------------ jacobian
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_both_modes_refuse_an_integer_x(mode):
    """Forward mode gave a matrix where reverse mode (grad) refused the variable."""
    i = cl.variable("i", (3,), np.int64)
    with pytest.raises(cl.GraphError, match="jacobian: x = i is int64"):
        cl.jacobian(i * 2, i, {i: np.arange(3)}, mode)


def test_a_jacobian_names_an_out_or_a_feed_of_the_wrong_kind():
    x = cl.variable("x", (3,), np.float64)
    with pytest.raises(cl.GraphError, match="jacobian: out must be one node, got list"):
        cl.jacobian([x * x, x], x, {x: np.ones(3)})  # was: unhashable type: 'list'
    with pytest.raises(cl.FeedError, match="jacobian: feed must be a mapping"):
        cl.jacobian(x * x, x, [np.ones(3)])  # was NumPy's "truth value ... is ambiguous"


def test_forward_and_reverse_jacobians_differ_only_where_a_value_is_not_finite():
    """What the docstring now says (it said "Both give the same matrix"): 0 · inf = NaN runs
    along a row in forward mode and along a column in reverse mode."""
    y = cl.variable("y", (3,), np.float64)
    feed = {y: np.array([np.nan, 1.0, np.inf])}
    with np.errstate(all="ignore"):
        forward, reverse = (cl.jacobian(y * y, y, feed, m).matrix for m in ("forward", "reverse"))
    assert np.isnan(forward[0]).all() and np.isnan(reverse[:, 0]).all()
    np.testing.assert_array_equal(forward[1], [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(reverse[:, 1], [0.0, 2.0, 0.0])
    assert "finite" in cl.jacobian.__doc__


# ------------------------------------------------------------------ sharpness
def test_sharpness_names_params_of_the_wrong_kind_or_shape():
    w = cl.variable("w", (3,), np.float64)
    loss = cl.sum(w * w)
    with pytest.raises(cl.GraphError, match="sharpness: params must be a mapping"):
        cl.sharpness(loss, [w], {})  # was: list indices must be integers or slices
    with pytest.raises(cl.ShapeError, match=r"sharpness: params gives w a value of shape \(4,\)"):
        cl.sharpness(loss, {w: np.ones(4)}, {})  # was broadcast_to's error about w_direction
    assert cl.sharpness(loss, {w: np.ones(3)}, {}) == pytest.approx(2.0)


# ------------------------------------------------------------------ gradcheck
@pytest.mark.parametrize("check", [check_gradients, check_tangents])
def test_gradient_checks_refuse_a_fed_node_that_is_not_a_variable(check):
    """A fed intermediate was ignored by the runs (allow_unused), so check_gradients compared
    its adjoint with 0 and check_tangents seeded it: a mismatch that was the check's own."""
    x = cl.variable("x", (3,), np.float64)
    h = cl.tanh(x)
    feed = {x: np.array([0.1, 0.2, 0.3])}
    with pytest.raises(cl.GraphError, match=rf"{check.__name__}: the feed must be keyed by "
                       r"variables .*got 'tanh\(x\)'"):  # fmt: skip
        check(h * 2.0, {**feed, h: np.zeros(3)})
    with pytest.raises(cl.GraphError, match=rf"{check.__name__}: .*got 'x'"):
        check(h * 2.0, {"x": feed[x]})  # was grad's or jvp's error about a str
    with pytest.raises(cl.GraphError, match=rf"{check.__name__}: out must be one node"):
        check([h, x], feed)


def test_check_gradients_refuses_two_variables_of_one_name():
    """The results are keyed by name: one of the two was silently left out."""
    a, b = cl.variable("x", (2,), np.float64), cl.variable("x", (2,), np.float64)
    with pytest.raises(cl.GraphError, match="two fed variables are named x"):
        check_gradients(cl.sum(a * b * 3.0), {a: np.ones(2), b: np.full(2, 2.0)})


def test_check_tangents_names_a_feed_of_the_wrong_shape_as_a_feed():
    x = cl.variable("x", (3,), np.float64)
    with pytest.raises(cl.ShapeError, match=r"variable x expects shape \(3,\).*fed shape \(4,\)"):
        check_tangents(x * x, {x: np.ones(4)})


def test_numerical_gradient_refuses_complex_points_and_non_scalar_functions():
    """A complex x lost its imaginary part silently; a vector f was NumPy's TypeError."""
    with pytest.raises(cl.GraphError, match="numerical_gradient: x holds numbers"):
        numerical_gradient(lambda v: float((v * v).sum().real), np.ones(2) * (1 + 1j))
    with pytest.raises(cl.ShapeError, match=r"f must return one number.*\(2,\)"):
        numerical_gradient(lambda v: v * v, np.ones(2))
    with pytest.raises(cl.GraphError, match="numerical_gradient: f must return a real number"):
        numerical_gradient(lambda v: None, np.ones(2))
    np.testing.assert_allclose(numerical_gradient(lambda v: np.sum(v**2)[None], np.ones(2)), 2)


@pytest.mark.parametrize(
    ("eps", "errors"),
    [([1e-3], [1e-6]), ([1e-3, 1e-3], [1e-6, 1e-4]), ([1e-3, 1e-2, 1e-1], [1e-6, 1e-4]), ([], [])],
    ids=["one point", "one eps twice", "lengths differ", "empty"],
)
def test_a_slope_needs_two_different_eps_and_one_error_each(eps, errors):
    """One point gave the slope 1.0 (a RankWarning), a repeated ε 0.83: no line at all."""
    with pytest.raises(cl.ShapeError, match="loglog_slope: needs one error per ε"):
        gradcheck.loglog_slope(eps, errors)


def test_a_slope_through_an_infinite_error_is_a_clear_error():
    """It was NaN, silently."""
    with pytest.raises(cl.ParameterError, match="loglog_slope: .*got error inf at ε = 0.001"):
        gradcheck.loglog_slope([1e-3, 1e-2], [np.inf, 1e-4])


# -- nodes_built counts the derivative graphs' new nodes ------------------------------------------
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_nodes_built_counts_new_nodes_whatever_else_the_output_computes(mode):
    """It was the derivative graph's size less the forward graph's: a branch the derivative
    does not need (a chain on another variable) was subtracted too, down to negative counts."""
    x, y = cl.variable("x", shape=(5,)), cl.variable("y", shape=(3,))
    chain = y
    for _ in range(10):
        chain = cl.tanh(chain)
    feed = {x: np.ones(5), y: np.ones(3)}
    alone = cl.jacobian(cl.sum(x * 3.0), x, feed, mode).nodes_built
    beside = cl.jacobian(cl.sum(x * 3.0) + cl.sum(chain), x, feed, mode).nodes_built
    assert alone == beside == {"forward": 15, "reverse": 3}[mode]


@pytest.mark.parametrize("eps_values", [1e-3, np.float64(1e-3), [[1e-3, 1e-4]]])
def test_difference_errors_wants_a_sequence_of_steps(eps_values):
    """One number gave Python's "'float' object is not iterable"."""
    with pytest.raises(cl.ShapeError, match="difference_errors: eps_values must be a sequence"):
        gradcheck.difference_errors(np.sin, np.cos(1.0), 1.0, eps_values)


def test_difference_errors_of_a_list_of_one_step():
    errors = gradcheck.difference_errors(np.sin, np.cos(1.0), 1.0, [1e-3])
    assert errors["central"].shape == (1,) and errors["central"][0] < 1e-6
