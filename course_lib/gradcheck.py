"""Finite-difference checks of reverse- and forward-mode derivatives.

Central differences ``(f(θ+ε) − f(θ−ε)) / 2ε`` have truncation error O(ε²); in
float64 with ε ≈ 1e-6 they agree with exact derivatives to about 1e-8.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from . import params
from .autodiff import grad, jvp
from .backend import to_numpy
from .errors import GraphError, ParameterError
from .graph import Node, constant
from .ops import mul, sum
from .runtime import Executor


def numerical_gradient(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central-difference gradient of the scalar function ``f`` at the array ``x`` (on the
    host: ``f`` is called with NumPy arrays)."""
    eps = params.real(eps, "numerical_gradient: eps", positive=True)
    x = np.array(to_numpy(x), dtype=np.float64)
    out = np.zeros_like(x)
    flat, grad_flat = x.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        up = float(f(x))
        flat[i] = old - eps
        down = float(f(x))
        flat[i] = old
        grad_flat[i] = (up - down) / (2 * eps)
    return out


def _run(executor: Executor, feed: Mapping):
    return executor.run(feed, allow_unused=True)


def _float64_variables(feed: Mapping, what: str) -> None:
    """The differences are taken in float64: a variable declared with another dtype would
    refuse them (and ε = 1e-6 is below float32's resolution near 1)."""
    for var in feed:
        dtype = getattr(var, "dtype", None)
        if dtype is not None and np.dtype(dtype) != np.float64:
            raise GraphError(
                f"{what}: variable {var.name} is declared {np.dtype(dtype)}, but central "
                "differences need float64; declare the variables with dtype=np.float64 to check"
            )


def check_gradients(out: Node, feed: Mapping[Node, np.ndarray], seed: int = 0, eps: float = 1e-6):
    """Compare ``grad`` with central differences for every fed variable.

    A non-scalar ``out`` is reduced to ``sum(out * r)`` with a fixed random ``r``.
    Returns ``{variable name: (analytic, numeric)}``, NumPy arrays on the host.
    """
    _float64_variables(feed, "check_gradients")
    rng = np.random.default_rng(seed)
    shape = np.shape(_run(Executor(out), feed))
    scalar = out if shape == () else sum(mul(out, constant(rng.standard_normal(shape))))
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

    Returns ``(analytic, numeric)`` arrays of the shape of ``out``.
    """
    _float64_variables(feed, "check_tangents")
    eps = params.real(eps, "check_tangents: eps", positive=True)
    rng = np.random.default_rng(seed)
    feed = {v: to_numpy(x) for v, x in feed.items()}  # the differences are taken on the host
    direction = {v: rng.standard_normal(np.shape(x)) for v, x in feed.items()}
    analytic = _run(Executor(jvp(out, direction)), feed)
    forward = Executor(out)
    up = _run(forward, {v: x + eps * direction[v] for v, x in feed.items()})
    down = _run(forward, {v: x - eps * direction[v] for v, x in feed.items()})
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
    (the quotients divide by it)."""
    eps_values = [params.real(e, "difference_errors: ε", positive=True) for e in eps_values]
    return {
        "forward": to_numpy([abs(forward_difference(f, x, e) - exact) for e in eps_values]),
        "central": to_numpy([abs(central_difference(f, x, e) - exact) for e in eps_values]),
    }


def loglog_slope(eps_values, errors) -> float:
    """The slope of ``log10(error)`` against ``log10(ε)`` (least squares): the error's order.
    Every ε and every error must be above 0: log10(0) has no value."""
    eps, err = (np.asarray(to_numpy(v), dtype=np.float64) for v in (eps_values, errors))
    bad = ~((eps > 0) & (err > 0))
    if bad.any():
        k = int(np.argmax(bad))
        raise ParameterError(
            f"loglog_slope: ε and the error must be above 0 (their log10 is fitted), got error "
            f"{err[k]:g} at ε = {eps[k]:g}; leave out an ε where the difference came out exact"
        )
    return float(np.polyfit(np.log10(eps), np.log10(err), 1)[0])
