"""Constant folding: compute once, while optimising, what depends on constants only."""

from __future__ import annotations

import warnings

import numpy as np

from ..graph import Node, constant, same_kind
from ..ops.control import Switch
from .rewrite import Graph, copy_with, output_list, transform


def fold_constants(outputs: Graph) -> Graph:
    """Replace every node whose inputs are all constants by a constant holding its value.

    Python-number results stay weakly typed (``2.0 * 3.0`` folds to the number 6.0, so
    ``x * (2.0 * 3.0)`` keeps x's dtype). Control-flow ops are left alone, and so is any
    node whose computation fails or warns: the run reports it as usual.
    """
    outs = output_list(outputs, "fold_constants")

    def visit(node: Node, inputs: tuple) -> Node:
        if not inputs or not all(i.is_constant for i in inputs) or _is_control(node):
            return copy_with(node, inputs)
        values = [i.op.value for i in inputs]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                with np.errstate(all="raise"):
                    value = node.op.compute(np, *values)
        except (ArithmeticError, ValueError, TypeError, IndexError, Warning):
            return copy_with(node, inputs)
        if all(i.dtype is None for i in inputs) and np.ndim(value) == 0:
            value = value.item() if hasattr(value, "item") else value  # stays weakly typed
        elif node.dtype is not None:
            value = np.asarray(value, dtype=node.dtype)
        return constant(value, name=node.name)

    return same_kind(outputs, transform(outs, visit))


def _is_control(node: Node) -> bool:
    return node.op.accepts_dead or isinstance(node.op, Switch)
