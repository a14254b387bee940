"""How nodes are written in pictures: ``v4 = v2 × v3``, ``v̄(2→4) = v̄4 × v3``, ``v̇4 = t1 + t2``.

This module gives nodes the lecture's names (:func:`lecture_names`) and resolves them inside
labels; each op says how it is written over its inputs' names (:meth:`Op.written`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import GraphError
from ..graph import Node
from .figure import dot_text, format_value


def is_inline_constant(node: Node) -> bool:
    """Scalar constants are written into their users' labels instead of being drawn."""
    return node.is_constant and node.shape == ()


def lecture_names(
    nodes: Sequence[Node], numbers: Mapping[Node, int], roles: Mapping[Node, Sequence[str]]
) -> dict[Node, str]:
    """The lecture's name of each of ``nodes`` (given in topological order).

    A numbered node (a forward value, ``numbers[node] = i``) is ``vi``; a node with roles
    is called by its first one (``v̄4``, ``v̄(2→4)``, ``v̇3``); any other computed node is an
    intermediate of a derivative or update rule: ``t1``, ``t2``, … in order. Unnumbered
    variables and constants keep their own names (they are not in the result).
    """
    names, temporaries = {}, 0
    for node in nodes:
        if node in numbers:
            names[node] = f"v{numbers[node]}"
        elif roles.get(node):
            names[node] = roles[node][0]
        elif not (node.is_variable or node.is_constant):
            temporaries += 1
            names[node] = f"t{temporaries}"
    return names


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


def node_text(node: Node, names: dict, values: Mapping, roles: Sequence[str] = ()) -> str:
    """A node's whole label: its definition, its value when known, and the other names
    the same node has (``≡ v̄3 ≡ v̄(2→3)``: for ``v3 = v2 + 1`` the partial adjoint
    v̄(2→3) = v̄3 · 1 *is* the node v̄3). Escaped for graphviz (:func:`~.figure.dot_text`):
    a name is drawn as it is written, whatever characters it holds."""
    text = definition(node, names)
    if node in values:
        text += f"\n= {format_value(values[node])}"
    others = aliases(node, names, roles)
    return dot_text(text + ("\n≡ " + " ≡ ".join(others) if others else ""))


def aliases(node: Node, names: dict, roles: Sequence[str]) -> list[str]:
    """The roles of ``node`` other than the name it is drawn with."""
    return [role for role in roles if role != reference(node, names)]


def v_numbers(nodes: Sequence[Node], what: str) -> dict[Node, int]:
    """Each node's place in ``nodes``, counting from 1 (it is drawn or listed as v1, v2, ...);
    a node given twice would have two names, so it is a GraphError naming ``what``."""
    numbers: dict[Node, int] = {}
    for i, node in enumerate(nodes, start=1):
        if node in numbers:
            raise GraphError(f"{what} lists {node.name} twice (as v{numbers[node]} and v{i}); "
                             "list each node once")  # fmt: skip
        numbers[node] = i
    return numbers
