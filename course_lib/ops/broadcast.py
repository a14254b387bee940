"""Broadcasting and its adjoint, in one place: ``broadcast_to`` and ``sum_to``.

NumPy broadcasting stretches an operand's missing leading axes and its length-1 axes to the
shape of the result. Reverse mode undoes it: the adjoint of a stretched input is the
output's adjoint summed over the stretched axes. So the two ops here are each other's
adjoint, and both are linear (each is its own tangent rule)::

    y = broadcast_to(x, shape)    x̄ = sum_to(ȳ, x)
    y = sum_to(x, like)           x̄ = broadcast_like(ȳ, x)

Each op has two forms. When the target shape is known while the graph is built, it is the
op's attribute (``SumTo((3, 1))``); when it is not (a variable declared without a shape),
the op takes a second input ``like`` and reads its shape when the graph runs (``SumTo()``).
:func:`shaped_like` picks the form (for ``reshape`` too), and builds nothing when the static
shapes already agree.

The elementwise ops' rules call :func:`unbroadcast` and :func:`broadcast_tangent`, which
add a node only where broadcasting may really have stretched an input. Where it provably did
not (equal static shapes, the other operands 0-d scalars as in ``x * 2.0``, the same node as
in ``x * x``), the adjoint passes through unchanged, so the backward graph of the lecture's
examples holds only the nodes the lecture draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .. import params
from ..errors import GraphError
from ..graph import Node, Op, apply, is_static
from .axes import as_array


def broadcast_shapes(*shapes):
    """NumPy broadcasting of static shapes (an axis may be None: unknown); None if a shape is."""
    first = shapes[0]
    if all(s == first for s in shapes[1:]):
        return first
    if any(s is None for s in shapes):
        return None
    out = []
    for dims in zip(*(((1,) * (max(map(len, shapes)) - len(s)) + s) for s in shapes)):
        size = 1
        for d in dims:
            if d is None:
                size = None if size == 1 else size
            elif d != 1:
                if size not in (1, None) and size != d:
                    raise ValueError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
                size = d
        out.append(size)
    return tuple(out)


def _stretches(shape, target) -> bool:
    """Whether broadcasting may stretch ``shape`` to ``target`` (a size None: unknown)."""
    pairs = zip(shape[::-1], target[::-1])
    return len(shape) <= len(target) and all(d in (None, 1, t) or t is None for d, t in pairs)


def _summed_axes(shape, target) -> tuple[int, ...]:
    """The axes of ``shape`` to sum (keeping them) so that the result reshapes to ``target``."""
    lead = len(shape) - len(target)
    if lead < 0:
        raise ValueError(f"cannot sum shape {shape} to the larger shape {target}")
    if not _stretches(target, shape):  # (2, 3) to (3, 2) is no sum, nor a reshape
        raise ValueError(f"cannot sum shape {shape} to {target}: {target} does not broadcast to it")
    return tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(target) if d == 1 and shape[lead + i] != 1
    )


# -- the two ops -------------------------------------------------------------------------------
class ToShape(Op):
    """An op giving ``x`` a target shape: the attribute ``shape`` when it is known while the
    graph is built, else (``shape=None``) the run-time shape of a second input ``like``.

    Linear in ``x``; ``like`` only lends its shape (it is not read, and gets no gradient).
    The adjoint goes back to x's shape by the op ``adjoint`` (a class), shaped like x.
    """

    attributes = ("shape",)
    linear = True
    minus_one = False  # whether one size of the target may be -1, "the rest" (reshape)
    adjoint: type[ToShape]

    def __init__(self, shape=None):
        if shape is not None:
            shape = params.shape(shape, f"{self.name}: shape", infer=self.minus_one)
            if None in shape:  # the run-time form takes a node ``like`` instead
                raise GraphError(f"{self.name}: shape must be a tuple of integers, got {shape}")
        super().__init__(shape=shape)

    def target(self, like) -> tuple:
        """The target shape: the attribute, or the shape of the array ``like``."""
        return self.shape if like is None else like.shape

    def infer_shape(self, shape, *like):
        return like[0] if like else self.static_shape(shape)

    def static_shape(self, shape):
        """The output shape for an input of ``shape`` (raising if it cannot get there)."""
        return self.shape

    def infer_dtype(self, dtype, *like):
        return dtype

    def gradient(self, node, g, needs):
        x, *like = node.inputs
        return [shaped_like(self.adjoint, g, x), *(None for _ in like)]

    def accesses(self, out_shape, in_shape, *like):
        loads, stores = super().accesses(out_shape, in_shape)
        return loads + (0,) * len(like), stores

    def label(self) -> str:
        return self.name if self.shape is None else super().label()


class BroadcastTo(ToShape):
    """``x`` stretched to the target shape: a view (stride 0 along the stretched axes)."""

    name = "broadcast_to"
    view = True

    def static_shape(self, shape):
        if shape is not None and not _stretches(shape, self.shape):
            raise ValueError(f"cannot broadcast {shape} to {self.shape}")
        return self.shape

    def compute(self, xp, x, like=None):
        return xp.broadcast_to(as_array(xp, x), self.target(like))  # x may be a number


class SumTo(ToShape):
    """``x`` summed over the axes broadcasting stretched, down to the target shape."""

    name = "sum_to"

    def static_shape(self, shape):
        if shape is not None:
            _summed_axes(shape, self.shape)  # raises if x has fewer axes than the target
        return self.shape

    def compute(self, xp, x, like=None):
        x = as_array(xp, x)  # a number (a scalar constant, a number seed)
        shape = tuple(self.target(like))
        if x.shape == shape:
            return x
        axes = _summed_axes(x.shape, shape)
        return (x.sum(axis=axes, keepdims=True) if axes else x).reshape(shape)

    def flops(self, out_shape, in_shape, *like):
        """One addition per element summed away (none where x is empty: the sums are 0)."""
        return max(0, math.prod(in_shape) - math.prod(out_shape))


# Closed under differentiation: y = broadcast_to(x) has x̄ = sum_to(ȳ, x), and vice versa.
BroadcastTo.adjoint, SumTo.adjoint = SumTo, BroadcastTo


# -- building them -------------------------------------------------------------------------------
def to_shape(op_type: type[ToShape], x, shape) -> Node:
    """``x`` given the static ``shape`` by ``op_type`` (the run-time form takes a node whose
    shape to match: :func:`shaped_like`)."""
    if shape is None:
        raise GraphError(f"{op_type.name}: shape must be a tuple of integers, got None")
    return apply(op_type(shape), x)


def shaped_like(op_type: type[ToShape], x: Node, like: Node) -> Node:
    """``x`` given the shape of the node ``like`` by ``op_type`` (BroadcastTo, SumTo or
    Reshape): ``x`` itself when the static shapes agree, the static form when like's shape
    is known, else the run-time form, which reads it when the graph runs."""
    if is_static(like.shape):
        return x if x.shape == like.shape else apply(op_type(like.shape), x)
    return apply(op_type(), x, like)


def broadcast_to(x, shape) -> Node:
    """View ``x`` broadcast to ``shape``."""
    return to_shape(BroadcastTo, x, shape)


def broadcast_like(x, like: Node) -> Node:
    """Broadcast ``x`` to the shape of the node ``like``."""
    return shaped_like(BroadcastTo, x, like)


def sum_to(x, like: Node) -> Node:
    """Sum ``x`` down to the shape of the node ``like`` (undo broadcasting)."""
    if not isinstance(like, Node):
        raise GraphError(f"sum_to: like must be a node (whose shape to sum to), got {like!r}")
    return shaped_like(SumTo, x, like)


# -- for the rules of ops that broadcast -----------------------------------------------------
def _widened(shape, node: Node, group: Sequence[Node]) -> bool:
    """Whether ``node``'s shape may be larger than ``shape``, that of its inputs ``group``
    broadcast together. False only when the static shapes prove it is not: they are equal,
    or every other input is 0-d, in the group, or (axis by axis, from the right) no longer
    and of size 1 wherever ``shape`` has size 1 or an unknown size."""
    if shape == node.shape and is_static(shape):
        return False
    for other in node.inputs:
        if other.shape == () or any(other is n for n in group):
            continue
        if shape is None or other.shape is None or len(other.shape) > len(shape):
            return True
        if any(o != 1 and d in (None, 1) for d, o in zip(shape[::-1], other.shape[::-1])):
            return True
    return False


def unbroadcast(adjoint: Node, node: Node, k: int) -> Node:
    """A partial adjoint shaped like ``node``, brought back to the shape of its input k:
    summed over the axes broadcasting stretched, or unchanged where it provably stretched
    none."""
    x = node.inputs[k]
    return sum_to(adjoint, x) if _widened(x.shape, node, (x,)) else adjoint


def broadcast_tangent(tangent: Node, node: Node, ks: Sequence[int]) -> Node:
    """A tangent of ``node`` built from the tangents of its inputs ``ks`` only (the others'
    are zero), so shaped like those inputs broadcast together: broadcast to ``node``'s
    shape, or unchanged where the other inputs provably do not widen it."""
    group = [node.inputs[k] for k in ks]
    shape = broadcast_shapes(*(x.shape for x in group))
    return broadcast_like(tangent, node) if _widened(shape, node, group) else tangent
