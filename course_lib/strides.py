"""A tensor from first principles: a flat buffer plus shape, strides and offset.

The element at index ``(i0, i1, ...)`` of a :class:`StridedView` lives at

    buffer[offset + i0 * strides[0] + i1 * strides[1] + ...]

with strides and offset counted in *elements*, as in the lecture (NumPy and CuPy count
strides in bytes: ``byte_strides = strides * itemsize``). Transposing, slicing,
broadcasting and most reshapes only change ``shape``, ``strides`` and ``offset``; they
never copy the buffer. Every view agrees with NumPy (``tests/test_strides.py``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .backend import host_array
from .errors import GraphError, ShapeError
from .tables import counted

__all__ = [
    "OutOfBoundsError",
    "StridedView",
    "col_major_strides",
    "row_major_strides",
]


_INTP_MAX = int(np.iinfo(np.intp).max)  # the largest byte distance NumPy can address


class OutOfBoundsError(ShapeError, IndexError):
    """An index outside its axis, or a view that would read outside its buffer."""


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Strides (in elements) of a contiguous row-major (C order) array.

    ``strides[k] = shape[k+1] * shape[k+2] * ... * shape[-1]``: the last index moves
    fastest. ``row_major_strides((1, 2, 3, 4)) == (24, 12, 4, 1)``.
    """
    shape = _as_shape(shape)
    return tuple(math.prod(shape[k + 1 :]) for k in range(len(shape)))


