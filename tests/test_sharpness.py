"""``sharpness``: the Hessian's largest eigenvalue by power iteration on Hessian-vector
products, against Hessians known in closed form or by differences of gradients."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.gradcheck import numerical_gradient


def _quadratic(matrix):
    """L(w) = ½ wᵀ A w, whose Hessian is the symmetric A."""
    w = cl.variable("w", shape=(len(matrix),))
    return w, 0.5 * cl.sum(w * (cl.constant(matrix) @ w))


def test_a_quadratic_gives_its_matrixs_largest_eigenvalue(rng):
    q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    eigenvalues = np.array([7.0, 3.0, 1.0, 0.5, -2.0])
    w, loss = _quadratic(q @ np.diag(eigenvalues) @ q.T)
    value = cl.sharpness(loss, {w: rng.standard_normal(5)}, {}, iters=200)
    assert value == pytest.approx(7.0, rel=1e-6)


def test_a_dominant_negative_eigenvalue_keeps_its_sign():
    w, loss = _quadratic(np.diag([-4.0, 1.0]))
    assert cl.sharpness(loss, {w: np.ones(2)}, {}, iters=100) == pytest.approx(-4.0, rel=1e-6)


def test_a_linear_loss_has_sharpness_zero():
    w = cl.variable("w", shape=(3,))
    loss = cl.sum(w * cl.constant(np.arange(3.0)))
    assert cl.sharpness(loss, {w: np.ones(3)}, {}) == 0.0


def _mlp():
    x, y = cl.variable("x", shape=(None, 2)), cl.variable("y", shape=(None, 1))
    w1, w2 = cl.variable("w1", shape=(2, 3)), cl.variable("w2", shape=(3, 1))
    loss = cl.mean((cl.tanh(x @ w1) @ w2 - y) ** 2)
    return x, y, w1, w2, loss


def test_an_mlp_agrees_with_the_hessian_from_differences_of_gradients(rng):
    x, y, w1, w2, loss = _mlp()
    data = {x: rng.standard_normal((8, 2)), y: rng.standard_normal((8, 1))}
    params = {w1: rng.standard_normal((2, 3)), w2: rng.standard_normal((3, 1))}
    gradient = cl.Executor(cl.grad(loss, [w1, w2]))

    def partial(theta, i):  # ∂L/∂θ_i at the flat parameter vector θ
        feed = {**data, w1: theta[:6].reshape(2, 3), w2: theta[6:].reshape(3, 1)}
        return np.concatenate([g.ravel() for g in gradient.run(feed)])[i]

    theta = np.concatenate([params[w1].ravel(), params[w2].ravel()])
    hessian = np.array([numerical_gradient(lambda t, i=i: partial(t, i), theta) for i in range(9)])
    exact = np.linalg.eigvalsh((hessian + hessian.T) / 2)
    largest = exact[np.argmax(np.abs(exact))]
    assert cl.sharpness(loss, params, data, iters=300) == pytest.approx(largest, rel=1e-5)


def test_nan_data_gives_nan_not_a_number_that_looks_fine(rng):
    x, y, w1, w2, loss = _mlp()
    data = {x: np.full((4, 2), np.nan), y: np.zeros((4, 1))}
    params = {w1: rng.standard_normal((2, 3)), w2: rng.standard_normal((3, 1))}
    assert np.isnan(cl.sharpness(loss, params, data, iters=3))


def test_bad_arguments_are_refused_naming_the_problem(rng):
    x, y, w1, w2, loss = _mlp()
    data = {x: rng.standard_normal((4, 2)), y: rng.standard_normal((4, 1))}
    params = {w1: rng.standard_normal((2, 3)), w2: rng.standard_normal((3, 1))}
    with pytest.raises(cl.ParameterError, match="params is empty"):
        cl.sharpness(loss, {}, {**data, **params})
    with pytest.raises(cl.GraphError, match="keyed by variables"):
        cl.sharpness(loss, {cl.constant(1.0): 1.0}, data)
    with pytest.raises(cl.ShapeError, match="iters"):
        cl.sharpness(loss, params, data, iters=0)
    with pytest.raises(cl.ShapeError, match="must be a scalar"):
        cl.sharpness((x @ w1) @ w2, params, data)
