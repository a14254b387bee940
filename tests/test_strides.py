"""StridedView against NumPy: every view op, random chains of them, and clear errors."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.errors import ShapeError
from course_lib.strides import (
    OutOfBoundsError,
    StridedView,
    col_major_strides,
    row_major_strides,
)

MANY = settings(max_examples=10 * settings.default.max_examples)
DTYPES = [np.float64, np.float32, np.int16, np.int8, np.complex128]


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def element_strides(array: np.ndarray) -> tuple[int, ...]:
    return tuple(s // array.itemsize for s in array.strides)


def assert_same_view(view: StridedView, array: np.ndarray) -> None:
    """``view`` shows exactly ``array``: shape, values, strides, memory, contiguity."""
    shown = view.to_numpy()
    assert view.shape == array.shape
    assert shown.dtype == array.dtype
    np.testing.assert_array_equal(shown, array)
    assert view.is_contiguous() == array.flags.c_contiguous
    if array.size:  # an empty view never touches memory, so its strides are arbitrary
        assert view.strides == element_strides(array)
        assert view.byte_strides == array.strides
        assert address(shown) == address(array)
        assert np.shares_memory(view.buffer, array)


# ------------------------------------------------------------------ the lecture's numbers
def test_lecture_question_shape_1_2_3_4_has_strides_24_12_4_1():
    assert row_major_strides((1, 2, 3, 4)) == (24, 12, 4, 1)
    view = StridedView(np.arange(24, dtype=np.float32), (1, 2, 3, 4))
    assert view.strides == (24, 12, 4, 1)
    array = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    assert array.strides == (96, 48, 16, 4)  # NumPy counts bytes: 4 per float32
    assert element_strides(array) == view.strides == StridedView.from_numpy(array).strides


def test_row_and_column_major_formulas():
    data = np.arange(6.0)
    rows = StridedView(data, (2, 3))
    cols = StridedView(data, (2, 3), col_major_strides((2, 3)))
    assert rows.strides == (3, 1) and cols.strides == (1, 2)
    for i in range(2):
        for j in range(3):
            assert rows[i, j] == data[i * 3 + j]  # A[i, j] = data[i*shape[1] + j]
            assert cols[i, j] == data[j * 2 + i]  # A[i, j] = data[j*shape[0] + i]
    np.testing.assert_array_equal(cols.to_numpy(), data.reshape(2, 3, order="F"))
    assert col_major_strides((2, 3, 4)) == (1, 2, 6) and row_major_strides(()) == ()


def test_index_to_offset_is_the_strides_formula():
    view = StridedView(np.arange(100), (2, 3, 4), strides=(1, 8, 2), offset=5)
    assert view.index_to_offset((1, 2, 3)) == 5 + 1 * 1 + 2 * 8 + 3 * 2
    assert view.index_to_offset((-1, -1, -1)) == view.index_to_offset((1, 2, 3))
    offsets = view.element_offsets()
    assert offsets.shape == (2, 3, 4) and offsets[1, 2, 3] == 28
    assert view[1, 2, 3] == view.buffer[28]


# ------------------------------------------------------------------ views share memory
def test_transpose_slice_and_broadcast_are_views_not_copies():
    data = np.arange(12.0)
    view = StridedView(data, (3, 4))
    for derived in (view.T, view[::2, ::-1], view[1:, None, 2], view[:1].broadcast_to((5, 4))):
        assert derived.buffer is data
        assert np.shares_memory(derived.to_numpy(), data)
    data[5] = -1.0  # writing the buffer shows through every view
    assert view.T[1, 1] == -1.0


def test_broadcast_uses_stride_zero():
    b = StridedView(np.arange(3.0), (1, 3))
    seen = b.broadcast_to((4, 3))
    assert seen.strides == (0, 1)
    np.testing.assert_array_equal(seen.to_numpy(), np.broadcast_to(np.arange(3.0), (4, 3)))
    assert np.unique(seen.element_offsets()).tolist() == [0, 1, 2]  # 12 elements, 3 cells


def test_reshape_of_a_transpose_needs_compact():
    view = StridedView(np.arange(6.0), (2, 3)).T
    with pytest.raises(ShapeError, match=r"compact\(\)"):
        view.reshape(6)
    flat = view.compact().reshape(6)
    assert not np.shares_memory(flat.buffer, view.buffer)
    np.testing.assert_array_equal(flat.to_numpy(), np.arange(6.0).reshape(2, 3).T.reshape(6))
    assert view.compact().is_contiguous() and not view.is_contiguous()


def test_from_numpy_keeps_the_offset_into_the_allocation():
    base = np.arange(24.0).reshape(4, 6)
    view = StridedView.from_numpy(base[1:, 2::2])
    assert view.offset == 8 and view.strides == (6, 2) and len(view.buffer) == 24
    assert np.shares_memory(view.buffer, base)
    reverse = StridedView.from_numpy(base[::-1, ::-1])
    assert reverse.offset == 23 and reverse.strides == (-6, -1)


def test_from_numpy_without_an_ndarray_allocation_uses_the_covering_span():
    raw = bytearray(np.arange(10.0).tobytes())
    array = np.frombuffer(raw, dtype=np.float64)[::-3]  # base is a bytearray
    view = StridedView.from_numpy(array)
    assert_same_view(view, array)
    assert view.strides == (-3,) and len(view.buffer) == 10


# ------------------------------------------------------------------ random chains vs NumPy
@st.composite
def base_arrays(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=4)))
    dtype = draw(st.sampled_from(DTYPES))
    array = np.arange(math.prod(shape)).astype(dtype).reshape(shape)
    return np.asfortranarray(array) if draw(st.booleans()) else array


@st.composite
def slice_entries(draw, n):
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    step = st.one_of(st.none(), st.integers(-3, 3).filter(bool))
    return slice(draw(bound), draw(bound), draw(step))


@st.composite
def basic_indices(draw, shape):
    """A tuple of ints, slices, None and at most one '...' that NumPy accepts."""
    entries = []
    for n in shape:
        use_int = n > 0 and draw(st.booleans())
        entries.append(draw(st.integers(-n, n - 1)) if use_int else draw(slice_entries(n)))
    if draw(st.booleans()):  # leave a tail of axes implicit
        entries = entries[: draw(st.integers(0, len(entries)))]
    elif draw(st.booleans()):  # or fold a run of full slices into '...'
        start = draw(st.integers(0, len(entries)))
        stop = draw(st.integers(start, len(entries)))
        entries = entries[:start] + [Ellipsis] + entries[stop:]
    for _ in range(draw(st.integers(0, 2))):
        entries.insert(draw(st.integers(0, len(entries))), None)
    return tuple(entries)


@st.composite
def reshape_targets(draw, size):
    """A new shape with ``size`` elements (factors regrouped, 1s inserted, maybe a -1)."""
    if size == 0:
        dims = [0] + draw(st.lists(st.integers(1, 3), max_size=2))
        return tuple(draw(st.permutations(dims)))
    factors = list(draw(st.permutations(_prime_factors(size))))
    dims = []
    while factors:
        take = draw(st.integers(1, len(factors)))
        dims.append(math.prod(factors[:take]))
        factors = factors[take:]
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    if dims and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


def _prime_factors(n: int) -> list[int]:
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


@st.composite
def broadcast_targets(draw, shape):
    lead = draw(st.lists(st.integers(0, 3), max_size=2))
    return tuple(lead) + tuple(draw(st.integers(0, 3)) if n == 1 else n for n in shape)


OPS = ["index", "permute", "transpose", "broadcast", "reshape", "compact"]


@MANY
@given(
    base=base_arrays(), ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=6), data=st.data()
)
def test_random_view_chains_match_numpy(base, ops, data):
    view, array = StridedView.from_numpy(base), base
    assert_same_view(view, array)
    linked = True  # no copy so far: from_numpy(array) must find our very buffer and offset
    for op in ops:
        result = _apply(op, view, array, data)
        if result is None:  # every axis indexed by an integer: an element, checked
            return
        view, array, copied = result
        linked = linked and not copied
        if linked:
            assert_same_view(view, array)
        else:
            assert_same_values(view, array)
        again = StridedView.from_numpy(array)
        assert_same_view(again, array)
        if linked and array.size:
            assert again.offset == view.offset and address(again.buffer) == address(view.buffer)


def _apply(op, view, array, data):
    """``op`` on our view and on NumPy's array: (view, array, whether ours copied), or None."""
    if op == "index":
        index = data.draw(basic_indices(array.shape), label="index")
        expected, got = array[index], view[index]
        if not isinstance(expected, np.ndarray):
            assert not isinstance(got, StridedView) and got == expected
            return None
        return got, expected, False
    if op == "permute":
        axes = data.draw(st.permutations(range(array.ndim)), label="axes")
        return view.permute(*axes), np.transpose(array, axes), False
    if op == "transpose":
        return view.transpose(), array.T, False
    if op == "broadcast":
        shape = data.draw(broadcast_targets(array.shape), label="broadcast")
        return view.broadcast_to(shape), np.broadcast_to(array, shape), False
    if op == "reshape":
        shape = data.draw(reshape_targets(array.size), label="reshape")
        reshaped = array.reshape(shape)
        if array.size == 0 or np.shares_memory(reshaped, array):
            return view.reshape(shape), reshaped, False  # NumPy made a view, so must we
        with pytest.raises(ShapeError, match="compact"):
            view.reshape(shape)
        return view.compact().reshape(shape), reshaped, True
    copied = view.compact()
    assert copied.is_contiguous() and not np.shares_memory(copied.buffer, view.buffer)
    return copied, array.copy(order="C"), True


