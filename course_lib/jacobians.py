"""Full Jacobians by forward mode (one pass per input) and reverse mode (one per output).

For f: Rⁿ → Rᵏ, forward mode seeds one input direction eⱼ per pass and gets a column;
reverse mode seeds one output adjoint eᵢ per pass and gets a row. In ML, k = 1 (a loss)
and n is huge, which is why training uses reverse mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .autodiff import grad, jvp
from .graph import Node, constant, topological_order
from .runtime import Executor


@dataclass
class JacobianResult:
    """The Jacobian (outputs × inputs, flattened), the passes used and the nodes built."""

    matrix: np.ndarray
    passes: int
    nodes_built: int


def jacobian(out: Node, x: Node, feed: Mapping, mode: str = "reverse") -> JacobianResult:
    """The Jacobian of ``out`` with respect to the variable ``x`` at ``feed``.

    ``mode="forward"`` runs one tangent pass per element of x; ``mode="reverse"`` one
    backward pass per element of out. Both give the same matrix.
    """
    if mode not in ("forward", "reverse"):
        raise ValueError(f"jacobian: mode must be 'forward' or 'reverse', not {mode!r}")
    value = np.asarray(Executor(out).run(feed, allow_unused=True))
    x_value = np.asarray(feed[x] if x in feed else feed[x.name])
    n, k = x_value.size, value.size
    before = len(topological_order([out]))
    rows, built = [], 0
    if mode == "forward":
        for j in range(n):
            direction = np.zeros(n)
            direction[j] = 1.0
            tangent = jvp(out, {x: constant(direction.reshape(x_value.shape))})
            built += len(topological_order([tangent])) - before
            rows.append(np.asarray(Executor(tangent).run(feed, allow_unused=True)).reshape(k))
        matrix = np.stack(rows, axis=1)
    else:
        for i in range(k):
            seed = np.zeros(k)
            seed[i] = 1.0
            g = grad(out, x, seed=constant(seed.reshape(value.shape)))
            built += len(topological_order([g])) - before
            rows.append(np.asarray(Executor(g).run(feed, allow_unused=True)).reshape(n))
        matrix = np.stack(rows, axis=0)
    return JacobianResult(matrix, n if mode == "forward" else k, built)
