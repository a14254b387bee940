"""Finite-difference checks of reverse- and forward-mode derivatives.

Central differences ``(f(θ+ε) − f(θ−ε)) / 2ε`` have truncation error O(ε²); in
float64 with ε ≈ 1e-6 they agree with exact derivatives to about 1e-8. The checks step by
ε · max(1, |θ|): a step of ε would be lost in the rounding of a large θ, and of f there.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import params
from .autodiff import grad, jvp
from .backend import to_numpy
from .errors import GraphError, ParameterError, ShapeError
from .graph import Node, constant, topological_order
from .ops import mul, sum
from .runtime import Executor


def numerical_gradient(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of the scalar function ``f`` at the array ``x`` (on the
    host: ``f`` is called with NumPy arrays, a copy each call; ``x`` holds real numbers, ``f``
    returns one). Element i steps by ε · max(1, |xᵢ|)."""
    eps = params.real(eps, "numerical_gradient: eps", positive=True)
    x = params.numeric_array(np.asarray(to_numpy(x)), "numerical_gradient: x")
    x = np.array(x, dtype=np.float64, order="C")  # row-major: flat is a view of x
    out = np.zeros(x.shape)
    flat, grad_flat, steps = x.reshape(-1), out.reshape(-1), eps * _scale(x).reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + steps[i]
        up = _scalar(f(x.copy()))  # f may change or keep its argument
        flat[i] = old - steps[i]
        down = _scalar(f(x.copy()))
        flat[i] = old
        grad_flat[i] = (up - down) / (2 * steps[i])
    return out


def _scale(x) -> np.ndarray:
    """``max(1, |x|)`` elementwise, 1 where x is not finite: ε times it is the step."""
    magnitude = np.abs(np.asarray(x, dtype=np.float64))
    return np.where(magnitude < np.inf, np.maximum(magnitude, 1.0), 1.0)


def _scalar(value) -> float:
    """What ``f`` returned, as a float: one real number (a 0-d or one-element array too)."""
    array = np.asarray(to_numpy(value))
    if array.dtype.kind not in "biuf":
        raise GraphError(f"numerical_gradient: f must return a real number, got {value!r}")
    if array.size != 1:
        raise ShapeError(
            f"numerical_gradient: f must return one number, got an array of shape "
            f"{array.shape}; reduce it (e.g. with sum) first"
        )
    return float(array.reshape(()))


def _run(executor: Executor, feed: Mapping):
    return executor.run(feed, allow_unused=True)


def _checked(out, feed: Mapping, what: str) -> None:
    """``out`` is one node and ``feed`` is keyed by variables of different names (a fed
    intermediate node would be ignored by the runs, and its derivative compared with 0). The
    differences are taken in float64: a variable declared with another dtype would refuse
    them, and a node computed from the variables in another float dtype would round them
    away (ε = 1e-6 is below float32's resolution near 1)."""
    if not isinstance(out, Node):
        raise GraphError(f"{what}: out must be one node, got {type(out).__name__}")
    names = set()
    for var in feed:
        if not (isinstance(var, Node) and var.is_variable):
            raise GraphError(
                f"{what}: the feed must be keyed by variables (course_lib.variable), got "
                f"{getattr(var, 'name', var)!r}; give every variable's node as its key"
            )
        if var.name in names:  # check_gradients' results are keyed by name
            raise GraphError(f"{what}: two fed variables are named {var.name}; rename one")
        names.add(var.name)
        dtype = var.dtype
        if dtype is not None and np.dtype(dtype) != np.float64:
            raise GraphError(
                f"{what}: variable {var.name} is declared {np.dtype(dtype)}, but central "
                "differences need float64; declare the variables with dtype=np.float64 to check"
            )
    varying = set(feed)
    for node in topological_order([out]):
        if node in varying or not any(i in varying for i in node.inputs):
            continue
        varying.add(node)
        if node.dtype is not None and node.dtype.kind == "f" and node.dtype != np.float64:
            raise GraphError(
                f"{what}: node {node.name} computes in {node.dtype} from the fed variables, but "
                "central differences need float64; check the graph with float64 throughout"
            )


