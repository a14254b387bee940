"""Static shape arithmetic shared by the op families (``None`` means unknown)."""

from __future__ import annotations

import numpy as np

from ..errors import GraphError, OutOfRangeError


def broadcast(*shapes):
    """NumPy broadcasting of static shapes; ``None`` if any is unknown."""
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


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, int or tuple, negatives allowed) as sorted non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for {ndim} dimensions")
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


def sum_to_axes(from_shape, to_shape):
    """Axes to sum (keepdims) and leading axes to drop to reduce ``from_shape`` to ``to_shape``."""
    lead = len(from_shape) - len(to_shape)
    if lead < 0:
        raise ValueError(f"cannot sum shape {from_shape} to the larger shape {to_shape}")
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(to_shape) if d == 1 and from_shape[lead + i] != 1
    )
    return axes, lead


def sum_to(xp, array, shape):
    """Sum ``array`` over its broadcast axes so that it has ``shape``."""
    shape = tuple(shape)
    if array.shape == shape:
        return array
    axes, lead = sum_to_axes(array.shape, shape)
    out = array.sum(axis=axes, keepdims=True) if axes else array
    return out.reshape(shape)


def indexed_shape(shape, index):
    """The shape of ``array[index]`` for an array of ``shape``, without allocating it."""
    if shape is None or any(d is None for d in shape):
        return None
    probe = np.lib.stride_tricks.as_strided(np.zeros(1), shape=shape, strides=(0,) * len(shape))
    return probe[index].shape


def check_ids(ids, size: int, what: str) -> None:
    """Raise unless ``ids`` are integers in ``[0, size)`` (``what`` says why that range).

    NumPy would read a negative id from the end, so a bad id would silently pick a wrong row
    or class (and a gradient for none)."""
    if getattr(ids, "dtype", np.dtype(float)).kind not in "iu":
        raise GraphError(f"{what}: ids must be integers, got {type(ids).__name__} "
                         f"of dtype {getattr(ids, 'dtype', None)}")  # fmt: skip
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= size)
    if bad.any():
        flat = int(bad.reshape(-1).argmax())
        where = tuple(int(i) for i in np.unravel_index(flat, ids.shape))
        raise OutOfRangeError(
            f"{what}: id {int(ids.reshape(-1)[flat])} at position {where} is outside [0, {size}); "
            "ids count from 0, and negative ids are refused (NumPy would count from the end)"
        )
