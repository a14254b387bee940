"""Common-subexpression elimination: one node for each distinct computation."""

from __future__ import annotations

from ..graph import Node, same_kind
from ..ops.elementwise import Add, Mul
from .rewrite import Graph, copy_with, output_list, transform

# a + b and b + a are the same value, bit for bit but for a NaN's sign when both are NaNs
# (x86 keeps the first operand's: -nan + nan is -nan, nan + -nan is nan)
COMMUTATIVE = (Add, Mul)


def eliminate_common_subexpressions(outputs: Graph) -> Graph:
    """Merge nodes that apply equal ops (``Op.key``) to the same inputs.

    ``x * y`` built twice becomes one node used twice; ``b + a`` merges with ``a + b``.
    Variables are never merged (each is its own input); neither are ops whose attributes
    cannot be compared.
    """
    outs = output_list(outputs, "eliminate_common_subexpressions")
    seen: dict[tuple, Node] = {}

    def visit(node: Node, inputs: tuple) -> Node:
        try:
            key = (node.op.key(), _input_ids(node, inputs))
            hash(key)
        except TypeError:  # unhashable attributes: keep the node
            return copy_with(node, inputs)
        first = seen.get(key)
        if first is None:
            first = seen[key] = copy_with(node, inputs)
        return first

    return same_kind(outputs, transform(outs, visit))


def _input_ids(node: Node, inputs: tuple) -> tuple:
    ids = tuple(id(i) for i in inputs)
    return tuple(sorted(ids)) if isinstance(node.op, COMMUTATIVE) else ids
