"""Elementwise fusion: maximal trees of elementwise ops become one fused node each.

Walking the graph from the outputs back, an elementwise node joins the region of its
consumer when that consumer is its only user and uses it once (so the intermediate never
needs to exist in memory, and the generated expression has no repeated subexpressions).
Each region with two or more ops becomes a :class:`Fused` node, named like the region's
root, whose inputs are the values entering the region.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import GraphError
from ...graph import Node, consumers, is_weak_scalar, same_kind, topological_order, variable
from ..rewrite import Graph, copy_with, output_list
from .op import Fused

MAX_OPS = 64  # larger regions are split: one expression stays readable and compilable
MAX_INPUTS = 16  # and takes a bounded number of arrays
_TARGETS = ("numexpr", "cuda")
_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def fuse_elementwise(outputs: Graph, select: Callable[[Node], bool] | None = None) -> Graph:
    """Replace each maximal tree of fusable elementwise ops by one :class:`Fused` node.

    Fusable: ops that can write themselves as numexpr and CUDA expressions (arithmetic,
    comparisons, ``where``, ``exp``, ``tanh``, ``relu``, ...), on float32/float64 values
    (or values of unknown dtype). Outputs are never fused away. ``select(root)`` (optional)
    picks which of the regions :func:`find_regions` finds are fused (a search can try
    subsets).
    """
    outs = output_list(outputs, "fuse_elementwise")
    if select is not None and not callable(select):
        raise GraphError(f"fuse_elementwise: select must be a function of a region's root "
                         f"node (or None), got {select!r}")  # fmt: skip
    regions = find_regions(outs)
    if select is not None:
        regions = {root: members for root, members in regions.items() if select(root)}
    if not regions:
        return same_kind(outputs, outs)
    inside = {m for root, members in regions.items() for m in members if m is not root}
    new: dict[Node, Node] = {}
    for node in topological_order(outs):
        if node in regions:
            new[node] = _fused_node(node, regions[node], new)
        elif node not in inside:  # a region's inner nodes are used by the region only
            new[node] = copy_with(node, tuple(new[i] for i in node.inputs))
    return same_kind(outputs, [new[o] for o in outs])


def find_regions(outputs: Graph) -> dict[Node, list[Node]]:
    """Fusion regions of two or more ops: {root: members in topological order}."""
    outputs = output_list(outputs, "find_regions")
    order = topological_order(outputs)
    users = consumers(order)
    is_output = set(outputs)
    root: dict[Node, Node] = {}
    size: dict[Node, int] = {}
    inputs: dict[Node, set[Node]] = {}  # values entering each region so far
    for node in reversed(order):
        if not fusable(node):
            continue
        own = {i for i in node.inputs if not is_weak_scalar(i)}
        target = _joinable_root(node, users[node], root, is_output)
        if target is not None:
            grown = (inputs[target] - {node}) | own
            if size[target] < MAX_OPS and len(grown) <= MAX_INPUTS:
                root[node], inputs[target] = target, grown
                size[target] += 1
                continue
        if node.dtype != np.bool_:  # a comparison can only live inside a region
            root[node], size[node], inputs[node] = node, 1, own
    regions: dict[Node, list[Node]] = {}
    for node in order:
        if node in root and size[root[node]] > 1 and inputs[root[node]]:
            regions.setdefault(root[node], []).append(node)
    return regions


def fusable(node: Node) -> bool:
    """Can ``node`` be part of a fused kernel?"""
    op = node.op
    if not (op.elementwise and node.inputs) or isinstance(op, Fused):
        return False
    if node.dtype is not None and node.dtype not in _FLOAT_DTYPES and node.dtype != np.bool_:
        return False
    args = [f"x{k}" for k in range(len(node.inputs))]
    return all(op.expression(args, t) is not None for t in _TARGETS)


def _joinable_root(node: Node, users: list[Node], root: dict, is_output: set) -> Node | None:
    if node in is_output or len(users) != 1 or users[0] not in root:
        return None
    user = users[0]
    if sum(i is node for i in user.inputs) != 1 or _uses(user, user.inputs.index(node)) != 1:
        return None
    return root[user]


def _uses(node: Node, k: int) -> int:
    """How often input k appears in the op's generated code (silu writes x twice)."""
    mark = "\x00"
    args = [mark if j == k else "a" for j in range(len(node.inputs))]
    return max(node.op.expression(args, t).count(mark) for t in _TARGETS)


def _external_inputs(members: list[Node]) -> list[Node]:
    inside = set(members)
    seen: dict[Node, None] = {}
    for m in members:
        for i in m.inputs:
            if i not in inside and not is_weak_scalar(i):
                seen.setdefault(i)
    return list(seen)


def _fused_node(root: Node, members: list[Node], new: dict[Node, Node]) -> Node:
    """The fused node for a region: its body rebuilt over placeholders ``x0, x1, …``."""
    external = _external_inputs(members)
    params = [variable(f"x{k}", e.shape, e.dtype) for k, e in enumerate(external)]
    body: dict[Node, Node] = dict(zip(external, params))
    for m in members:
        ins = tuple(body.get(i, i) for i in m.inputs)
        body[m] = Node(m.op, ins, m.name, m.shape, m.dtype)
    op = Fused(params, body[root])
    return Node(op, tuple(new[e] for e in external), root.name, root.shape, root.dtype)
