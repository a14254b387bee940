"""Notebook 05's assignment: add two strided views, broadcasting with stride 0.

``05.add_views`` is checked against NumPy on random layouts (transposed, sliced with steps,
reversed, starting at an offset into a larger buffer), elements of 2, 4 and 8 bytes and random
broadcastable shapes, must return NumPy's dtype for the sum, must leave the views' buffers as
they were, and must refuse shapes that do not broadcast. The answer reads only ``buffer``,
``shape``, ``strides`` and ``offset``: the views' own ways to read elements are forbidden.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..strides import StridedView
from .core import CHANGED_INPUT, Mistake, Wrong, call, exercise, require
from .layouts import NUMPY_LAYOUTS

LEFT_ALIGNED = Mistake(
    "left-aligned",
    "broadcasting lines the shapes up from the RIGHT: (3,) with (2, 3) pairs 3 with 3, and a "
    "missing leading axis counts as an axis of length 1.",
)
NO_STRIDE_ZERO = Mistake(
    "stretched-with-its-stride",
    "an axis of length 1 that is stretched must not move through memory: give it stride 0 "
    "(with its own stride, index i > 0 reads elements that are not the view's).",
)
IGNORES_OFFSET = Mistake(
    "ignores-offset",
    "a view starts .offset elements into its buffer: element [i, j, ...] is at "
    "offset + i·strides[0] + j·strides[1] + ...",
)
ACCEPTS_MISMATCH = Mistake(
    "accepts-mismatch",
    "shapes such as (2, 3) and (4, 3) do not broadcast (2 against 4, neither is 1): raise "
    "ValueError.",
)
COLUMN_MAJOR_OUT = Mistake(
    "column-major-out",
    "the result holds the sums in row-major order: out[i, j, ...] = a[i, j, ...] + b[i, j, ...], "
    "last index fastest.",
)
RESULT_SHAPE = Mistake(
    "result-shape",
    "return the sums in the broadcast shape (the shapes lined up from the right, each axis the "
    "length that is not 1, so 1 against 0 is 0, not 1; () for two 0-d views): no .ravel() or "
    ".flatten() at the end, and no np.ascontiguousarray, which turns a 0-d array into shape (1,).",
)

DTYPE = Mistake(
    "dtype",
    "return the inputs' dtype: make the result with np.empty(shape, dtype=np.result_type("
    "a.buffer, b.buffer)), not a default or a smaller float (float32 rounds every sum).",
)
NUMPY_SCALAR = Mistake(
    "numpy-scalar",
    "adding two 0-d views gives a NumPy scalar (np.float64), not an array: wrap the result, "
    "np.array(total), to return a 0-d array of shape ().",
)


def _gather(view: StridedView, shape: tuple, strides: tuple, offset: int) -> np.ndarray | None:
    """The elements at ``offset + Σ index·strides`` for every index of ``shape`` (row major),
    or None when one lies outside the buffer."""
    index = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), np.int64)
    where = offset + np.tensordot(np.asarray(strides, dtype=np.int64), index, axes=1)
    if where.size and (where.min() < 0 or where.max() >= view.buffer.size):
        return None
    return view.buffer[where].reshape(shape)


def _stretched(view: StridedView, shape: tuple, zero: bool = True) -> tuple:
    """The view's strides on the broadcast ``shape``: stride 0 on new leading axes and on
    stretched axes of length 1 (``zero=False`` keeps a stretched axis's own stride)."""
    new = len(shape) - len(view.shape)
    return (0,) * new + tuple(
        0 if zero and n == 1 and m != 1 else s
        for n, m, s in zip(view.shape, shape[new:], view.strides)
    )


def _sum(a, b, shape, zero: bool = True, offsets: bool = True):
    parts = [
        _gather(v, shape, _stretched(v, shape, zero), v.offset if offsets else 0) for v in (a, b)
    ]
    return None if any(p is None for p in parts) else parts[0] + parts[1]


def _view(rng, shape: tuple, dtype=np.float64, reverse: bool = False) -> StridedView:
    """A view of ``shape`` inside a larger array: every other row or column, maybe transposed,
    starting past the buffer's first elements; ``reverse``: every axis walked backwards
    (negative strides)."""
    steps = [int(rng.integers(1, 3)) for _ in shape]
    transpose = len(shape) > 1 and rng.random() < 0.5
    inner = tuple(reversed(shape)) if transpose else shape
    inner_steps = tuple(reversed(steps)) if transpose else tuple(steps)
    parent_shape = tuple(n * s + 1 for n, s in zip(inner, inner_steps))
    parent = rng.standard_normal(parent_shape).round(3)
    parent = (parent * 100 if np.dtype(dtype).kind in "iu" else parent).astype(dtype)
    view = parent[tuple(slice(1, None, s) for s in inner_steps)]
    view = view[tuple(slice(0, n) for n in inner)]
    view = view.T if transpose else view
    return StridedView.from_numpy(view[(slice(None, None, -1),) * view.ndim] if reverse else view)


def operand_shape(rng, shape: tuple) -> tuple:
    """``shape`` with some leading axes dropped and some axes set to 1."""
    kept = shape[int(rng.integers(0, len(shape) + 1)):]
    return tuple(1 if rng.random() < 0.3 else n for n in kept)


def _cases(rng) -> list[tuple]:
    fixed = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)), ((3,), (2, 1, 3)), ((1,), (4,)),
             ((), (2, 2)), ((2, 1, 4), (3, 1))]  # fmt: skip
    cases = [(_view(rng, x), _view(rng, y)) for x, y in fixed]
    for _ in range(20):
        shape = tuple(int(n) for n in rng.integers(1, 5, rng.integers(1, 4)))
        cases.append((_view(rng, operand_shape(rng, shape)),
                      _view(rng, operand_shape(rng, shape))))  # fmt: skip
    return cases


