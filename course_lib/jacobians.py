"""Full Jacobians by forward mode (one pass per input) and reverse mode (one per output),
and the sharpness of a loss from Hessian-vector products (forward mode over reverse mode).

For f: Rⁿ → Rᵏ, forward mode seeds one input direction eⱼ per pass and gets a column;
reverse mode seeds one output adjoint eᵢ per pass and gets a row. In ML, k = 1 (a loss)
and n is huge, which is why training uses reverse mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .autodiff import grad, jvp
from .backend import to_numpy
from .errors import FeedError, GraphError, ParameterError, ShapeError
from .graph import Node, constant, topological_order, variable
from .params import positive_size
from .runtime import Executor


@dataclass
class JacobianResult:
    """The Jacobian (outputs × inputs, flattened), the passes used and the nodes built (the
    derivative graphs' nodes that are not in ``out``'s graph, summed over the passes)."""

    matrix: np.ndarray
    passes: int
    nodes_built: int


def jacobian(out: Node, x: Node, feed: Mapping, mode: str = "reverse") -> JacobianResult:
    """The Jacobian of ``out`` with respect to the variable ``x`` at ``feed``.

    ``mode="forward"`` runs one tangent pass per element of x; ``mode="reverse"`` one
    backward pass per element of out. Both give the same matrix where the values are finite;
    where one is NaN or ±inf, the seeds' zeros make 0 · inf = NaN, along a row in forward
    mode and along a column in reverse mode. x must be a float variable (as for ``grad``).
    """
    if mode not in ("forward", "reverse"):
        raise ParameterError(f"jacobian: mode must be 'forward' or 'reverse', not {mode!r}")
    if not isinstance(out, Node):
        raise GraphError(f"jacobian: out must be one node, got {type(out).__name__}")
    if not (isinstance(x, Node) and x.is_variable):
        raise GraphError(f"jacobian: x must be a variable (a node the feed gives), got {x!r}")
    if x.dtype is not None and x.dtype.kind != "f":  # reverse mode's grad refuses it too
        raise GraphError(
            f"jacobian: x = {x.name} is {x.dtype}; only floating-point values have derivatives "
            "(as in grad): declare it with a float dtype"
        )
    if not isinstance(feed, Mapping):
        raise FeedError(f"jacobian: feed must be a mapping {{variable: array}}, got "
                        f"{type(feed).__name__}")  # fmt: skip
    if x not in feed and x.name not in feed:
        raise FeedError(f"jacobian: the feed has no value for x = {x.name}; feed it an array")
    value = to_numpy(Executor(out).run(feed, allow_unused=True))
    x_value = to_numpy(feed[x] if x in feed else feed[x.name])
    n, k = x_value.size, value.size
    forward_nodes = set(topological_order([out]))
    matrix, built = np.zeros((k, n), dtype=np.result_type(value, x_value, np.float32)), 0
    if mode == "forward":  # column j: the tangent of out along the j-th input direction
        for j in range(n):
            direction = np.zeros(n, dtype=matrix.dtype)
            direction[j] = 1.0
            tangent = jvp(out, {x: constant(direction.reshape(x_value.shape))})
            built += len(set(topological_order([tangent])) - forward_nodes)
            matrix[:, j] = to_numpy(Executor(tangent).run(feed, allow_unused=True)).reshape(k)
    else:  # row i: the gradient of the i-th output
        for i in range(k):
            seed = np.zeros(k, dtype=matrix.dtype)
            seed[i] = 1.0
            g = grad(out, x, seed=constant(seed.reshape(value.shape)))
            built += len(set(topological_order([g])) - forward_nodes)
            matrix[i] = to_numpy(Executor(g).run(feed, allow_unused=True)).reshape(n)
    return JacobianResult(matrix, n if mode == "forward" else k, built)


def sharpness(
    loss: Node, params: Mapping[Node, np.ndarray], feed: Mapping, iters: int = 30, seed: int = 0
) -> float:
    """The sharpness of ``loss`` at ``params``: its Hessian's largest eigenvalue λ.

    Near a point, gradient descent θ ← θ − η∇L multiplies the distance along an eigenvector
    of the Hessian with eigenvalue λ by (1 − ηλ) each step, so it is stable only while
    η < 2/λ. Power iteration finds λ without forming the Hessian: it multiplies a direction
    u by H again and again, through the Hessian-vector product, the forward-mode derivative
    of the gradient along u: ``H u = jvp(grad(loss, θ), {θ: u})`` (one graph, built once).

    Parameters
    ----------
    loss : Node
        A scalar.
    params : mapping
        ``{variable: value}``: the parameters θ (the Hessian is taken in all of them).
    feed : mapping
        The values of the other variables (the data).
    iters, seed :
        Rounds of power iteration, and the seed of the random starting direction.

    Returns
    -------
    float
        The estimate ``uᵀHu`` after ``iters`` rounds. It converges to the eigenvalue λ₁ of
        largest magnitude, with its sign (near a minimum the largest), its error shrinking
        by about (λ₂/λ₁)² a round (λ₂ the next magnitude); where λ and −λ are both largest
        (at a saddle) it does not converge and can be anything between them. 0.0 when the
        Hessian is zero.
    """
    if not isinstance(params, Mapping):
        raise GraphError(f"sharpness: params must be a mapping {{variable: value}}, got "
                         f"{type(params).__name__}")  # fmt: skip
    thetas = list(params)
    if not thetas:
        raise ParameterError("sharpness: params is empty; give {variable: value} to differentiate")
    for theta in thetas:
        if not (isinstance(theta, Node) and theta.is_variable):
            raise GraphError(f"sharpness: params must be keyed by variables, got {theta!r}")
    iters = positive_size(iters, "sharpness: iters")
    shapes = [tuple(to_numpy(params[t]).shape) for t in thetas]
    for theta, shape in zip(thetas, shapes):
        declared = theta.shape
        if declared is not None and (
            len(declared) != len(shape) or any(d not in (None, n) for d, n in zip(declared, shape))
        ):
            raise ShapeError(
                f"sharpness: params gives {theta.name} a value of shape {shape}, but "
                f"{theta.name} has shape {declared} (None = any size)"
            )
    directions = [variable(f"{t.name}_direction", shape=s) for t, s in zip(thetas, shapes)]
    hvp = Executor([loss, *jvp(grad(loss, thetas), dict(zip(thetas, directions)))])
    feed = {**feed, **params}
    rng = np.random.default_rng(seed)
    u = [rng.standard_normal(s) for s in shapes]
    eigenvalue = 0.0
    for _ in range(iters):
        norm = np.sqrt(sum(np.vdot(a, a) for a in u))
        if norm == 0:
            return 0.0
        u = [a / norm for a in u]
        value, *hu = hvp.run({**feed, **dict(zip(directions, u))}, allow_unused=True)
        if np.ndim(value) != 0:
            raise ShapeError(
                f"sharpness: the loss {loss.name} must be a scalar, not of shape "
                f"{np.shape(value)}; reduce it (e.g. with mean) first"
            )
        eigenvalue = float(sum(np.vdot(a, to_numpy(b)) for a, b in zip(u, hu)))
        u = [to_numpy(h).astype(np.float64) for h in hu]
    return eigenvalue
