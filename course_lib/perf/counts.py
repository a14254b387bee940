"""FLOP and memory-traffic accounting of a graph, and its arithmetic intensity.

Each op runs as its own kernel: it reads its inputs from memory and writes its output
(``Op.accesses``), as the lecture counts Program 1. A fused node is one kernel, so
fusion shows up as less traffic for the same FLOPs. :func:`op_nodes` is the one walk
that every count of the package (here and in :mod:`course_lib.models`) goes through.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import GraphError, ShapeError, describe_shapes
from ..graph import (
    Node,
    Shape,
    dtype_by_example,
    is_static,
    is_weak_scalar,
    node_list,
    topological_order,
)
from ..ops.broadcast import BroadcastTo


class Intensities:
    """Arithmetic intensity of anything with ``flops``, ``elements`` and ``bytes``."""

    flops: int
    elements: int
    bytes: int

    @property
    def intensity(self) -> Fraction:
        """FLOPs per element transferred, exact (the lecture's AI; ``C = A + B``: 1/3).

        0 when nothing moves (a view such as a reshape: no kernel, no work)."""
        return Fraction(self.flops, self.elements) if self.elements else Fraction(0)

    @property
    def byte_intensity(self) -> float:
        """FLOPs per byte transferred (the roofline's x axis); 0.0 when nothing moves."""
        return self.flops / self.bytes if self.bytes else 0.0


@dataclass(frozen=True)
class OpCost(Intensities):
    """One kernel's work: FLOPs, element transfers (loads + stores) and bytes."""

    node: Node
    flops: int
    elements: int
    bytes: int


@dataclass(frozen=True)
class IntensityReport(Intensities):
    """The cost of every op of a graph and of the whole graph."""

    ops: tuple[OpCost, ...]

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.ops)

    @property
    def elements(self) -> int:
        return sum(c.elements for c in self.ops)

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.ops)

    def table(self) -> str:
        """One line per op and a total line (a deterministic text)."""
        lines = [f"{'op':28s} {'flops':>10s} {'loads+stores':>13s} {'bytes':>11s}  AI"]
        for c in self.ops:
            name = _row_name(c.node.name, c.node.op.label(), 28)
            lines.append(f"{name:28s} {c.flops:10d} {c.elements:13d} {c.bytes:11d}  {c.intensity}")
        lines.append(
            f"{'total':28s} {self.flops:10d} {self.elements:13d} {self.bytes:11d}  {self.intensity}"
        )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()


def _row_name(node: str, label: str, width: int) -> str:
    """``node = label`` in ``width`` characters: a long node name is cut (ending in "…"),
    so the op's label, which says what kernel the row is, stays readable."""
    room = width - len(" = ") - len(label)
    if len(node) > room:
        node = node[: max(room - 1, 0)] + "…"
    return f"{node} = {label}"[:width]


def op_nodes(outputs: Node | Iterable[Node]) -> list[Node]:
    """The ops the outputs (a node or several) depend on, in creation order, each once.

    Variables and constants are inputs, not ops: they cost nothing.
    """
    outputs = node_list(outputs, "counting costs")
    return [node for node in topological_order(outputs) if node.inputs]


def static_shapes(node: Node) -> list[Shape]:
    """The static shapes of ``node``, then of its inputs: what ``Op.flops`` and
    ``Op.accesses`` take. Raises :class:`ShapeError` naming the op and the nodes whose
    shapes are not fully known."""
    shapes = [node.shape, *(i.shape for i in node.inputs)]
    unknown = [n.name for n, s in zip((node, *node.inputs), shapes) if not is_static(s)]
    if unknown:
        raise ShapeError(
            f"op {node.op.label()} at node {node.name}: the shapes of {', '.join(unknown)} are "
            f"not known ({describe_shapes((node, *node.inputs))}); give the variables static "
            "shapes to count FLOPs and bytes"
        )
    return shapes


def flops_by_node(outputs: Node | Iterable[Node]) -> dict[Node, int]:
    """``op.flops(out_shape, *in_shapes)`` of every op the outputs depend on.

    From the static shapes recorded when the graph was built, so nothing runs (both branches
    of a ``cond`` count); shared nodes count once.
    """
    return {node: node.op.flops(*static_shapes(node)) for node in op_nodes(outputs)}