def check_gradients(out: Node, feed: Mapping[Node, np.ndarray], seed: int = 0, eps: float = 1e-6):
    """Compare ``grad`` with central differences for every fed variable.

    ``feed`` is keyed by the variables' nodes (of different names). ``out`` is reduced to
    ``sum(out * r)`` with a fixed random ``r`` of its shape, a number for a scalar ``out`` too
    (with the seed 1, a rule that ignores its adjoint passes under a ``sum``).
    Returns ``{variable name: (analytic, numeric)}``, NumPy arrays on the host.
    """
    _checked(out, feed, "check_gradients")
    rng = np.random.default_rng(seed)
    shape = np.shape(_run(Executor(out), feed))
    scalar = sum(mul(out, constant(rng.standard_normal(shape))))
    variables = list(feed)
    analytic = _run(Executor(grad(scalar, variables)), feed)
    forward = Executor(scalar)
    results = {}
    for var, a in zip(variables, analytic):

        def f(value, var=var):
            return _run(forward, {**feed, var: value})

        results[var.name] = (to_numpy(a), numerical_gradient(f, to_numpy(feed[var]), eps))
    return results


def check_tangents(out: Node, feed: Mapping[Node, np.ndarray], seed: int = 0, eps: float = 1e-6):
    """Compare ``jvp`` along a random direction with a central difference.

    Returns ``(analytic, numeric)`` arrays of the shape of ``out``. The direction is scaled by
    ``max(1, |x|)`` elementwise, so the step is relative where x is large.
    """
    _checked(out, feed, "check_tangents")
    eps = params.real(eps, "check_tangents: eps", positive=True)
    rng = np.random.default_rng(seed)
    feed = {v: to_numpy(x) for v, x in feed.items()}  # the differences are taken on the host
    direction = {v: rng.standard_normal(np.shape(x)) * _scale(x) for v, x in feed.items()}
    forward = Executor(out)  # run first: a feed of a wrong shape is named as the feed's
    up = _run(forward, {v: x + eps * direction[v] for v, x in feed.items()})
    down = _run(forward, {v: x - eps * direction[v] for v, x in feed.items()})
    analytic = _run(Executor(jvp(out, direction)), feed)
    return to_numpy(analytic), (to_numpy(up) - to_numpy(down)) / (2 * eps)


def forward_difference(f, x: float, eps: float) -> float:
    """``(f(x + ε) − f(x)) / ε``: truncation error O(ε)."""
    return (f(x + eps) - f(x)) / eps


def central_difference(f, x: float, eps: float) -> float:
    """``(f(x + ε) − f(x − ε)) / 2ε``: truncation error O(ε²)."""
    return (f(x + eps) - f(x - eps)) / (2 * eps)


def difference_errors(f, exact: float, x: float, eps_values) -> dict[str, np.ndarray]:
    """Absolute errors of both difference quotients against the ``exact`` derivative, on the
    host (``f`` may return device scalars, such as ``evaluate`` of a 0-d node); every ε above 0
    (the quotients divide by it); ``eps_values`` a sequence of them (one ε: a list of one)."""
    if np.ndim(eps_values) != 1:
        raise ShapeError(
            f"difference_errors: eps_values must be a sequence of step sizes (a list such as "
            f"[1e-1, 1e-2]), got {eps_values!r}"
        )
    eps_values = [params.real(e, "difference_errors: ε", positive=True) for e in eps_values]
    return {
        "forward": to_numpy([abs(forward_difference(f, x, e) - exact) for e in eps_values]),
        "central": to_numpy([abs(central_difference(f, x, e) - exact) for e in eps_values]),
    }


def loglog_slope(eps_values, errors) -> float:
    """The slope of ``log10(error)`` against ``log10(ε)`` (least squares): the error's order.
    Every ε and every error must be finite and above 0: log10(0) has no value; and a line
    needs two different ε at least."""
    eps, err = (np.asarray(to_numpy(v), dtype=np.float64) for v in (eps_values, errors))
    if eps.ndim != 1 or eps.shape != err.shape or np.unique(eps).size < 2:
        raise ShapeError(
            f"loglog_slope: needs one error per ε, and two different ε at least, as two lists; "
            f"got ε of shape {eps.shape} ({np.unique(eps).size} different) and errors of shape "
            f"{err.shape}"
        )
    bad = ~((eps > 0) & (err > 0) & np.isfinite(eps) & np.isfinite(err))
    if bad.any():
        k = int(np.argmax(bad))
        raise ParameterError(
            f"loglog_slope: ε and the error must be finite and above 0 (their log10 is fitted), "
            f"got error {err[k]:g} at ε = {eps[k]:g}; leave out an ε where the difference came "
            "out exact (or not finite)"
        )
    return float(np.polyfit(np.log10(eps), np.log10(err), 1)[0])