def _reversed_and_narrow_cases() -> list[tuple]:
    """Views with negative strides, elements of 2 and 4 bytes (the sum's dtype is NumPy's:
    int16 + int16 stays int16, int16 + float32 is float32), and empty axes (a length 1
    broadcast against 0 gives 0, not the larger length)."""
    rng = np.random.default_rng(51)
    f8, f4, i2 = np.float64, np.float32, np.int16
    pairs = [(((2, 3), f8, True), ((3,), f8, True)), (((4, 1), f8, True), ((1, 5), f8, False)),
             (((2, 1, 3), i2, False), ((3, 1), i2, True)), (((3,), i2, True), ((2, 3), f4, False)),
             (((), f4, False), ((), f4, False)), (((0,), f8, False), ((1,), f8, False)),
             (((2, 1), f8, False), ((0,), f8, True))]  # fmt: skip
    return [tuple(_view(rng, *operand) for operand in pair) for pair in pairs]


def _broadcast_shape(a: tuple, b: tuple) -> tuple:
    return tuple(np.broadcast_shapes(a, b))


def _describe(view: StridedView) -> str:
    return f"shape {view.shape}, strides {view.strides}, offset {view.offset}"


def _mistake(a, b, got, want) -> Mistake | None:
    shape = want.shape
    if np.shape(got) != shape:
        return RESULT_SHAPE
    for mistake, wrong in ((NO_STRIDE_ZERO, _sum(a, b, shape, zero=False)),
                           (IGNORES_OFFSET, _sum(a, b, shape, offsets=False))):  # fmt: skip
        if wrong is not None and np.array_equal(got, wrong):
            return mistake
    if np.array_equal(np.ravel(got), want.ravel(order="F")) or np.array_equal(
            np.ravel(got, order="F"), want.ravel()):  # fmt: skip
        return COLUMN_MAJOR_OUT
    return None