def op_cost(node: Node, dtypes: dict | None = None) -> OpCost:
    """The FLOPs and traffic of one op node (its inputs' and its own static shapes).

    ``dtypes`` gives dtypes the graph leaves open (see :func:`arithmetic_intensity`).
    """
    if not (isinstance(node, Node) and node.inputs):
        raise GraphError(
            f"op_cost: {node!r} is not an op node; variables and constants are inputs, not "
            "kernels, so they cost nothing (arithmetic_intensity counts the ops of a graph)"
        )
    dtypes = _dtypes(_untyped_upstream(node)) if dtypes is None else dtypes
    shapes = static_shapes(node)
    itemsizes = [_itemsize(n, node, dtypes) for n in (node, *node.inputs)]
    stored = [shapes[0], *(_stored_shape(i, s) for i, s in zip(node.inputs, shapes[1:]))]
    return OpCost(
        node,
        node.op.flops(*shapes),
        node.op.memory_elements(*stored),
        node.op.memory_bytes(*stored, itemsizes=itemsizes),
    )


def _stored_shape(node: Node, shape: Shape) -> Shape:
    """The shape of the memory an input ``node`` of ``shape`` reads: a ``broadcast_to`` view
    reads its source's elements (stride 0 along the stretched axes), as an input the op
    broadcasts itself does (``x + v`` loads ``v`` once per element of ``v``)."""
    while isinstance(node.op, BroadcastTo) and is_static(node.inputs[0].shape):
        node = node.inputs[0]
        shape = node.shape
    return shape


def arithmetic_intensity(outputs: Node | Iterable[Node]) -> IntensityReport:
    """FLOPs, loads + stores and bytes of every op of the graph, and their totals.

    ``report.intensity`` is the lecture's AI in FLOPs per element (Program 1 of
    ``E = D + (A + B) * C``: 1/3; fused, Program 2: 3/5); ``report.byte_intensity`` is
    FLOPs per byte. Variables and constants are inputs, not kernels.
    """
    ops = op_nodes(outputs)
    dtypes = _dtypes(ops)
    return IntensityReport(tuple(op_cost(n, dtypes) for n in ops))


def _dtypes(ops: list[Node]) -> dict:
    """Each op's dtype; where the graph has none (a weak scalar took part), NumPy's rule:
    the op run on one element of each known dtype and on the weak scalars themselves
    (``int32 * 0.5`` and ``int32 / 2`` are float64; a fused node whose body holds weak
    scalars, on its inputs' dtypes, likewise), else the result type of the inputs whose
    dtypes are known (an input of unknown dtype is refused when its bytes are counted)."""
    dtypes: dict = {}
    for node in ops:
        inputs = [dtypes.get(i, i.dtype) for i in node.inputs]
        known = [d for d in inputs if d is not None]
        if node.dtype is not None or not known:
            dtypes[node] = node.dtype
        elif all(d is not None or is_weak_scalar(i) for d, i in zip(inputs, node.inputs)):
            dtypes[node] = _weak_dtype(node, inputs)  # every dtype known but weak scalars'
        else:
            dtypes[node] = np.result_type(*known)
    return dtypes


def _untyped_upstream(node: Node) -> list[Node]:
    """``node`` and the ops it reaches through inputs without a dtype, in creation order: the
    ops whose dtypes :func:`_dtypes` works out for ``node``'s bytes (not the whole graph)."""
    found, stack = {node}, [node]
    while stack:
        for i in stack.pop().inputs:
            if i.dtype is None and i.inputs and i not in found:
                found.add(i)
                stack.append(i)
    return sorted(found, key=lambda n: n.seq)


def _weak_dtype(node: Node, inputs: list) -> np.dtype:
    """The dtype NumPy gives ``node``'s op on one element of each input dtype, the weak
    scalars as the Python numbers they are (NumPy's weak promotion)."""
    return dtype_by_example(node.op, [d if d is not None else i.op.value
                                      for d, i in zip(inputs, node.inputs)])  # fmt: skip


def _itemsize(node: Node, user: Node, dtypes: dict) -> int:
    """Bytes per element; a weakly typed scalar takes the dtype the op using it computes in:
    its result's, or for a comparison (a bool result) that of its inputs (``x > 0.5`` of
    float32 compares float32s). A variable without a dtype is refused, not guessed."""
    dtype = dtypes.get(node, node.dtype)
    if dtype is None and is_weak_scalar(node):
        dtype = dtypes.get(user, user.dtype)
        if dtype == np.bool_:
            dtype = _compared_dtype(user, dtypes)
    if dtype is None:
        raise GraphError(
            f"{user.op.label()} at node {user.name}: the dtype of {node.name} is not known; "
            "give the variables dtypes to count bytes"
        )
    return np.dtype(dtype).itemsize


def _compared_dtype(user: Node, dtypes: dict) -> np.dtype:
    """The dtype NumPy compares ``user``'s inputs in (its weak scalars as the Python numbers
    they are); bool where it cannot tell (a Python int too large for the other dtype)."""
    inputs = [i.op.value if is_weak_scalar(i) else dtypes.get(i, i.dtype) for i in user.inputs]
    try:
        return np.result_type(*(i for i in inputs if i is not None))
    except (TypeError, ValueError, OverflowError):
        return np.dtype(bool)
