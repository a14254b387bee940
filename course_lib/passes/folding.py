"""Constant folding: compute once, while optimising, what depends on constants only."""

from __future__ import annotations

import numpy as np

from ..graph import Node, constant, same_kind
from ..ops.control import Switch
from .rewrite import Graph, copy_with, output_list, transform


def fold_constants(outputs: Graph) -> Graph:
    """Replace every node whose inputs are all constants by a constant holding its value.

    Python-number results stay weakly typed (``2.0 * 3.0`` folds to the number 6.0, so
    ``x * (2.0 * 3.0)`` keeps x's dtype); a NumPy result keeps its dtype (``exp(2.0)`` is a
    float64, so ``x32 * exp(2.0)`` is float64 folded or not). Control-flow ops are left
    alone, and so is any node whose computation fails or meets a floating-point error
    (overflow, division by zero, an invalid value: the run reports it as usual), gives
    complex numbers (no constant holds them) or grows (:func:`_grows`), and an output whose
    value is a NumPy scalar (``sum`` of a constant: as a constant, the run would return it
    as a 0-d array). Any other warning is shown once, here, and the node is folded."""
    outs = output_list(outputs, "fold_constants")
    returned = set(outs)

    def visit(node: Node, inputs: tuple) -> Node:
        if not inputs or not all(i.is_constant for i in inputs) or _is_control(node):
            return copy_with(node, inputs)
        values = [i.op.value for i in inputs]
        try:
            with np.errstate(all="raise"):  # per thread, unlike warnings.catch_warnings
                value = node.op.compute(np, *values)
        except (ArithmeticError, ValueError, TypeError, IndexError):
            return copy_with(node, inputs)
        if np.iscomplexobj(value) or _grows(value, values):
            return copy_with(node, inputs)
        if isinstance(value, np.generic) and node in returned:
            return copy_with(node, inputs)
        if not isinstance(value, (bool, int, float)):  # a Python number stays weakly typed
            value = np.asarray(value)  # NumPy's dtype, as the run without folding computes it
        return constant(value, name=node.name)

    return same_kind(outputs, transform(outs, visit))


#: Bytes a folded constant may hold beyond its inputs' (a broadcast is stored in full).
MAX_GROWTH = 1 << 20


def _grows(value, inputs: list) -> bool:
    """Would storing ``value`` take more than :data:`MAX_GROWTH` bytes beyond its inputs'
    (``broadcast_to(c, (4000, 4000))`` is a view at run time, 128 MB as a constant)?"""
    return np.asarray(value).nbytes > MAX_GROWTH + sum(np.asarray(v).nbytes for v in inputs)


def _is_control(node: Node) -> bool:
    return node.op.accepts_dead or isinstance(node.op, Switch)