def assert_same_values(view: StridedView, array: np.ndarray) -> None:
    """After a copy the memory differs; the layout rules still hold for the copy."""
    np.testing.assert_array_equal(view.to_numpy(), array)
    assert view.shape == array.shape
    if array.size and array.flags.c_contiguous:
        assert view.is_contiguous()


@given(base=base_arrays(), data=st.data())
def test_element_offsets_and_index_to_offset_agree_with_numpy_addresses(base, data):
    view = StridedView.from_numpy(base)
    if base.size == 0:
        return
    index = tuple(data.draw(st.integers(0, n - 1)) for n in base.shape)
    byte_offset = address(base[(*index, ...)]) - address(view.buffer)  # a 0-d view
    assert view.index_to_offset(index) == byte_offset // base.itemsize
    assert view.element_offsets()[index] == view.index_to_offset(index)


@given(shape=st.lists(st.integers(0, 5), max_size=4).map(tuple), dtype=st.sampled_from(DTYPES))
def test_strides_formulas_match_numpy_byte_strides(shape, dtype):
    if 0 in shape:  # NumPy gives empty arrays all-zero strides; nothing is ever addressed
        return
    c_order = np.zeros(shape, dtype=dtype)
    f_order = np.zeros(shape, dtype=dtype, order="F")
    assert tuple(s * c_order.itemsize for s in row_major_strides(shape)) == c_order.strides
    assert tuple(s * f_order.itemsize for s in col_major_strides(shape)) == f_order.strides


