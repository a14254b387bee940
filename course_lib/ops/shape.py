"""Shape and view ops: reshape, permute, concat/split, indexing, gather.

Broadcasting (``broadcast_to``, ``sum_to``) has its own module, :mod:`.broadcast`, whose
static-or-run-time target shape ``reshape`` shares.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import params
from ..backend import on_host, scatter_add
from ..errors import GraphError, ParameterError, ShapeError
from ..graph import Node, Op, apply, as_node, is_static
from ..kernels import cpu_kernels
from ..tables import counted
from .axes import as_array, index_on, indexed_shape, normalize_axes
from .broadcast import ToShape, to_shape
from .elementwise import zeros_like


class Reshape(ToShape):
    """The same elements in the target shape (a view when NumPy can make one)."""

    name = "reshape"
    view = True
    minus_one = True

    def static_shape(self, shape):
        if not is_static(shape):  # the size that -1 stands for is unknown too
            return tuple(None if d == -1 else d for d in self.shape)
        size, known = math.prod(shape), math.prod(d for d in self.shape if d != -1)
        if self.shape.count(-1) > 1:
            raise ValueError(f"at most one -1 in the new shape {self.shape}")
        if -1 in self.shape and not known:  # NumPy's rule: any size would do
            raise ValueError(f"cannot reshape {shape} to {self.shape}: the -1 is ambiguous "
                             "where the other sizes multiply to 0")  # fmt: skip
        out = tuple(size // known if d == -1 and known else d for d in self.shape)
        if math.prod(out) != size:
            raise ValueError(f"cannot reshape {shape} ({counted(size, 'element')}) to {self.shape}")
        return out

    def compute(self, xp, x, like=None):
        return xp.reshape(as_array(xp, x), self.target(like))  # x may be a number


Reshape.adjoint = Reshape  # x̄ = reshape(ȳ, to x's shape)


class Permute(Op):
    name = "permute"
    attributes = ("axes",)
    linear = view = True

    def __init__(self, axes=None):
        super().__init__(axes=None if axes is None else params.axes(axes, "permute: axes"))

    def infer_shape(self, shape):
        if shape is None:
            return None
        if self.axes is None:
            return shape[::-1]
        n = len(shape)  # axes in [-n, n), as NumPy takes them
        if sorted(a + n if a < 0 else a for a in self.axes) != list(range(n)):
            raise ValueError(
                f"axes {self.axes} are not a permutation of {counted(len(shape), 'dimension')}"
            )
        return tuple(shape[a] for a in self.axes)

    def compute(self, xp, x):
        return xp.transpose(as_array(xp, x), self.axes)  # x may be a number

    def inverse(self):
        if self.axes is None:
            return self
        n = len(self.axes)
        return Permute(tuple(int(i) for i in np.argsort([a % n for a in self.axes])))

    def gradient(self, node, g, needs):
        return [apply(self.inverse(), g)]


class SwapLastAxes(Op):
    """Swap the last two axes (the matrix transpose of a batch of matrices)."""

    name = "mT"
    linear = view = True

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


class Concat(Op):
    name = "concat"
    attributes = ("axis",)

    def __init__(self, axis=0):
        super().__init__(axis=params.integer(axis, "concat: axis"))

    def infer_shape(self, *shapes):
        if any(s is None for s in shapes):
            return None
        ndim = len(shapes[0])
        axis = normalize_axes(self.axis, ndim)[0]
        if any(len(s) != ndim for s in shapes):
            raise ValueError(f"shapes {shapes} differ in their number of dimensions")
        out = []  # each size outside the axis: the one the known sizes agree on (None: unknown)
        for i, sizes in enumerate(zip(*shapes)):
            known = {d for d in sizes if d is not None}
            if i == axis:
                out.append(None if None in sizes else sum(sizes))
            elif len(known) > 1:
                raise ValueError(f"shapes {shapes} differ outside axis {self.axis}")
            else:
                out.append(known.pop() if known else None)
        return tuple(out)

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
    attributes = ("k", "axis")
    linear = view = True  # a slice of g; the xs lend only their shapes

    def __init__(self, k, axis):
        super().__init__(k=k, axis=axis)

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


def _freeze_index(index):
    if not isinstance(index, tuple):
        index = (index,)
    out = []
    for i in index:
        if isinstance(i, Node):
            raise GraphError(f"getitem: indexing with the node {i.name} is not supported; use "
                             "take(x, indices)")  # fmt: skip
        if isinstance(i, (list, tuple, range, np.ndarray)):  # x[(0, 0),] is x[[0, 0]]: a gather
            i = np.array(i)  # a copy: changing the caller's array later changes nothing here
            i.flags.writeable = False
            if i.dtype == bool:
                raise GraphError(f"getitem: boolean-mask indexing (a mask of shape {i.shape}) is "
                                 "not supported; use where(mask, x, 0)")  # fmt: skip
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


def _gathers(index) -> bool:
    """Whether ``index`` holds an integer array (a gather, which copies) or is basic (a view)."""
    return any(isinstance(i, np.ndarray) for i in index)


class GetItem(Op):
    """Basic and integer-array indexing, ``x[index]``."""

    name = "getitem"
    attributes = ("index",)
    linear = True

    def written(self, args):
        return f"{args[0]}{self.label()}"

    def __init__(self, index):
        super().__init__(index=_freeze_index(index))

    def label(self):
        return f"[{_index_repr(self.index)}]"

    def infer_shape(self, shape):
        return indexed_shape(shape, self.index)

    def accesses(self, out_shape, in_shape):
        """Basic indexing is a view (no traffic); an integer-array index gathers a copy."""
        if _gathers(self.index):
            n = math.prod(out_shape)
            return (n,), n
        return (0,), 0

    def compute(self, xp, x):
        return as_array(xp, x)[index_on(xp, self.index)]  # x may be a number: x[()]

    def gradient(self, node, g, needs):
        return [apply(ScatterLike(self.index), g, node.inputs[0])]


class ScatterLike(Op):
    """Zeros shaped like ``like`` with ``g`` added at the indexed places (getitem's adjoint)."""

    name = "scatter"
    attributes = ("index",)
    linear = True

    def __init__(self, index):
        super().__init__(index=_freeze_index(index))

    def label(self):
        return f"scatter[{_index_repr(self.index)}]"

    def written(self, args):
        return f"scatter[{_index_repr(self.index)}]({args[0]} into {args[1]})"

    def infer_shape(self, g_shape, like_shape):
        return like_shape

    def infer_dtype(self, g_dtype, like_dtype):
        return g_dtype

    def accesses(self, out_shape, g_shape, like_shape):
        """Reads g (``like`` lends only its shape) and writes the whole result."""
        return (math.prod(g_shape), 0), math.prod(out_shape)

    def compute(self, xp, g, like):
        g, like = as_array(xp, g), as_array(xp, like)  # numbers where x[()] is a number
        out = xp.zeros(like.shape, dtype=g.dtype)
        index = index_on(xp, self.index)
        if _gathers(self.index):
            scatter_add(xp, out, index, g)
        else:
            out[index] = g
        return out

    def gradient(self, node, gg, needs):
        return [apply(GetItem(self.index), gg), None]


class Take(Op):
    """Rows of ``table`` picked by integer ``indices`` (an embedding lookup)."""

    name = "take"
    linear = True  # in the table

    def infer_shape(self, table_shape, index_shape):
        if table_shape == ():
            raise ValueError("take picks rows: the table needs at least one axis, got a 0-d one")
        if table_shape is None or index_shape is None:
            return None
        return tuple(index_shape) + tuple(table_shape[1:])

    def infer_dtype(self, table_dtype, index_dtype):
        if index_dtype is not None and index_dtype.kind not in "iu":
            raise ValueError(f"take needs integer indices, got dtype {index_dtype}")
        return table_dtype

    def compute(self, xp, table, indices):
        table, indices = as_array(xp, table), as_array(xp, indices)  # take(table, 2): a number
        if table.ndim == 0:  # a table whose shape was unknown when built
            raise ShapeError("take picks rows: the table needs at least one axis, got a 0-d one")
        params.check_ids(indices, table.shape[0], f"the table has {table.shape[0]} rows")
        return xp.take(table, indices, axis=0)

    def gradient(self, node, g, needs):
        table, indices = node.inputs
        return [apply(TakeAdjoint(), g, indices, table), None]

    def accesses(self, out_shape, table_shape, index_shape):
        """A gather reads the rows it picks (the output's size) and the ids, not the table."""
        return (math.prod(out_shape), math.prod(index_shape)), math.prod(out_shape)


class TakeAdjoint(Op):
    """Zeros shaped like ``table`` with each row of ``g`` added to its index's row."""

    name = "take_adjoint"
    linear = True  # in g

    def infer_shape(self, g_shape, index_shape, table_shape):
        return table_shape

    def infer_dtype(self, g_dtype, index_dtype, table_dtype):
        return g_dtype

    def compute(self, xp, g, indices, table):
        g, indices = as_array(xp, g), as_array(xp, indices)  # numbers for take(vector, 2)
        params.check_ids(indices, table.shape[0], f"the table has {table.shape[0]} rows")
        rows_of_g = len(table.shape) == 2 and g.shape == (*indices.shape, table.shape[1])
        if on_host(xp) and rows_of_g and cpu_kernels.worth_it(g):
            return cpu_kernels.rows_added_at(g, indices, table.shape[0])  # np.add.at's bits
        out = xp.zeros(table.shape, dtype=g.dtype)
        scatter_add(xp, out, indices, g)
        return out

    def accesses(self, out_shape, g_shape, index_shape, table_shape):
        """Reads g and the ids; the table only lends its shape; writes the whole result."""
        return (math.prod(g_shape), math.prod(index_shape), 0), math.prod(out_shape)

    def gradient(self, node, gg, needs):
        return [apply(Take(), gg, node.inputs[1]), None, None]


# -- public functions -----------------------------------------------------------------------
def reshape(x, shape) -> Node:
    """A node with the same elements in ``shape`` (one -1 allowed)."""
    return to_shape(Reshape, x, shape)


def permute(x, *axes) -> Node:
    """Reorder the axes of ``x`` (``permute(x, 1, 0)`` or ``permute(x, (1, 0))``)."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        return apply(Permute(axes[0]), x)  # permute(x, ()) is a 0-d array's permutation
    return apply(Permute(axes or None), x)


def transpose(x, axes=None) -> Node:
    """Reverse the axes of ``x`` (or permute them by ``axes``), like ``numpy.transpose``."""
    return apply(Permute(axes), x)


def matrix_transpose(x) -> Node:
    """Swap the last two axes."""
    return apply(SwapLastAxes(), x)


def concat(xs, axis=0) -> Node:
    """Join nodes along ``axis``."""
    xs = list(xs)
    if not xs:
        raise ParameterError("concat needs at least one node")
    if len(xs) > 1:
        return apply(Concat(axis), *xs)
    x = as_node(xs[0])  # one node is itself, once its axis is checked
    if x.ndim is not None:
        try:
            normalize_axes(params.integer(axis, "concat: axis"), x.ndim)
        except ValueError as exc:
            raise ShapeError(f"concat of {x.name} {x.shape}: {exc}") from None
    return x


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
        if None in sizes:
            raise GraphError(f"split of {x.name}: sizes must be integers, got {sizes}")
        if size is not None and sum(sizes) != size:
            raise ShapeError(
                f"split of {x.name}: sizes {sizes} add up to {sum(sizes)}, but axis {axis} "
                f"has {size} elements"
            )
    if x.shape is None and axis < 0:  # the rank is unknown: count the axes from the end
        lead, trail = [Ellipsis], [slice(None)] * (-axis - 1)
    else:
        lead, trail = [slice(None)] * (axis % len(x.shape) if x.shape is not None else axis), []
    parts, start = [], 0
    for n in sizes:
        parts.append(getitem(x, (*lead, slice(start, start + n), *trail)))
        start += n
    return parts


def getitem(x, index) -> Node:
    """``x[index]`` with integers, slices (any step), None, ``...`` or integer arrays."""
    return apply(GetItem(index), x)


def take(table, indices) -> Node:
    """``table[indices]`` along axis 0 for an integer node or array ``indices``."""
    return apply(Take(), table, indices)
