"""How nodes are written in pictures: ``v4 = v2 × v3``, ``v̄(2→4) = v̄4 × v3``.

This module resolves names (``v4``, ``v̄(2→4)``); each op says how it is written over them.
"""

from __future__ import annotations

from ..graph import Node


def is_inline_constant(node: Node) -> bool:
    """Scalar constants are written into their users' labels instead of being drawn."""
    return node.is_constant and node.shape == ()


def reference(node: Node, names: dict) -> str:
    """How a node is referred to inside another node's label."""
    return names.get(node, node.name)


def expression(node: Node, names: dict) -> str:
    """The right-hand side of a node's definition: a variable's name, else what its op
    writes over its inputs' names (:meth:`course_lib.graph.Op.written`)."""
    if node.is_variable:
        return node.name
    return node.op.written([reference(i, names) for i in node.inputs])


def definition(node: Node, names: dict) -> str:
    """``name = expression`` (or just the name when they coincide)."""
    name, expr = reference(node, names), expression(node, names)
    return name if name == expr else f"{name} = {expr}"