def _check_sum(answer, a, b) -> None:
    label = f"add_views(a: {_describe(a)}; b: {_describe(b)})"
    shape = _broadcast_shape(a.shape, b.shape)
    left_aligned = len(a.shape) != len(b.shape)
    stretched = any(s != 0 for v in (a, b) for s, t in zip(_stretched(v, shape, False),
                                                           _stretched(v, shape)) if s != t)
    errors = [(ValueError, "", LEFT_ALIGNED if left_aligned else None),
              (IndexError, "", RESULT_SHAPE if 0 in shape  # (1,) with (0,): an element too many
               else NO_STRIDE_ZERO if stretched else None)]  # fmt: skip
    want = _sum(a, b, shape)  # before the call: an answer that writes to a buffer changes it
    buffers = [(name, v.buffer, v.buffer.copy()) for name, v in zip("ab", (a, b))]
    got = call(label, answer, a, b, errors=errors)
    for name, buffer, copy in buffers:
        require(np.array_equal(buffer, copy), f"{label} changed the buffer of {name} in place",
                CHANGED_INPUT)  # fmt: skip
    if isinstance(got, np.generic):
        raise Wrong(f"{label} returned a NumPy scalar ({type(got).__name__}), not an array; it "
                    f"must return a new NumPy array of shape {shape}",
                    NUMPY_SCALAR if shape == () else RESULT_SHAPE)  # fmt: skip
    require(isinstance(got, np.ndarray), f"{label} returned {type(got).__name__}; it must "
            "return a new NumPy array")  # fmt: skip
    right = got.shape == shape and np.array_equal(got, want)
    if got.shape == shape and got.dtype != want.dtype:  # even where the values agree
        what = "" if right else f": it is wrong at {_first_difference(got, want)}"
        raise Wrong(f"{label}: the result is {got.dtype}, NumPy's sum {want.dtype}{what}", DTYPE)
    if not right:
        what = (f"has shape {got.shape}, expected {shape}" if got.shape != shape
                else f"is wrong at {_first_difference(got, want)}")  # fmt: skip
        raise Wrong(f"{label}: the result {what}", _mistake(a, b, got, want))
    require(not np.shares_memory(got, a.buffer) and not np.shares_memory(got, b.buffer),
            f"{label} returned memory of an input; return a new array")  # fmt: skip


_RAISED_VALUE_ERROR = Mistake("raised-value-error", "")  # what a mismatch should do


def _check_refused(answer, a, b) -> None:
    label = f"add_views(a: shape {a.shape}, b: shape {b.shape})"
    try:
        call(label, answer, a, b, errors=[(ValueError, "", _RAISED_VALUE_ERROR)])
    except Wrong as wrong:
        if wrong.mistake is _RAISED_VALUE_ERROR:
            return
        raise Wrong(f"{wrong.message}; these shapes do not broadcast: raise ValueError",
                    ACCEPTS_MISMATCH) from None  # fmt: skip
    raise Wrong(f"{label} returned a result; these shapes do not broadcast", ACCEPTS_MISMATCH)


def _first_difference(got, want) -> str:
    index = next(i for i in itertools.product(*map(range, want.shape))
                 if got[i] != want[i])  # fmt: skip
    return f"{index}: {got[index]} instead of {want[index]}"


@exercise(
    "05.add_views",
    "add_views(a, b) -> ndarray: a + b for two StridedViews, broadcast with stride 0",
    mistakes=(LEFT_ALIGNED, NO_STRIDE_ZERO, IGNORES_OFFSET, ACCEPTS_MISMATCH, COLUMN_MAJOR_OUT,
              RESULT_SHAPE, DTYPE, NUMPY_SCALAR),  # fmt: skip
    points=5.0,
    forbidden=(*(f"course_lib.strides.StridedView.{name}" for name in (
        "to_numpy", "compact", "__getitem__", "broadcast_to", "element_offsets",
        "index_to_offset", "reshape", "permute", "transpose")),
        "course_lib.ops.broadcast.broadcast_shapes", *NUMPY_LAYOUTS),  # fmt: skip
)
def check_add_views(answer) -> str:
    rng = np.random.default_rng(50)
    cases = _cases(rng)
    for a, b in cases:
        _check_sum(answer, a, b)
    for x, y in [((2, 3), (4, 3)), ((3,), (4,)), ((2, 1), (3, 4, 5))]:
        _check_refused(answer, _view(rng, x), _view(rng, y))
    later = _reversed_and_narrow_cases()  # after the refusals: earlier mistakes keep hints
    for a, b in later:
        _check_sum(answer, a, b)
    return (
        f"right on {len(cases) + len(later)} pairs of views (transposed, every other element, "
        "reversed, offsets, stretched axes, new leading axes, empty axes, int16 and float32) and "
        "refuses 3 pairs that do not broadcast"
    )
