"""What every pass shares: checking its input graph and rebuilding it bottom-up."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import GraphError
from ..graph import Node, node_list, topological_order

Graph = Node | Sequence[Node]  # output nodes: one node or a list of them


def output_list(outputs: Graph, pass_name: str) -> list[Node]:
    """The outputs as a list of static graph nodes; anything else is a :class:`GraphError`."""
    outs = node_list(outputs, pass_name)
    for o in outs:
        if o.is_eager:
            raise GraphError(
                f"{pass_name}: {o.name} is an eager Tensor; passes rewrite static graphs "
                "(build one with variables, or trace the function with course_lib.jit)"
            )
    return outs


def copy_with(node: Node, inputs: tuple) -> Node:
    """``node`` itself when its inputs are unchanged, else a copy on the new inputs."""
    if inputs == node.inputs:
        return node
    return Node(node.op, inputs, node.name, node.shape, node.dtype)


def transform(outputs: list[Node], visit: Callable[[Node, tuple], Node]) -> list[Node]:
    """Rebuild the graph of ``outputs`` in topological order.

    ``visit(node, inputs)`` gets each node with its inputs already rewritten and returns
    the node that replaces it (``copy_with(node, inputs)`` to keep it). Nodes nobody
    replaces are shared with the original graph, which stays untouched.
    """
    new: dict[Node, Node] = {}
    for node in topological_order(outputs):
        new[node] = visit(node, tuple(new[i] for i in node.inputs))
    return [new[o] for o in outputs]
