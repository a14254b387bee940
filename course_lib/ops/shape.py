"""Shape and view ops: reshape, permute, broadcast, concat/split, indexing, gather."""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import params
from ..backend import scatter_add
from ..errors import ShapeError
from ..graph import Node, Op, apply
from . import _shapes
from .elementwise import zeros_like


class View(Op):
    """An op NumPy computes as a view (new shape and strides, same memory): no traffic."""

    def accesses(self, out_shape, *in_shapes):
        return (0,) * len(in_shapes), 0


class Reshape(View):
    name = "reshape"

    def __init__(self, shape):
        shape = params.shape(shape, "reshape: shape", infer=True)
        super().__init__(shape=shape)
        self.shape = shape

    def infer_shape(self, shape):
        if shape is None or None in shape:
            return None if -1 in self.shape else self.shape
        size, known = math.prod(shape), math.prod(d for d in self.shape if d != -1)
        if self.shape.count(-1) > 1:
            raise ValueError(f"at most one -1 in the new shape {self.shape}")
        out = tuple(size // known if d == -1 and known else d for d in self.shape)
        if math.prod(out) != size:
            raise ValueError(f"cannot reshape {shape} ({size} elements) to {self.shape}")
        return out

    def compute(self, xp, x):
        return xp.reshape(x, self.shape)

    def gradient(self, node, g, needs):
        return [reshape_like(g, node.inputs[0])]

    def jvp(self, node, dx):
        return None if dx is None else apply(self, dx)


class ReshapeLike(View):
    """Reshape ``x`` to the run-time shape of ``like``."""

    name = "reshape_like"

    def infer_shape(self, shape, like_shape):
        return like_shape

    def infer_dtype(self, dtype, like_dtype):
        return dtype

    def compute(self, xp, x, like):
        return xp.reshape(x, like.shape)

    def gradient(self, node, g, needs):
        return [reshape_like(g, node.inputs[0]), None]

    def jvp(self, node, dx, dlike):
        return None if dx is None else apply(self, dx, node.inputs[1])


class Permute(View):
    name = "permute"

    def __init__(self, axes=None):
        axes = None if axes is None else params.axes(axes, "permute: axes")
        super().__init__(axes=axes)
        self.axes = axes

    def infer_shape(self, shape):
        if shape is None:
            return None
        if self.axes is None:
            return shape[::-1]
        if sorted(a % len(shape) for a in self.axes) != list(range(len(shape))):
            raise ValueError(f"axes {self.axes} are not a permutation of {len(shape)} dimensions")
        return tuple(shape[a] for a in self.axes)

    def compute(self, xp, x):
        return xp.transpose(x, self.axes)

    def inverse(self):
        if self.axes is None:
            return self
        n = len(self.axes)
        return Permute(tuple(int(i) for i in np.argsort([a % n for a in self.axes])))

    def gradient(self, node, g, needs):
        return [apply(self.inverse(), g)]

    def jvp(self, node, dx):
        return None if dx is None else apply(self, dx)


class SwapLastAxes(View):
    """Swap the last two axes (the matrix transpose of a batch of matrices)."""

    name = "mT"

    def infer_shape(self, shape):
        if shape is None:
            return None
        if len(shape) < 2:
            raise ValueError(f"matrix transpose needs at least 2 dimensions, got {shape}")
        return shape[:-2] + (shape[-1], shape[-2])

    def compute(self, xp, x):
        return xp.swapaxes(x, -1, -2)

    def gradient(self, node, g, needs):
        return [apply(self, g)]

    def jvp(self, node, dx):
        return None if dx is None else apply(self, dx)


class BroadcastTo(View):
    name = "broadcast_to"

    def __init__(self, shape):
        shape = params.shape(shape, "broadcast_to: shape")
        super().__init__(shape=shape)
        self.shape = shape

    def infer_shape(self, shape):
        if shape is not None and _shapes.broadcast(shape, self.shape) != self.shape:
            raise ValueError(f"cannot broadcast {shape} to {self.shape}")
        return self.shape

    def compute(self, xp, x):
        return xp.broadcast_to(x, self.shape)

    def gradient(self, node, g, needs):
        from .reductions import sum_to  # noqa: PLC0415

        return [sum_to(g, node.inputs[0])]

    def jvp(self, node, dx):
        return None if dx is None else apply(self, dx)


class BroadcastToLike(View):
    """Broadcast ``x`` to the run-time shape of ``like``."""

    name = "broadcast_like"

    def infer_shape(self, shape, like_shape):
        return like_shape

    def infer_dtype(self, dtype, like_dtype):
        return dtype

    def compute(self, xp, x, like):
        return xp.broadcast_to(x, like.shape)

    def gradient(self, node, g, needs):
        from .reductions import sum_to  # noqa: PLC0415

        return [sum_to(g, node.inputs[0]), None]

    def jvp(self, node, dx, dlike):
        return None if dx is None else apply(self, dx, node.inputs[1])


class Concat(Op):
    name = "concat"

    def __init__(self, axis=0):
        axis = params.integer(axis, "concat: axis")
        super().__init__(axis=axis)
        self.axis = axis

    def infer_shape(self, *shapes):
        if any(s is None for s in shapes):
            return None
        ndim = len(shapes[0])
        axis = _shapes.normalize_axes(self.axis, ndim)[0]
        for s in shapes[1:]:
            if len(s) != ndim or any(
                a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis
            ):
                raise ValueError(f"shapes {shapes} differ outside axis {self.axis}")
        sizes = [s[axis] for s in shapes]
        total = None if None in sizes else sum(sizes)
        return shapes[0][:axis] + (total,) + shapes[0][axis + 1 :]

    def compute(self, xp, *xs):
        return xp.concatenate(xs, axis=self.axis)

    def gradient(self, node, g, needs):
        return [
            apply(ConcatPart(k, self.axis), g, *node.inputs) if need else None
            for k, need in enumerate(needs)
        ]

    def jvp(self, node, *tangents):
        if all(t is None for t in tangents):
            return None
        parts = [zeros_like(x) if t is None else t for x, t in zip(node.inputs, tangents)]
        return apply(self, *parts)


class ConcatPart(Op):
    """Part ``k`` of ``g`` split like the inputs of a concat (the concat's adjoint)."""

    name = "concat_part"

    def __init__(self, k, axis):
        super().__init__(k=k, axis=axis)
        self.k, self.axis = k, axis

    def infer_shape(self, g_shape, *shapes):
        return shapes[self.k]

    def infer_dtype(self, g_dtype, *dtypes):
        return g_dtype

    def compute(self, xp, g, *xs):
        start = sum(x.shape[self.axis] for x in xs[: self.k])
        index = [slice(None)] * g.ndim
        index[self.axis] = slice(start, start + xs[self.k].shape[self.axis])
        return g[tuple(index)]

    def gradient(self, node, gg, needs):
        xs = node.inputs[1:]
        parts = [gg if j == self.k else zeros_like(x) for j, x in enumerate(xs)]
        return [apply(Concat(self.axis), *parts)] + [None] * len(xs)

    def jvp(self, node, dg, *dxs):
        return None if dg is None else apply(self, dg, *node.inputs[1:])


def _freeze_index(index):
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    for i in index:
        if isinstance(i, Node):
            raise TypeError("indexing with a node is not supported; use take(x, indices)")
        if isinstance(i, (list, np.ndarray)):
            i = np.asarray(i)
            if i.dtype == bool:
                raise TypeError("boolean-mask indexing is not supported; use where(mask, x, 0)")
        out.append(i)
    return tuple(out)


def _index_repr(index) -> str:
    def one(i):
        if isinstance(i, slice):
            parts = ["" if v is None else str(v) for v in (i.start, i.stop, i.step)]
            return ":".join(parts[:2] if i.step is None else parts)
        if i is Ellipsis:
            return "..."
        if i is None:
            return "None"
        return str(i.tolist()) if isinstance(i, np.ndarray) else str(i)

    return ", ".join(one(i) for i in index)


class GetItem(Op):
    """Basic and integer-array indexing, ``x[index]``."""

    name = "getitem"

    def written(self, args):
        return f"{args[0]}{self.label()}"

    def __init__(self, index):
        super().__init__()
        self.index = _freeze_index(index)

    def key(self):
        return (GetItem, _index_repr(self.index))

    def label(self):
        return f"[{_index_repr(self.index)}]"

    def infer_shape(self, shape):
        return _shapes.indexed_shape(shape, self.index)

    def accesses(self, out_shape, in_shape):
        """Basic indexing is a view (no traffic); an integer-array index gathers a copy."""
        if any(isinstance(i, np.ndarray) for i in self.index):
            n = math.prod(out_shape)
            return (n,), n
        return (0,), 0

    def compute(self, xp, x):
        return x[self.index]

    def gradient(self, node, g, needs):
        return [apply(ScatterLike(self), g, node.inputs[0])]

    def jvp(self, node, dx):
        return None if dx is None else apply(self, dx)


class ScatterLike(Op):
    """Zeros shaped like ``like`` with ``g`` added at the indexed places (getitem's adjoint)."""

    name = "scatter"

    def __init__(self, getitem: GetItem):
        super().__init__()
        self.getitem = getitem
        self.basic = not any(isinstance(i, np.ndarray) for i in getitem.index)

    def key(self):
        return (ScatterLike, self.getitem.key())

    def label(self):
        return f"scatter[{_index_repr(self.getitem.index)}]"

    def infer_shape(self, g_shape, like_shape):
        return like_shape

    def infer_dtype(self, g_dtype, like_dtype):
        return g_dtype

    def compute(self, xp, g, like):
        out = xp.zeros(like.shape, dtype=g.dtype)
        if self.basic:
            out[self.getitem.index] = g
        else:
            scatter_add(xp, out, self.getitem.index, g)
        return out

    def gradient(self, node, gg, needs):
        return [apply(self.getitem, gg), None]

    def jvp(self, node, dg, dlike):
        return None if dg is None else apply(self, dg, node.inputs[1])


class Take(Op):
    """Rows of ``table`` picked by integer ``indices`` (an embedding lookup)."""

    name = "take"

    def infer_shape(self, table_shape, index_shape):
        if table_shape is None or index_shape is None:
            return None
        return tuple(index_shape) + tuple(table_shape[1:])

    def infer_dtype(self, table_dtype, index_dtype):
        if index_dtype is not None and index_dtype.kind not in "iu":
            raise ValueError(f"take needs integer indices, got dtype {index_dtype}")
        return table_dtype

    def compute(self, xp, table, indices):
        _shapes.check_ids(indices, table.shape[0], f"the table has {table.shape[0]} rows")
        return xp.take(table, indices, axis=0)

    def gradient(self, node, g, needs):
        table, indices = node.inputs
        return [apply(TakeAdjoint(), g, indices, table), None]

    def jvp(self, node, dtable, dindices):
        return None if dtable is None else apply(self, dtable, node.inputs[1])


class TakeAdjoint(Op):
    """Zeros shaped like ``table`` with each row of ``g`` added to its index's row."""

    name = "take_adjoint"

    def infer_shape(self, g_shape, index_shape, table_shape):
        return table_shape

    def infer_dtype(self, g_dtype, index_dtype, table_dtype):
        return g_dtype

    def compute(self, xp, g, indices, table):
        _shapes.check_ids(indices, table.shape[0], f"the table has {table.shape[0]} rows")
        out = xp.zeros(table.shape, dtype=g.dtype)
        scatter_add(xp, out, indices, g)
        return out

    def gradient(self, node, gg, needs):
        return [apply(Take(), gg, node.inputs[1]), None, None]

    def jvp(self, node, dg, dindices, dtable):
        return None if dg is None else apply(self, dg, *node.inputs[1:])


# -- public functions -----------------------------------------------------------------------
def reshape(x, shape) -> Node:
    """A node with the same elements in ``shape`` (one -1 allowed)."""
    return apply(Reshape(shape), x)


def reshape_like(x, like) -> Node:
    """Reshape ``x`` to the shape of the node ``like``."""
    if like.shape is not None and None not in like.shape:
        return x if x.shape == like.shape else apply(Reshape(like.shape), x)
    return apply(ReshapeLike(), x, like)


def permute(x, *axes) -> Node:
    """Reorder the axes of ``x`` (``permute(x, 1, 0)`` or ``permute(x, (1, 0))``)."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    return apply(Permute(axes or None), x)


def transpose(x, axes=None) -> Node:
    """Reverse the axes of ``x`` (or permute them by ``axes``), like ``numpy.transpose``."""
    return apply(Permute(axes), x)


def matrix_transpose(x) -> Node:
    """Swap the last two axes."""
    return apply(SwapLastAxes(), x)


def broadcast_to(x, shape) -> Node:
    """View ``x`` broadcast to ``shape``."""
    return apply(BroadcastTo(shape), x)


def broadcast_like(x, like) -> Node:
    """Broadcast ``x`` to the shape of the node ``like``."""
    if like.shape is not None and None not in like.shape:
        return x if x.shape == like.shape else apply(BroadcastTo(like.shape), x)
    return apply(BroadcastToLike(), x, like)


def concat(xs, axis=0) -> Node:
    """Join nodes along ``axis``."""
    xs = list(xs)
    if not xs:
        raise ValueError("concat needs at least one node")
    return xs[0] if len(xs) == 1 else apply(Concat(axis), *xs)


def split(x, sections, axis=0) -> list[Node]:
    """Split ``x`` along ``axis`` into ``sections`` equal parts or at the given sizes."""
    axis = params.integer(axis, f"split of {x.name}: axis")
    if x.shape is not None and not -len(x.shape) <= axis < len(x.shape):
        raise ShapeError(f"split of {x.name}: axis {axis} is out of range for shape {x.shape}")
    size = None if x.shape is None else x.shape[axis]
    if isinstance(sections, numbers.Integral) and not isinstance(sections, (bool, np.bool_)):
        if size is None:
            raise ShapeError(f"split of {x.name}: the size along axis {axis} must be known")
        if sections < 1 or size % sections:
            raise ShapeError(f"split of {x.name}: {size} is not divisible into {sections} parts")
        sizes = [size // sections] * sections
    else:
        sizes = list(params.shape(sections, f"split of {x.name}: sizes"))
        if size is not None and sum(sizes) != size:
            raise ShapeError(
                f"split of {x.name}: sizes {sizes} add up to {sum(sizes)}, but axis {axis} "
                f"has {size} elements"
            )
    parts, start = [], 0
    for n in sizes:
        index = [slice(None)] * (axis % len(x.shape) if x.shape is not None else axis)
        parts.append(getitem(x, (*index, slice(start, start + n))))
        start += n
    return parts


def getitem(x, index) -> Node:
    """``x[index]`` with integers, slices (any step), None, ``...`` or integer arrays."""
    return apply(GetItem(index), x)


def take(table, indices) -> Node:
    """``table[indices]`` along axis 0 for an integer node or array ``indices``."""
    return apply(Take(), table, indices)