# ------------------------------------------------------------------ clear errors
@pytest.fixture
def grid():
    return StridedView(np.arange(12.0), (3, 4))


@pytest.mark.parametrize(
    ("action", "error", "words"),
    [
        (lambda v: v[3, 0], OutOfBoundsError, "index 3 is out of range for axis 0 of length 3"),
        (lambda v: v[0, -5], OutOfBoundsError, "axis 1 of length 4"),
        (lambda v: v[0, 0, 0], OutOfBoundsError, "too many indices"),
        (lambda v: v[..., 0, ...], ShapeError, "only one '...'"),
        (lambda v: v.index_to_offset((1,)), ShapeError, "one integer per axis"),
        (lambda v: v.permute(0, 0), ShapeError, "not a permutation"),
        (lambda v: v.permute(0, 2), ShapeError, "not a permutation"),
        (lambda v: v.broadcast_to((3, 5)), ShapeError, "only axes of length 1"),
        (lambda v: v.broadcast_to((4,)), ShapeError, "fewer axes"),
        (lambda v: v.reshape(5, 2), ShapeError, "number of elements must stay the same"),
        (lambda v: v.reshape(-1, -1), ShapeError, "at most one -1"),
        (lambda v: v.T.reshape(12), ShapeError, r"Call \.compact\(\) first"),
        (lambda v: v[:, :2].reshape(6), ShapeError, "needs a copy"),
    ],
)
def test_errors_name_the_problem(grid, action, error, words):
    with pytest.raises(error, match=words):
        action(grid)


def test_out_of_range_index_is_an_index_error(grid):
    with pytest.raises(IndexError):
        grid[0, 4]


@pytest.mark.parametrize("index", [1.5, True, [0, 1], np.array([0, 1])])
def test_copying_indices_are_refused(grid, index):
    with pytest.raises(TypeError, match="not views"):
        grid[index]


