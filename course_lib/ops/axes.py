"""Axis and index arithmetic shared by the op families: which axes an ``axis`` argument
names, the shape left after reducing or indexing (``None`` where unknown), and
:func:`as_array` for inputs that may be numbers (integer ids are checked by
:func:`course_lib.params.check_ids`, which the CPU kernels share).

Broadcasting has its own module, :mod:`course_lib.ops.broadcast`.
"""

from __future__ import annotations

import numpy as np

from ..graph import is_static
from ..tables import counted


def as_array(xp, x):
    """``x`` as an array of ``xp``: a plain number (a scalar constant's value, a number seed
    of ``grad`` or ``jvp``) becomes a 0-d array. NumPy's ``sum``, ``reshape``, ``where``...
    take numbers; CuPy's refuse them. Elementwise arithmetic takes numbers everywhere, so
    only the other ops call this, on each input that may be a number."""
    return x if isinstance(x, xp.ndarray) else xp.asarray(x)


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, int or tuple, negatives allowed) as sorted non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for {counted(ndim, 'dimension')}")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axis {axis} repeats an axis")
    return tuple(sorted(out))


def reduced(shape, axis, keepdims: bool):
    """The shape left after reducing ``axis`` of ``shape``."""
    if shape is None:
        return None
    axes = normalize_axes(axis, len(shape))
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def indexed_shape(shape, index):
    """The shape of ``array[index]`` for an array of ``shape``, without allocating it."""
    if not is_static(shape):
        return None
    probe = np.lib.stride_tricks.as_strided(np.zeros(1), shape=shape, strides=(0,) * len(shape))
    return probe[index].shape


def index_on(xp, index: tuple) -> tuple:
    """``index`` (an op's attribute, on the host) for indexing an array of ``xp``: integer
    arrays in it are copied to the device (a GPU array is not indexed by a NumPy array)."""
    if xp is np or not any(isinstance(i, np.ndarray) for i in index):
        return index
    return tuple(xp.asarray(i) if isinstance(i, np.ndarray) else i for i in index)
