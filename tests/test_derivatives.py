"""Every op: reverse- and forward-mode derivatives against central differences (float64)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from op_specs import SPECS, sample
from strategies import input_shapes

import course_lib as cl
from course_lib.gradcheck import check_gradients, check_tangents


def _graph(spec, shapes):
    xs = [cl.variable(f"x{i}", shape=s, dtype=np.float64) for i, s in enumerate(shapes)]
    return xs, spec.build(*xs)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@given(data=st.data())
def test_reverse_mode_matches_central_differences(spec, data):
    shapes = data.draw(input_shapes(spec))
    xs, out = _graph(spec, shapes)
    feed = dict(zip(xs, sample(spec, np.random.default_rng(len(shapes)), shapes)))
    for name, (analytic, numeric) in check_gradients(out, feed).items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@given(data=st.data())
def test_forward_mode_matches_central_differences(spec, data):
    shapes = data.draw(input_shapes(spec))
    xs, out = _graph(spec, shapes)
    feed = dict(zip(xs, sample(spec, np.random.default_rng(1), shapes)))
    analytic, numeric = check_tangents(out, feed)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6)


def test_cross_entropy_gradient_and_tangent():
    rng = np.random.default_rng(3)
    logits = cl.variable("logits", (4, 5), np.float64)
    targets = cl.constant(np.array([0, 4, 2, 2]))
    loss = cl.cross_entropy(logits, targets)
    feed = {logits: rng.standard_normal((4, 5))}
    analytic, numeric = check_gradients(loss, feed)["logits"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    analytic, numeric = check_tangents(loss, feed)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_take_gradient_accumulates_repeated_rows():
    rng = np.random.default_rng(4)
    table = cl.variable("table", (5, 3), np.float64)
    rows = cl.take(table, np.array([[0, 2], [2, 2]]))
    feed = {table: rng.standard_normal((5, 3))}
    analytic, numeric = check_gradients(cl.tanh(rows), feed)["table"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    analytic, numeric = check_tangents(rows, feed)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_unknown_static_shapes_still_unbroadcast():
    """Variables declared without shapes use the run-time 'like' ops for un-broadcasting."""
    x, b = cl.variable("x"), cl.variable("b")
    out = cl.sum(cl.exp(x * b) + b, axis=0)
    rng = np.random.default_rng(5)
    feed = {x: rng.standard_normal((3, 4)), b: rng.standard_normal((1, 4))}
    for name, (analytic, numeric) in check_gradients(out, feed).items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8, err_msg=name)
    analytic, numeric = check_tangents(out, feed)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