@pytest.mark.parametrize(
    ("shape", "strides", "offset", "words"),
    [
        ((3, 4), None, 1, r"reaches memory offsets 1\.\.12"),
        ((2, 2), (-1, 1), 0, r"reaches memory offsets -1\.\.1"),
        ((3,), (1, 1), 0, "one stride per axis"),
        ((-1, 2), None, 0, "negative length"),
    ],
)
def test_views_outside_the_buffer_are_refused(shape, strides, offset, words):
    with pytest.raises(ShapeError, match=words):
        StridedView(np.arange(12.0), shape, strides, offset)


def test_buffer_must_be_flat_and_contiguous():
    with pytest.raises(ShapeError, match="contiguous 1-D buffer"):
        StridedView(np.zeros((2, 3)), (6,))
    with pytest.raises(ShapeError, match="contiguous 1-D buffer"):
        StridedView(np.zeros(6)[::2], (3,))


def test_byte_strides_that_split_elements_are_refused():
    misaligned = np.zeros(10, dtype=np.uint8)[1:9].view(np.float64)  # 1 byte into its block
    view = StridedView.from_numpy(misaligned)  # so the buffer is the covering span
    assert view.shape == (1,) and np.shares_memory(view.buffer, misaligned)
    odd = np.lib.stride_tricks.as_strided(np.zeros(8), shape=(3,), strides=(12,))
    with pytest.raises(ShapeError, match="not multiples of the itemsize"):
        StridedView.from_numpy(odd)


@pytest.mark.parametrize("field, value", [("strides", (10**6,)), ("shape", (10**6,)),
                                          ("offset", -5), ("buffer", np.zeros(1))])  # fmt: skip
def test_strided_view_is_immutable(field, value):
    view = StridedView(np.arange(10.0), (10,))
    with pytest.raises(AttributeError, match=f"immutable \\(setting '{field}'"):
        setattr(view, field, value)
    np.testing.assert_array_equal(view.to_numpy(), np.arange(10.0))


READS = {
    "to_numpy": lambda v: v.to_numpy(),
    "element": lambda v: v[4],
    "slice": lambda v: v[1:],
    "compact": lambda v: v.compact(),
    "transpose": lambda v: v.T,
    "reshape": lambda v: v.reshape(5, 1),
    "broadcast_to": lambda v: v.broadcast_to((2, 5)),
}


@pytest.mark.parametrize("read", READS.values(), ids=READS.keys())
@pytest.mark.parametrize(
    "change",
    [
        {"shape": (2, 5)},  # v[4] would read buffer[8] of a 2-row array: a row of 5
        {"dtype": np.complex128},  # 5 elements: the checked bounds no longer hold
        {"dtype": np.int64},  # the same bytes, read as other numbers
    ],
)
def test_every_read_refuses_a_buffer_changed_in_place(read, change):
    buffer = np.arange(10.0)
    view = StridedView(buffer, (5,), (2,))
    for attribute, value in change.items():
        setattr(buffer, attribute, value)
    with pytest.raises(ShapeError, match=r"buffer was changed in place from \(\(10,\), \(8,\), "
                       r"dtype\('float64'\)\).*build a new view"):  # fmt: skip
        read(view)
    assert repr(view).endswith("buffer=10 x float64)") and view.dtype == np.float64
    buffer.dtype, buffer.shape = np.float64, (10,)  # as it was: the view reads again
    assert view[4] == 8.0


@pytest.mark.parametrize(
    ("shape", "strides", "offset", "words"),
    [
        ((1,), (2**70,), 0, r"strides \(1180591620717411303424,\) cannot be addressed"),
        ((2, 1), (1, 2**62), 0, r"strides \(1, 4611686018427387904\)"),  # 2**65 bytes
        ((0,), (1,), 2**70, "offset 1180591620717411303424 cannot be addressed"),
        ((0, 2**40, 2**40), (0, 0, 0), 0, r"shape \(0, 1099511627776, 1099511627776\)"),
    ],
)
def test_numbers_beyond_a_byte_address_are_refused(shape, strides, offset, words):
    with pytest.raises(ShapeError, match=words + ".*within ±9,223,372,036,854,775,807"):
        StridedView(np.arange(10.0), shape, strides, offset)


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=3), st.integers(-50, 50))
def test_no_strides_or_offset_reach_outside_the_buffer(strides, offset):
    shape = tuple(2 for _ in strides)
    try:
        view = StridedView(np.arange(20.0), shape, strides, offset)
    except OutOfBoundsError:
        return
    assert set(view.element_offsets().ravel()) <= set(range(20))
    np.testing.assert_array_equal(view.to_numpy(), np.arange(20.0)[view.element_offsets()])
