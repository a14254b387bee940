"""Forward mode: the tangent graph (Jacobian-vector product) built symbolically.

For each node v_i in topological order, ``v̇_i = Σ_k ∂v_i/∂v_k · v̇_k``: one pass per
input direction, so a full Jacobian of f: Rⁿ → Rᵏ needs n passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import GraphError, ShapeError
from ..graph import Node, constant, topological_order
from ..ops import zeros_like
from ..ops.broadcast import broadcast_like


def jvp(outputs: Node | Sequence[Node], tangents: Mapping[Node, object]):
    """Tangent nodes of ``outputs`` given ``tangents`` {variable: array, number or node}.

    Returns one tangent node per output (a list when ``outputs`` is a list). Outputs
    that do not depend on any tangent get ``zeros_like`` of themselves.
    """
    single = isinstance(outputs, Node)
    outs = [outputs] if single else list(outputs)
    tangent: dict[Node, Node] = {}
    for var, value in tangents.items():
        if not isinstance(var, Node):
            raise GraphError(f"jvp: tangents must be keyed by nodes, got {type(var).__name__}")
        if var.is_constant:  # a scalar constant is shared: its tangent would move every use
            raise GraphError(
                f"jvp: {var.name} is a constant, and constants are not differentiated; use "
                f"a variable (course_lib.variable) for an input you want a derivative for"
            )
        t = value if isinstance(value, Node) else constant(value)
        if t.shape is not None and var.shape is not None and len(t.shape) > len(var.shape):
            raise ShapeError(
                f"jvp: the tangent of {var.name} has shape {t.shape}, "
                f"but {var.name} has shape {var.shape}"
            )
        t = broadcast_like(t, var)  # every tangent has its node's shape (none built if so)
        tangent[var] = t
    for node in topological_order(outs):
        if node in tangent or not node.inputs:
            continue
        ins = [tangent.get(i) for i in node.inputs]
        if all(t is None for t in ins):
            continue
        t = node.op.jvp(node, *ins)
        if t is not None:
            tangent[node] = t
    result = [tangent.get(o) if o in tangent else zeros_like(o) for o in outs]
    return result[0] if single else result
