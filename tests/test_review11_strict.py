"""The strict stand-in for CuPy under review (review 11): views, sorts, keywords and scatters as
CuPy 14's (the oracle: ``cupy/_core/core.pyx``, ``_kernel.pyx``, ``_routines_indexing.pyx``,
``cupy/_sorting/sort.py``, cited per test), values and dtypes as NumPy's.

These tests pin the device itself, so they say the same on every device.
"""

import numpy as np
import pytest

from course_lib import strict_device


def _device(values, dtype=np.float64):
    return strict_device.asarray(np.asarray(values, dtype=dtype))


# -- core.pyx __getitem__/__iter__: an integer index gives a 0-d view (NumPy: a scalar copy) ----
def test_an_integer_index_and_iteration_give_views_as_on_cupy():
    a = _device([1.0, 2.0, 3.0])
    first = a[0]
    first += 10.0  # wrote a copy: a was unchanged
    for element in a:
        element *= 2.0
    assert a.tolist() == [22.0, 4.0, 6.0]
    scalar = _device(5.0)
    view = scalar[()]
    view += 1.0
    assert scalar.item() == 6.0
    picked = a[_device(0, np.int64)]  # an index array: a copy, as CuPy's advanced indexing
    picked += 1.0
    assert a.tolist() == [22.0, 4.0, 6.0] and picked.item() == 23.0


# -- sort.py / core.pyx: CuPy's sorts are stable, and take no other kind -------------------------
def test_sorts_are_stable_and_refuse_another_kind_as_cupys():
    ties = np.array([1.0, 0.0] * 9)
    stable = np.argsort(ties, kind="stable").tolist()  # NumPy's default (quicksort) is not
    a = _device(ties)
    assert a.argsort().tolist() == stable
    assert strict_device.argsort(a).tolist() == stable
    assert np.argsort(a).tolist() == stable
    assert strict_device.sort(a, axis=None).tolist() == sorted(ties)
    for sort in (a.sort, a.argsort, lambda kind: strict_device.sort(a, kind=kind),
                 lambda kind: np.argsort(a, kind=kind)):  # fmt: skip
        with pytest.raises(ValueError, match="kind can only be None or 'stable'"):
            sort(kind="quicksort")
    a.sort()
    assert a.tolist() == sorted(ties)


# -- _core.array: copy=False / None keeps a device array; order= is honoured --------------------
def test_array_and_asarray_copy_only_where_cupy_does():
    a = _device(np.arange(6.0).reshape(2, 3))
    assert strict_device.array(a, copy=False) is a  # was always a copy
    assert np.shares_memory(strict_device.array(a, copy=False, ndmin=3)._a, a._a)
    assert not np.shares_memory(strict_device.array(a)._a, a._a)
    assert strict_device.asarray(a.T, order="C").flags.c_contiguous  # order was ignored
    assert strict_device.asarray(a, copy=True) is not a
    with pytest.raises(ValueError, match="avoid copy"):
        strict_device.asarray(a, dtype=np.float32, copy=False)


# -- ascontiguousarray returns a itself (the executor's alias check compares ids) ----------------
def test_a_function_returning_its_argument_returns_the_same_device_array():
    a = _device([[1.0, 2.0], [3.0, 4.0]])
    assert strict_device.ascontiguousarray(a) is a
    assert strict_device.asanyarray(a) is a
    assert a.real is a
    assert strict_device.ascontiguousarray(a.T) is not a


# -- _kernel.pyx ufunc.__call__ ("Wrong arguments"), core.pyx reductions: no where=, initial= ---
def test_numpy_only_keywords_are_refused_as_cupy_refuses_them():
    a, mask = _device([1.0, 2.0, 3.0]), _device([True, False, True], np.bool_)
    for call in (
        lambda: a.max(initial=0.0), lambda: a.sum(where=mask), lambda: np.sum(a, where=mask),
        lambda: strict_device.max(a, initial=0.0), lambda: np.add(a, 1.0, where=mask),
        lambda: strict_device.add(a, 1.0, where=mask), lambda: np.add.reduce(a, initial=1.0),
    ):  # fmt: skip
        with pytest.raises(TypeError, match="keyword on CuPy"):
            call()
    assert strict_device.max(a, axis=0, keepdims=True).tolist() == [3.0]
    assert strict_device.add.reduce(a, axis=0, keepdims=True).tolist() == [6.0]
    assert strict_device.multiply(a, 2.0, out=a) is a


# -- _routines_indexing.pyx _scatter_op_single: each ufunc.at's dtypes ---------------------------
def test_scatter_ufuncs_refuse_the_dtypes_cupys_atomics_lack():
    index = _device([0, 0], np.int64)
    with pytest.raises(TypeError, match="subtract.at .*int32, uint32 only"):
        np.subtract.at(strict_device.zeros(3), index, 1.0)
    with pytest.raises(TypeError, match="maximum.at"):
        strict_device.maximum.at(strict_device.zeros(3, np.float16), index, 1.0)
    with pytest.raises(TypeError, match="bitwise_or.at"):
        np.bitwise_or.at(strict_device.zeros(3, np.int8), index, 1)
    counts = strict_device.zeros(3, np.int32)
    np.subtract.at(counts, index, 1)
    assert counts.tolist() == [-2, 0, 0]


# -- cupy.random.RandomState draws device arrays -------------------------------------------------
def test_a_random_state_draws_device_arrays():
    drawn = strict_device.random.RandomState(0).standard_normal(3)
    assert type(drawn) is strict_device.StrictArray  # was a NumPy array, np.asarray took it
    assert drawn.tolist() == np.random.RandomState(0).standard_normal(3).tolist()
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(drawn)


# -- core.pyx: the ndarray methods CuPy has ------------------------------------------------------
def test_partition_searchsorted_compress_and_tobytes_as_cupys():
    a = _device([3, 1, 2], np.int64)
    assert a.argpartition(1).tolist()[1] == 2
    assert a.compress(_device([True, False, True], np.bool_)).tolist() == [3, 2]
    assert a.tobytes() == np.array([3, 1, 2]).tobytes()
    a.partition(1)
    assert a[1].item() == 2 and a.searchsorted(2).item() == 1

