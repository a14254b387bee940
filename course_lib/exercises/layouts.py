"""Notebook 05: strides and memory layout, checked against NumPy on random layouts.

NumPy is the oracle: an ``int8`` array's byte strides are element strides, ``transpose``
permutes a layout, and ``reshape`` returns a view exactly when no copy is needed.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .core import Mistake, Wrong, call, exercise, require

COLUMN_MAJOR = Mistake(
    "column-major",
    "these are column-major strides (the first axis moves fastest). Row major keeps the LAST "
    "axis contiguous: strides[k] is the product of shape[k+1:], so the last stride is 1.",
)
BYTES = Mistake(
    "bytes",
    "those are byte strides, as NumPy's .strides reports them; the lecture counts elements "
    "(divide by the item size).",
)
INCLUSIVE = Mistake(
    "inclusive-product",
    "strides[k] multiplies the sizes of the axes AFTER k, not shape[k] itself: one step along "
    "axis k skips one whole block of the later axes.",
)
REVERSED = Mistake(
    "reversed",
    "the strides come out in reverse order: strides[0] belongs to axis 0, the slowest one.",
)
OVERFLOW = Mistake(
    "overflow",
    "a stride wrapped around: the product overflowed a 32-bit integer (np.cumprod or np.prod "
    "with dtype=np.int32, or an int32 array of the shape, holds at most 2**31 − 1). Multiply "
    "Python ints (math.prod, or a loop), which never overflow, or use dtype=np.int64.",
)
MAKES_AN_ARRAY = Mistake(
    "makes-an-array",
    "compute the strides from the shape alone (products of the later axes' lengths), without "
    "making an array of that shape to read NumPy's .strides: a shape can describe far more "
    "elements than fit in memory.",
)

#: NumPy's own ways to lay out memory (views with given strides, broadcasting): the notebook's
#: exercises on strides ask for that arithmetic, so their answers must not call these.
NUMPY_LAYOUTS = (
    "numpy.lib.stride_tricks.as_strided",
    "numpy.lib.stride_tricks.sliding_window_view",
    "numpy.broadcast_to",
    "numpy.broadcast_arrays",
    "numpy.broadcast_shapes",
)
_HUGE = (1 << 20, 1 << 21, 1 << 21)  # 2**62 elements: no array of this shape fits in memory


def _element_strides(array: np.ndarray) -> tuple[int, ...]:
    return tuple(s // array.itemsize for s in array.strides)


def _ints(value, length: int) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) == length
        and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value)
    )


def _random_shapes(rng, count: int, max_dim: int) -> list[tuple[int, ...]]:
    return [
        tuple(int(d) for d in rng.integers(1, max_dim + 1, rng.integers(1, 7)))
        for _ in range(count)
    ]


@exercise(
    "05.contiguous_strides", "contiguous_strides(shape) -> tuple: row-major strides in elements",
    mistakes=(COLUMN_MAJOR, BYTES, INCLUSIVE, REVERSED, OVERFLOW, MAKES_AN_ARRAY),
    forbidden=("course_lib.strides.row_major_strides", "course_lib.strides.col_major_strides",
               "course_lib.strides.StridedView", *NUMPY_LAYOUTS, "numpy.ndarray.reshape",
               "numpy.reshape"),  # fmt: skip
)
def check_contiguous_strides(answer) -> str:
    edges = [(), (1,), (5,), (1, 1, 1), (1, 2, 3, 4), (7, 1, 3), _HUGE]
    shapes = edges + _random_shapes(np.random.default_rng(5), 149, 7)  # 156 in all
    errors = [(MemoryError, "", MAKES_AN_ARRAY), (ValueError, "array is too big", MAKES_AN_ARRAY)]
    for shape in shapes:
        label = f"contiguous_strides({shape})"
        got = call(label, answer, shape, errors=errors)
        require(
            _ints(got, len(shape)),
            f"{label} returned {got!r}; it must return a tuple of {len(shape)} ints",
        )
        want = _strides_of(shape, "C")
        if tuple(got) != want:
            raise Wrong(
                f"{label} returned {got}, expected {want}", _strides_mistake(shape, got, want)
            )
    return f"right on {len(shapes)} shapes: random ones of up to 6 axes, (), and axes of length 1"


def _strides_of(shape: tuple, order: str) -> tuple[int, ...]:
    """NumPy's element strides of a contiguous array of ``shape`` (``order`` "C" or "F"); the
    same products written out for a shape too large to allocate."""
    if math.prod(shape) >= math.prod(_HUGE):
        sizes = shape if order == "C" else shape[::-1]
        strides = tuple(math.prod(sizes[k + 1 :]) for k in range(len(sizes)))
        return strides if order == "C" else strides[::-1]
    return _element_strides(np.empty(shape, np.int8, order=order))


def _strides_mistake(shape, got, want) -> Mistake | None:
    got = tuple(int(g) for g in got)
    if got == _strides_of(shape, "F"):
        return COLUMN_MAJOR
    if any(got == tuple(size * w for w in want) for size in (2, 4, 8)):
        return BYTES
    if got == tuple(int(np.prod(shape[k:])) for k in range(len(shape))):
        return INCLUSIVE
    if got == want[::-1]:
        return REVERSED
    if got == tuple((w + 2**31) % 2**32 - 2**31 for w in want):  # as int32 arithmetic wraps
        return OVERFLOW
    return None


# -- permuted ---------------------------------------------------------------------------------
INVERSE = Mistake(
    "inverse-permutation",
    "that is the inverse permutation: axis i of the result is axis axes[i] of the input, so "
    "new_shape[i] = shape[axes[i]] (not new_shape[axes[i]] = shape[i]).",
)
STRIDES_KEPT = Mistake(
    "strides-not-permuted",
    "the shape is permuted but the strides are not: each stride travels with its axis.",
)
SHAPE_KEPT = Mistake(
    "shape-not-permuted",
    "the strides are permuted but the shape is not: each size travels with its axis.",
)
UNCHANGED = Mistake(
    "unchanged",
    "the layout comes back as it was: permute both tuples, new_shape[i] = shape[axes[i]] and "
    "new_strides[i] = strides[axes[i]].",
)
FRESH = Mistake(
    "fresh-strides",
    "those are new contiguous strides for the permuted shape, i.e. a copy. A permute is a view: "
    "the numbers stay where they are, so the strides are the old ones, reordered.",
)
LAYOUT_ARRAY = Mistake(
    "makes-an-array",
    "permute the two tuples themselves, without making a NumPy array of the layout to transpose "
    "(np.empty, np.ndarray): a layout can describe far more elements than fit in memory. "
    "Transposing a small helper array of your own (shape and strides side by side) is fine.",
)


def _layout(shape, strides) -> np.ndarray:
    """An int8 array with this layout (metadata only: nothing is ever read from it)."""
    return as_strided(np.zeros(1, np.int8), shape, strides, writeable=False)


def _permute_cases(rng) -> list[tuple]:
    cases = [
        ((), (), ()),
        ((3,), (1,), (0,)),
        ((2, 3, 4), (12, 4, 1), (2, 0, 1)),
        ((4, 3), (0, -1), (1, 0)),
        ((2, 0, 5), (5, 5, 1), (1, 2, 0)),
        (_HUGE, (-(1 << 42), 1 << 21, 1), (2, 0, 1)),
    ]
    for _ in range(120):
        ndim = int(rng.integers(1, 6))
        shape = tuple(int(d) for d in rng.integers(0, 6, ndim))
        strides = tuple(int(s) for s in rng.integers(-20, 21, ndim))
        cases.append((shape, strides, tuple(int(a) for a in rng.permutation(ndim))))
    return cases


@exercise(
    "05.permuted", "permuted(shape, strides, axes) -> (shape, strides) of the permuted view",
    mistakes=(INVERSE, STRIDES_KEPT, SHAPE_KEPT, UNCHANGED, FRESH, LAYOUT_ARRAY),
    # NumPy's transposes stay allowed on any array (``table.T`` could not be told apart from
    # ``table.transpose()``); an array of the layout itself fails on the huge one
    forbidden=("course_lib.strides.StridedView.permute",
               "course_lib.strides.StridedView.transpose", *NUMPY_LAYOUTS),  # fmt: skip
)
def check_permuted(answer) -> str:
    cases = _permute_cases(np.random.default_rng(6))
    errors = [(MemoryError, "", LAYOUT_ARRAY), (ValueError, "array is too big", LAYOUT_ARRAY),
              (ValueError, "strides is incompatible", LAYOUT_ARRAY)]  # fmt: skip
    for shape, strides, axes in cases:
        label = f"permuted({shape}, {strides}, {axes})"
        got = call(label, answer, shape, strides, axes, errors=errors)
        require(
            isinstance(got, tuple | list) and len(got) == 2  # the pair, as a list too
            and all(_ints(g, len(shape)) for g in got),
            f"{label} returned {got!r}; it must return (shape, strides), two tuples of ints",
        )
        view = _layout(shape, strides).transpose(axes)
        want = (view.shape, _element_strides(view))
        got = (tuple(map(int, got[0])), tuple(map(int, got[1])))
        if got != want:
            raise Wrong(
                f"{label} returned {got}, expected {want}",
                _permute_mistake(shape, strides, axes, got, want),
            )
    return (
        f"right on {len(cases)} layouts: random permutations, negative and zero strides, 0-d, "
        "one far larger than memory"
    )


def _permute_mistake(shape, strides, axes, got, want) -> Mistake | None:
    inverse = tuple(int(a) for a in np.argsort(axes))
    fresh = _strides_of(want[0], "C")
    wrong = {
        INVERSE: (tuple(shape[a] for a in inverse), tuple(strides[a] for a in inverse)),
        STRIDES_KEPT: (want[0], tuple(strides)),
        SHAPE_KEPT: (tuple(shape), want[1]),
        UNCHANGED: (tuple(shape), tuple(strides)),
        FRESH: (want[0], fresh),
    }
    return next((m for m, value in wrong.items() if got == value), None)


# -- can_view ---------------------------------------------------------------------------------
ALWAYS_VIEW = Mistake(
    "always-a-view",
    "not every layout can be regrouped: a transpose lists the numbers out of memory order, and "
    "flattening it must copy. Merging axes k and k+1 is a view only when strides[k] == "
    "strides[k+1] * shape[k+1].",
)
ONLY_CONTIGUOUS = Mistake(
    "only-contiguous",
    "non-contiguous layouts can be views too: a[:, ::2] flattens without a copy (evenly spaced), "
    "and splitting an axis is always a view. Test, for each group of axes that merges, whether it "
    "is evenly spaced: strides[k] == strides[k+1] * shape[k+1].",
)
LENGTH_ONE = Mistake(
    "length-one-axes",
    "your answer is wrong only for layouts with axes of length 1. Such an axis is never stepped "
    "along, so its stride does not matter: drop those axes first.",
)
EMPTY = Mistake(
    "empty",
    "your answer is wrong only for arrays without elements: with nothing to copy, any reshape "
    "is a view.",
)
NEGATIVE = Mistake(
    "negative-strides",
    "your answer is wrong only for layouts with negative strides (reversed axes, a[::-1]): "
    "the test strides[k] == strides[k+1] * shape[k+1] holds for negative numbers too; do not "
    "take absolute values or assume strides are positive.",
)


def _view_cases(rng) -> list[tuple[np.ndarray, tuple[int, ...]]]:
    """Real NumPy views of random layouts, each with a new shape of the same size."""
    m = np.arange(12.0).reshape(3, 4)
    cases = [
        (m, (12,)),
        (m.T, (12,)),
        (m[:, ::2], (6,)),
        (m[:, :2], (6,)),
        (m[::-1], (12,)),
        (m[::-1], (3, 2, 2)),
        (np.broadcast_to(m[:1], (4, 4)), (16,)),
        (np.broadcast_to(m[:1], (4, 4)), (2, 2, 4)),
        (np.array(1.0), (1, 1)),
        (m[1:2, :3], (3,)),
        (m.T[:, None, :], (2, 2, 1, 3)),
        (m[:0], (4, 0)),
        (m.T[:0], (0, 3)),
    ]
    while len(cases) < 300:
        view = _random_view(rng)
        cases.append((view, _random_new_shape(rng, view.shape)))
    return cases


def _random_view(rng) -> np.ndarray:
    shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(1, 4)))
    view = np.arange(float(np.prod(shape))).reshape(shape)
    view = view.transpose(rng.permutation(view.ndim)) if rng.random() < 0.6 else view
    steps = [int(rng.choice([1, 1, 2, -1, -2])) for _ in range(view.ndim)]
    view = view[tuple(slice(None, None, s) for s in steps)]
    if rng.random() < 0.3:  # a new axis of length 1 (stride 0), maybe broadcast to length 3
        axis = int(rng.integers(0, view.ndim + 1))
        view = np.expand_dims(view, axis)
        if rng.random() < 0.5:
            view = np.broadcast_to(view, view.shape[:axis] + (3,) + view.shape[axis + 1 :])
    return view


def _random_new_shape(rng, shape) -> tuple[int, ...]:
    dims = list(shape)
    for _ in range(int(rng.integers(1, 4))):
        if len(dims) > 1 and rng.random() < 0.8:  # merge two neighbouring axes
            k = int(rng.integers(0, len(dims) - 1))
            dims[k : k + 2] = [dims[k] * dims[k + 1]]
        else:  # split an axis in two, or put an axis of length 1 in front of it
            k = int(rng.integers(0, len(dims)))
            factor = next((f for f in (2, 3) if dims[k] % f == 0 and dims[k] > f), 1)
            dims[k : k + 1] = [factor, dims[k] // factor]
    return tuple(dims)


def _numpy_can_view(view: np.ndarray, new_shape) -> bool:
    return view.size == 0 or np.shares_memory(view.reshape(new_shape), view)


@exercise(
    "05.can_view", "can_view(shape, strides, new_shape) -> bool: is the reshape a view?",
    mistakes=(ALWAYS_VIEW, ONLY_CONTIGUOUS, LENGTH_ONE, EMPTY, NEGATIVE),
    forbidden=("course_lib.strides.StridedView.reshape", "course_lib.strides._reshape_strides",
               *NUMPY_LAYOUTS, "numpy.ndarray.reshape", "numpy.reshape", "numpy.shares_memory",
               "numpy.may_share_memory"),  # fmt: skip
)
def check_can_view(answer) -> str:
    cases = _view_cases(np.random.default_rng(7))
    wrong = []
    for view, new_shape in cases:
        args = (view.shape, _element_strides(view), new_shape)
        label = f"can_view{args}"
        got = call(label, answer, *args)
        require(
            isinstance(got, bool | np.bool_),
            f"{label} returned {got!r}; it must return True or False",
        )
        if bool(got) != _numpy_can_view(view, new_shape):
            wrong.append((view, label, bool(got)))
    if wrong:
        _, label, got = wrong[0]
        numpy = "must copy" if got else "makes a view"
        raise Wrong(
            f"{label} returned {got}, but NumPy {numpy} there "
            f"({len(wrong)} of {len(cases)} layouts wrong)",
            _can_view_mistake(cases, wrong),
        )
    return (
        f"agrees with NumPy on {len(cases)} layouts: transposes, slices with steps, "
        "broadcast axes (stride 0), reversed axes, axes of length 1, empty and 0-d arrays"
    )


def _can_view_mistake(cases, wrong) -> Mistake | None:
    views, said_view = [v for v, _, _ in wrong], [got for _, _, got in wrong]
    if all(said_view) and len(wrong) == sum(not _numpy_can_view(v, s) for v, s in cases):
        return ALWAYS_VIEW
    for mistake, feature in _FEATURES:
        if all(feature(v) for v in views):
            return mistake
    if not any(said_view) and not any(_contiguous(v) for v in views):
        return ONLY_CONTIGUOUS
    return None


def _contiguous(view: np.ndarray) -> bool:
    """Strictly row-major (NumPy's flag overlooks the strides of axes of length 1)."""
    return _element_strides(view) == _element_strides(np.empty(view.shape, np.int8))


_FEATURES = (
    (EMPTY, lambda v: v.size == 0),
    (LENGTH_ONE, lambda v: 1 in v.shape),
    (NEGATIVE, lambda v: min(v.strides, default=0) < 0),
)