def col_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Strides (in elements) of a contiguous column-major (Fortran order) array.

    ``strides[k] = shape[0] * ... * shape[k-1]``: the first index moves fastest.
    """
    shape = _as_shape(shape)
    return tuple(math.prod(shape[:k]) for k in range(len(shape)))


COUNTED_OFFSETS = 1 << 20  # StridedView.overlaps counts at most this many offsets


class StridedView:
    """A view of a 1-D buffer with a shape, strides and an offset, all in elements.

    Parameters
    ----------
    buffer : 1-D contiguous array (anything ``numpy.asarray`` accepts)
        The flat memory. Views share it; only :meth:`compact` makes a new one.
    shape : sequence of int
        The logical shape.
    strides : sequence of int, optional
        Elements to skip to move one step along each axis (may be 0 or negative).
        Default: row-major strides of ``shape``.
    offset : int
        Position in ``buffer`` of the element at index ``(0, 0, ...)``.
    """

    def __init__(
        self,
        buffer,
        shape: Sequence[int],
        strides: Sequence[int] | None = None,
        offset: int = 0,
    ) -> None:
        buffer = host_array(buffer, "StridedView's buffer")  # its memory, by address
        if buffer.ndim != 1 or not buffer.flags.c_contiguous:
            raise ShapeError(
                f"StridedView needs a contiguous 1-D buffer, got shape {buffer.shape} with byte "
                f"strides {buffer.strides}; pass array.reshape(-1) of a contiguous array, or use "
                "StridedView.from_numpy(array)"
            )
        shape = _as_shape(shape)
        strides = row_major_strides(shape) if strides is None else _as_ints(strides, "strides")
        if not _is_integer(offset):
            raise ShapeError(f"StridedView: offset must be an integer, got {offset!r}")
        layout = (buffer.shape, buffer.strides, buffer.dtype)
        fields = (buffer, shape, strides, operator.index(offset), layout)
        for name, value in zip(self.__slots__, fields):
            object.__setattr__(self, name, value)
        if len(self.strides) != len(self.shape):
            raise ShapeError(
                f"shape {self.shape} has {counted(len(self.shape), 'axis', 'axes')} but "
                f"strides {self.strides} has {len(self.strides)}; give one stride per axis"
            )
        self._check_inside_buffer()
        self._check_addressable()

    __slots__ = ("_buffer", "_shape", "_strides", "_offset", "_buffer_layout")

    def __reduce__(self):
        """Copies and pickles are made through ``__init__`` (it refuses setting attributes)."""
        return StridedView, (self.buffer, self.shape, self.strides, self.offset)

    def __setattr__(self, name, value):
        raise AttributeError(
            f"StridedView is immutable (setting {name!r} could point it outside its buffer); "
            "make a new view: StridedView(view.buffer, shape, strides, offset), or use "
            "view[...], permute, broadcast_to, reshape"
        )

    # ----------------------------------------------------------------- basic facts
    @property
    def buffer(self) -> np.ndarray:
        """The flat memory, shared by every view made from this one.

        Every read of the view goes through here, and finds the buffer as the view was made
        on: one whose ``shape`` or ``dtype`` was since changed in place
        (``buffer.dtype = ...``) would put the view's elements elsewhere, so it is refused.
        """
        current = (self._buffer.shape, self._buffer.strides, self._buffer.dtype)
        if current != self._buffer_layout:
            raise ShapeError(
                f"the view's buffer was changed in place from {self._buffer_layout} to "
                f"{current} (shape, strides, dtype), so the view's elements are no longer "
                "where it says; build a new view on the buffer as it is now"
            )
        return self._buffer

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape."""
        return self._shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Elements to skip to move one step along each axis."""
        return self._strides

    @property
    def offset(self) -> int:
        """Position in the buffer of the element at index ``(0, 0, ...)``."""
        return self._offset

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of logical elements."""
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The element type of the buffer (when the view was made)."""
        return self._buffer_layout[2]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def byte_strides(self) -> tuple[int, ...]:
        """Strides in bytes, the unit NumPy and CuPy report."""
        return tuple(s * self.itemsize for s in self.strides)

    def __repr__(self) -> str:
        return (
            f"StridedView(shape={self.shape}, strides={self.strides}, offset={self.offset}, "
            f"buffer={self._buffer_layout[0][0]} x {self.dtype})"
        )

    # ----------------------------------------------------------------- addressing
    def index_to_offset(self, index: Sequence[int]) -> int:
        """Memory offset ``offset + sum(i_k * strides[k])`` of one element.

        Negative indices count from the end of their axis, as in Python.
        """
        index = _as_ints(index, "index")
        if len(index) != self.ndim:
            raise ShapeError(
                f"index {index} has {counted(len(index), 'entry', 'entries')} but the view has "
                f"{counted(self.ndim, 'axis', 'axes')} (shape {self.shape}); give one integer "
                "per axis"
            )
        position = self.offset
        for axis, (i, n, s) in enumerate(zip(index, self.shape, self.strides)):
            position += _check_index(i, n, axis, self.shape) * s
        return position

    def element_offsets(self) -> np.ndarray:
        """An integer array of ``shape``: the memory offset of every element."""
        offsets = np.full(self.shape, self.offset, dtype=np.int64)
        if self.size == 0:  # no element (an axis of 2**40 next to one of 0 must not allocate)
            return offsets
        for axis, (n, s) in enumerate(zip(self.shape, self.strides)):
            steps = np.arange(n, dtype=np.int64) * s
            offsets = offsets + steps.reshape((1,) * axis + (n,) + (1,) * (self.ndim - axis - 1))
        return offsets

    def is_contiguous(self) -> bool:
        """True when the elements fill memory in row-major order with no gaps.

        Axes of length 1 never move through memory, so their strides do not matter;
        an empty view is contiguous (NumPy's ``flags.c_contiguous`` rule).
        """
        if self.size == 0:
            return True
        expected = 1
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1:
                if s != expected:
                    return False
                expected *= n
        return True

    # ----------------------------------------------------------------- NumPy bridge
    @classmethod
    def from_numpy(cls, array: np.ndarray) -> StridedView:
        """The view a NumPy array is, sharing its memory (byte strides / itemsize)."""
        array = np.asarray(array)
        itemsize = array.itemsize
        if itemsize == 0:
            raise ShapeError(
                f"StridedView.from_numpy: dtype {array.dtype} has elements of 0 bytes, so byte "
                "strides cannot be counted in elements; use a dtype with a size"
            )
        taken = [s for n, s in zip(array.shape, array.strides) if n > 1 and array.size]
        if any(s % itemsize for s in taken):
            raise ShapeError(
                f"byte strides {array.strides} are not multiples of the itemsize {itemsize}, so "
                "they cannot be counted in elements; use numpy.ascontiguousarray(array) first"
            )
        buffer, offset = _storage_of(array)
        if not array.flags.writeable:  # a read-only array (np.broadcast_to) stays read-only
            buffer = buffer.view()
            buffer.flags.writeable = False
        # a stride never taken (an axis of length 1, an empty array) may split elements: 0
        strides = tuple(0 if s % itemsize else s // itemsize for s in array.strides)
        return cls(buffer, array.shape, strides, offset)

    def overlaps(self) -> bool:
        """Whether two elements share a memory offset (a stride of 0, sliding windows).

        Axes from the smallest stride up: each stride past the reach of the smaller ones
        (a mixed radix, as row-major strides are) gives every element its own offset; one step
        along an axis that equals a few steps along a smaller one (sliding windows) is an
        overlap; else the offsets are counted, up to :data:`COUNTED_OFFSETS` of them (a larger
        view is taken to overlap: read-only is the safe answer).
        """
        reach, smaller = 0, []  # how far the smaller strides reach; those (stride, length)
        for s, n in sorted((abs(s), n) for n, s in zip(self.shape, self.strides) if n > 1):
            if s == 0 or any(s % t == 0 and s // t < m for t, m in smaller):
                return self.size > 0  # n elements at one offset (an empty view has none)
            if s <= reach:
                if self.size > COUNTED_OFFSETS:
                    return True
                return np.unique(self.element_offsets()).size < self.size
            reach += (n - 1) * s
            smaller.append((s, n))
        return False

    def to_numpy(self) -> np.ndarray:
        """A NumPy view of the same memory (``as_strided``; no copy), read-only where elements
        overlap (:meth:`overlaps`), as NumPy's ``broadcast_to`` and ``sliding_window_view``
        are: writing one element would change others."""
        buffer = self.buffer  # as_strided trusts the bounds checked on this very buffer
        start = buffer[self.offset :] if self.size else buffer[:0]
        return as_strided(
            start, shape=self.shape, strides=self.byte_strides, writeable=not self.overlaps()
        )

    # ----------------------------------------------------------------- views
    def __getitem__(self, index):
        """Basic indexing: integers, slices (any step), ``None`` and ``...``.

        An integer for every axis returns the element itself (as NumPy does); anything
        else returns a view.
        """
        given = index if isinstance(index, tuple) else (index,)
        entries = self._expand_ellipsis(given)
        shape, strides, offset = [], [], self.offset
        axis = 0
        for entry in entries:
            if entry is None:  # a new axis of length 1
                shape.append(1)
                strides.append(0)
                continue
            n, s = self.shape[axis], self.strides[axis]
            if isinstance(entry, slice):
                start, stop, step = _slice_indices(entry, n, axis, self.shape)
                length = len(range(start, stop, step))
                if length == 0:  # an empty slice stays at the start, like NumPy
                    start, step = 0, 1
                elif length == 1 and abs(s * step) * self.itemsize > _INTP_MAX:
                    step = 1  # one element never steps: a huge step (a[::2**62]) is not needed
                offset += start * s
                shape.append(length)
                strides.append(s * step)
            else:
                offset += _check_index(entry, n, axis, self.shape) * s
            axis += 1
        if len(given) == self.ndim and all(_is_integer(e) for e in given):
            return self.buffer[offset]
        return StridedView(self.buffer, shape, strides, offset)

    def _expand_ellipsis(self, entries: tuple) -> list:
        """Check index entries and replace ``...`` (or the missing tail) with full slices."""
        for entry in entries:
            if entry is None or entry is Ellipsis or isinstance(entry, slice):
                continue
            if not _is_integer(entry):
                raise GraphError(
                    f"StridedView index {entry!r} is not an integer, slice, None or '...'; "
                    "boolean and array (fancy) indexing copy data, so they are not views: "
                    "index view.to_numpy() instead"
                )
        n_ellipsis = sum(e is Ellipsis for e in entries)
        if n_ellipsis > 1:
            raise ShapeError(f"an index can have only one '...', got {entries}")
        used = sum(e is not None and e is not Ellipsis for e in entries)
        if used > self.ndim:
            raise OutOfBoundsError(
                f"too many indices: {used} given for a view with "
                f"{counted(self.ndim, 'axis', 'axes')} (shape {self.shape})"
            )
        fill = [slice(None)] * (self.ndim - used)
        if n_ellipsis == 0:
            return list(entries) + fill
        at = entries.index(Ellipsis)
        return list(entries[:at]) + fill + list(entries[at + 1 :])

    def permute(self, *axes) -> StridedView:
        """Reorder the axes: axis ``k`` of the result is axis ``axes[k]`` of this view."""
        if len(axes) == 1 and not _is_integer(axes[0]):  # one sequence (or array) of axes
            axes = axes[0]
        axes = _as_ints(axes, "permute's axes")
        normal = tuple(a + self.ndim if a < 0 else a for a in axes)
        if sorted(normal) != list(range(self.ndim)):
            raise ShapeError(
                f"permute{axes} is not a permutation of the "
                f"{counted(self.ndim, 'axis', 'axes')} of shape {self.shape}; name each of "
                f"0..{self.ndim - 1} exactly once"
            )
        return StridedView(
            self.buffer,
            [self.shape[a] for a in normal],
            [self.strides[a] for a in normal],
            self.offset,
        )

    def transpose(self, *axes) -> StridedView:
        """Reverse the axes (or reorder them as :meth:`permute` when ``axes`` are given)."""
        return self.permute(*axes) if axes else self.permute(range(self.ndim)[::-1])

    @property
    def T(self) -> StridedView:  # noqa: N802  (NumPy's name)
        """The transpose: axes reversed."""
        return self.transpose()

    def broadcast_to(self, shape: Sequence[int]) -> StridedView:
        """Repeat axes of length 1 (and add leading axes) by giving them stride 0."""
        shape = _as_shape(shape)
        extra = len(shape) - self.ndim
        if extra < 0:
            raise ShapeError(
                f"cannot broadcast shape {self.shape} to {shape}: the target has fewer axes"
            )
        strides = [0] * extra
        for n_old, s, n_new in zip(self.shape, self.strides, shape[extra:]):
            if n_old == 1:
                strides.append(0)  # one element, seen n_new times
            elif n_old == n_new:
                strides.append(s)
            else:
                raise ShapeError(
                    f"cannot broadcast shape {self.shape} to {shape}: an axis of length "
                    f"{n_old} can only stay {n_old}; only axes of length 1 can be repeated"
                )
        return StridedView(self.buffer, shape, strides, self.offset)

    def reshape(self, *shape) -> StridedView:
        """The same elements, in row-major order, seen with a new shape (one ``-1`` allowed).

        A view when the strides allow it; otherwise :class:`ShapeError` (call
        :meth:`compact` first: it copies the elements into a fresh row-major buffer).
        """
        if not shape:
            raise ShapeError(
                f"reshape of shape {self.shape} needs a shape; reshape(()) makes a 0-d view"
            )
        if len(shape) == 1 and not _is_integer(shape[0]):  # one sequence (or array) of lengths
            shape = shape[0]
        shape = _as_ints(shape, "reshape's shape")
        if shape == self.shape:  # nothing to do (checked before a -1 is filled in, as NumPy)
            return StridedView(self.buffer, self.shape, self.strides, self.offset)
        new_shape = self._resolve_reshape(shape)
        if self.is_contiguous():
            return StridedView(self.buffer, new_shape, None, self.offset)
        strides = _reshape_strides(self.shape, self.strides, new_shape)
        if strides is None:
            raise ShapeError(
                f"reshape of shape {self.shape} with strides {self.strides} to {new_shape} needs "
                "a copy: the elements are not evenly spaced in memory in row-major order. "
                "Call .compact() first, then .reshape(...)"
            )
        return StridedView(self.buffer, new_shape, strides, self.offset)

    def _resolve_reshape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Fill in a ``-1`` and check that the number of elements is unchanged."""
        unknown = [k for k, n in enumerate(shape) if n == -1]
        if len(unknown) > 1 or any(n < -1 for n in shape):
            raise ShapeError(f"reshape to {shape}: use non-negative sizes and at most one -1")
        known = math.prod(n for n in shape if n != -1)
        if unknown and known and self.size % known == 0:
            shape = shape[: unknown[0]] + (self.size // known,) + shape[unknown[0] + 1 :]
        if -1 in shape or math.prod(shape) != self.size:
            raise ShapeError(
                f"cannot reshape shape {self.shape} ({counted(self.size, 'element')}) to {shape}; "
                "the number of elements must stay the same"
            )
        return shape

    def compact(self) -> StridedView:
        """A copy of the elements into a new buffer, in row-major order (contiguous)."""
        return StridedView(self.buffer[self.element_offsets().reshape(-1)], self.shape)

    # ----------------------------------------------------------------- checks
    def _check_addressable(self) -> None:
        """Lengths, strides and offset must give byte distances NumPy can address (its
        ``intp``); a view that stays inside its buffer can still have a huge stride on an
        axis of length 1, or a huge offset when it is empty."""
        spans = {  # each part of the view, and the largest byte distance it makes
            f"shape {self.shape}": math.prod(n for n in self.shape if n),
            f"strides {self.strides}": max(map(abs, self.strides), default=0),
            f"offset {self.offset}": abs(self.offset),
        }
        too_large = [part for part, span in spans.items() if span * self.itemsize > _INTP_MAX]
        if too_large:
            raise ShapeError(
                f"{' and '.join(too_large)} cannot be addressed: counted in bytes "
                f"({self.itemsize} per element) they must stay within ±{_INTP_MAX:,}, "
                f"NumPy's {np.dtype(np.intp)}; use smaller numbers"
            )

    def _check_inside_buffer(self) -> None:
        if self.size == 0:  # an empty view reads nothing, wherever it points (as in NumPy)
            return
        low, high = (self.offset + r for r in _reach(self.shape, self.strides))
        n = len(self.buffer)
        if low < 0 or high >= n:
            raise OutOfBoundsError(
                f"a view with shape {self.shape}, strides {self.strides} and offset "
                f"{self.offset} reaches memory offsets {low}..{high}, but the buffer has "
                f"{counted(n, 'element')}{f' (0..{n - 1})' if n else ''}; "
                "make the buffer larger or the view smaller"
            )


# --------------------------------------------------------------------- helpers
def _as_ints(values: Sequence[int], what: str) -> tuple[int, ...]:
    """``values`` as Python ints (NumPy integers too; booleans are refused, as NumPy does)."""
    try:
        ints = tuple(values)
    except TypeError:  # not a sequence
        ints = (None,)
    if not all(_is_integer(v) for v in ints):
        raise ShapeError(f"StridedView: {what} must be integers, got {values!r}")
    return tuple(operator.index(v) for v in ints)


def _as_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape: a sequence of lengths, or one length (a Python or NumPy integer)."""
    shape = _as_ints((shape,) if _is_integer(shape) else shape, "shape")
    if any(n < 0 for n in shape):
        raise ShapeError(f"shape {shape} has a negative length")
    return shape


def _is_integer(entry) -> bool:
    """An integer index (booleans are not: NumPy treats them as masks)."""
    if isinstance(entry, bool | np.bool_):
        return False
    try:
        operator.index(entry)
    except TypeError:
        return False
    return True


def _slice_indices(entry: slice, n: int, axis: int, shape: tuple[int, ...]) -> tuple:
    """``entry.indices(n)``: start, stop and step of a slice on an axis of length ``n``."""
    try:
        return entry.indices(n)
    except TypeError:
        raise GraphError(
            f"slice {entry} on axis {axis} (shape {shape}) needs integers or None for its "
            "start, stop and step"
        ) from None
    except ValueError:  # the one value slice.indices refuses
        raise ShapeError(
            f"slice {entry} on axis {axis} (shape {shape}) has step 0; use a step of at least "
            "1 or at most -1"
        ) from None


def _check_index(i: int, n: int, axis: int, shape: tuple[int, ...]) -> int:
    """``i`` as a non-negative position on an axis of length ``n``."""
    i = operator.index(i)
    if not -n <= i < n:
        allowed = f"use -{n} <= index < {n}" if n else "an empty axis has no index to use"
        raise OutOfBoundsError(
            f"index {i} is out of range for axis {axis} of length {n} (shape {shape}); {allowed}"
        )
    return i + n if i < 0 else i


def _reshape_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides showing a non-empty view with ``new_shape`` without a copy, or None.

    Group old and new axes into runs with equal numbers of elements (the old shape
    (6, 4) and new shape (2, 3, 4) make the groups (6)↔(2, 3) and (4)↔(4)). Within a
    group the old axes must form one evenly spaced run of memory (each stride equals
    the next stride times the next length); the new axes of the group then take
    row-major strides over that run. Axes of length 1 never move, so they are skipped.
    """
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    new_strides = [0] * len(new_shape)
    i = j = 0  # first old axis and first new axis of the current group
    while i < len(old) and j < len(new_shape):
        i_end, j_end = i + 1, j + 1
        old_count, new_count = old[i][0], new_shape[j]
        while old_count != new_count:
            if new_count < old_count:
                new_count *= new_shape[j_end]
                j_end += 1
            else:
                old_count *= old[i_end][0]
                i_end += 1
        for k in range(i, i_end - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None  # a jump in memory inside the group
        stride = old[i_end - 1][1]
        for k in range(j_end - 1, j - 1, -1):
            new_strides[k] = stride
            stride *= new_shape[k]
        i, j = i_end, j_end
    trailing = new_strides[j - 1] if j > 0 else 1  # trailing axes of length 1, as NumPy
    for k in range(j, len(new_shape)):
        new_strides[k] = trailing
    return tuple(new_strides)


def _reach(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """The lowest and highest distance from element (0, 0, ...) to any element (non-empty)."""
    low = sum(min(0, s * (n - 1)) for n, s in zip(shape, strides))
    high = sum(max(0, s * (n - 1)) for n, s in zip(shape, strides))
    return low, high


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _storage_of(array: np.ndarray) -> tuple[np.ndarray, int]:
    """A 1-D buffer sharing ``array``'s memory, and the element offset of ``array[0, ...]``.

    Prefer the whole allocation the array came from (so a slice keeps its offset into
    it, as PyTorch's ``storage_offset``); fall back to the smallest span that covers it.
    """
    itemsize = array.itemsize
    low, high = _reach(array.shape, array.strides)
    high += itemsize  # one past the last byte
    root = _allocation_root(array)
    if root is not None and root.dtype.hasobject and root.dtype != array.dtype:
        raise ShapeError(
            f"StridedView.from_numpy: the array of dtype {array.dtype} lies in memory of dtype "
            f"{root.dtype} (a field of a structured array), and memory holding object "
            "references cannot be read as another dtype; pass array.copy()"
        )
    if root is not None:
        flat = root.reshape(-1, order="F" if root.flags.f_contiguous else "C")
        start = _address(array) - _address(flat)  # in bytes (object arrays have no byte view)
        if (
            start % itemsize == 0
            and flat.nbytes % itemsize == 0
            and 0 <= start + low
            and start + high <= flat.nbytes
        ):
            return flat.view(array.dtype), start // itemsize
    if array.size == 0:
        return np.empty(0, dtype=array.dtype), 0
    # the element at the lowest address: the last one along every axis with a negative stride
    first = array[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in array.strides)]
    span = as_strided(first, shape=((high - low) // itemsize,), strides=(itemsize,))
    return span, -low // itemsize


def _allocation_root(array: np.ndarray) -> np.ndarray | None:
    """The outermost contiguous ndarray in ``array``'s chain of bases, if any."""
    root, node = None, array
    while node is not None:
        if isinstance(node, np.ndarray) and (node.flags.c_contiguous or node.flags.f_contiguous):
            root = node
        node = getattr(node, "base", None)
    return root
