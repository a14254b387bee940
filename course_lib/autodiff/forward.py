"""Forward mode: the tangent graph (Jacobian-vector product) built symbolically.

For each node v_i in topological order, ``v̇_i = Σ_k ∂v_i/∂v_k · v̇_k``: one pass per
input direction, so a full Jacobian of f: Rⁿ → Rᵏ needs n passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import GraphError, ShapeError
from ..graph import Node, constant, node_list, same_kind, topological_order
from ..ops import cast, zeros_like
from ..ops.broadcast import broadcast_like


def jvp(outputs: Node | Sequence[Node], tangents: Mapping[Node, object]):
    """Tangent nodes of ``outputs`` given ``tangents`` {variable: array, number or node}.

    Returns one tangent node per output (a list when ``outputs`` is a list). Outputs
    that do not depend on any tangent get ``zeros_like`` of themselves. A number, array or
    node is taken in its float variable's dtype; its shape must be the variable's, or
    broadcast to it (a number is the same tangent for every element).
    """
    outs = node_list(outputs, "jvp: outputs")
    tangent = tangent_map(outs, tangents)
    return same_kind(outputs, [tangent[o] if o in tangent else zeros_like(o) for o in outs])


def tangent_map(outputs: Sequence[Node], tangents: Mapping[Node, object]) -> dict[Node, Node]:
    """The tangent v̇i of every node vi of the graph of ``outputs`` that the seeded
    ``tangents`` reach, seeds included: ``{vi: v̇i}``. A node missing from it has the tangent
    zero (no node is built for it). :func:`jvp` returns the outputs' entries; pictures name
    every entry (``viz.draw_graph(..., tangents=...)``).
    """
    if not isinstance(tangents, Mapping):
        raise GraphError(
            f"jvp: tangents must be a mapping {{variable: tangent}}, got {type(tangents).__name__}"
        )
    tangent: dict[Node, Node] = {}
    for var, value in tangents.items():
        if not isinstance(var, Node):
            raise GraphError(f"jvp: tangents must be keyed by nodes, got {type(var).__name__}")
        if var.is_constant:  # a scalar constant is shared: its tangent would move every use
            raise GraphError(
                f"jvp: {var.name} is a constant, and constants are not differentiated; use "
                f"a variable (course_lib.variable) for an input you want a derivative for"
            )
        t = _tangent_node(value, var) if isinstance(value, Node) else _seed(value, var)
        if not _broadcasts(t.shape, var.shape):
            raise ShapeError(
                f"jvp: the tangent of {var.name} has shape {t.shape}, but {var.name} has "
                f"shape {var.shape}; give a tangent of its shape (or one that broadcasts to it)"
            )
        t = broadcast_like(t, var)  # every tangent has its node's shape (none built if so)
        tangent[var] = t
    for node in topological_order(outputs):
        if node in tangent or not node.inputs:
            continue
        ins = [tangent.get(i) for i in node.inputs]
        if all(t is None for t in ins):
            continue
        t = node.op.jvp(node, *ins)
        if t is not None:
            tangent[node] = t
    return tangent


def _seed(value, var: Node) -> Node:
    """A given tangent (number or array) as a constant; for a float variable in its dtype, as
    its derivative is (a boolean or integer mask would compute as one: ``-mask`` fails)."""
    try:
        t = constant(value)
    except GraphError as exc:
        raise GraphError(f"jvp: the tangent of {var.name}: {exc}") from exc
    if _is_float(var) and t.dtype != var.dtype:  # a number (no dtype) or another dtype's array
        t = constant(np.asarray(t.op.value, var.dtype))
    return t


def _tangent_node(t: Node, var: Node) -> Node:
    """A tangent given as a node, for a float variable cast to its dtype where that of ``t``
    is known and another, as a number or an array is (:func:`_seed`)."""
    if _is_float(var) and t.dtype is not None and t.dtype != var.dtype:
        return cast(t, var.dtype)
    return t


def _broadcasts(shape, target) -> bool:
    """Can an array of ``shape`` broadcast to ``target`` (None: a size or shape not known)?"""
    if shape is None or target is None:
        return True
    if len(shape) > len(target):
        return False
    return all(s in (1, None) or n is None or s == n for s, n in zip(shape[::-1], target[::-1]))


def _is_float(node: Node) -> bool:
    return node.dtype is not None and node.dtype.kind == "f"
