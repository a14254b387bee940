"""The strict stand-in for CuPy under review (review 10): what CuPy 14's arrays take, it takes,
and what they refuse, it refuses (the oracle: ``cupy/_core/core.pyx``, ``_kernel.pyx`` and
``_routines_math.pyx``, cited per test).

These tests pin the device itself, so they say the same on every device.
"""

import warnings

import numpy as np
import pytest

from course_lib import strict_device
from course_lib.strict_device import StrictArray


def _device(values, dtype=np.float64):
    return strict_device.asarray(np.asarray(values, dtype=dtype))


# -- core.pyx: __format__ and __bytes__ go through .get() ----------------------------------------
def test_format_and_bytes_of_a_device_array_work_as_on_cupy():
    loss = _device(2.5)
    assert f"{loss:.3f}" == "2.500" and f"{loss}" == "2.5"  # a format spec raised TypeError
    assert bytes(_device([1.0, 2.0])) == np.array([1.0, 2.0]).tobytes()


# -- core.pyx __array_ufunc__: a 0-d NumPy array in a comparison ufunc is its value --------------
def test_comparison_ufuncs_take_a_0d_numpy_array_as_cupys_do():
    a = _device([0.0, 1.0, 2.0])
    assert np.less(a, np.array(0.5)).tolist() == [True, False, False]
    assert (np.array(0.5) < a).tolist() == [False, True, True]  # NumPy's __lt__: np.less
    assert (np.array(1.0) == a).tolist() == [False, True, False]
    for refused in (lambda: np.ones(3) < a, lambda: np.add(a, np.array(1.0))):
        with pytest.raises(TypeError, match="unsupported type numpy.ndarray"):
            refused()


# -- core.pyx __richcmp__: == with a list or a string goes to numpy.equal, which refuses it ------
def test_equality_with_a_list_or_string_is_a_type_error_as_on_cupy():
    a = _device([0.0, 1.0])
    for other in ([0.0, 1.0], (0.0, 1.0), "x"):
        with pytest.raises(TypeError, match="operator eq: unsupported type"):
            a == other  # noqa: B015 (was a silent Python False)
        with pytest.raises(TypeError, match="operator ne: unsupported type"):
            a != other  # noqa: B015
    assert (a == None).tolist() == [False, False]  # noqa: E711 (CuPy: all False)

    class Defers:
        __array_ufunc__ = None  # CuPy's _should_use_rop: the other operand decides

        def __eq__(self, other):
            return "deferred"

    assert (a == Defers()) == "deferred"


# -- attributes and methods CuPy 14's ndarray has -------------------------------------------------
def test_mT_and_the_methods_cupys_ndarray_has():
    host = np.arange(12.0).reshape(2, 2, 3)
    a = strict_device.asarray(host)
    assert isinstance(a.mT, StrictArray) and a.mT.get().tolist() == host.mT.tolist()
    for name in ("cumprod", "diagonal", "trace", "conjugate"):
        result = getattr(a, name)()
        assert isinstance(result, StrictArray), name
        np.testing.assert_array_equal(result.get(), getattr(host, name)())
    assert not hasattr(a, "__array_namespace__")  # CuPy 14's arrays have none


# -- CuPy has no read-only arrays: a diagonal is a writable view, a real array's imag writable --
def test_views_numpy_makes_read_only_are_writable_as_on_cupy():
    a = _device(np.zeros((2, 2)))
    a.diagonal()[...] = 1.0  # NumPy: "assignment destination is read-only"
    assert a.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    imag = a.imag
    imag[0, 0] = 5.0  # CuPy: a new zero array; NumPy: read-only zeros
    assert a.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    wide = strict_device.broadcast_to(_device([1.0, 2.0]), (3, 2))
    wide[0, 0] = 4.0  # CuPy's broadcast_to is a writable view
    assert wide.tolist()[2] == [4.0, 2.0]


# -- core.pyx __nonzero__ and __pos__: CuPy warns where NumPy 2 raises ---------------------------
def test_truth_of_an_empty_array_and_plus_of_a_bool_array_warn_as_on_cupy():
    with pytest.warns(DeprecationWarning, match="truth value of an empty array"):
        assert bool(_device([])) is False  # NumPy 2.2 raises ValueError
    flags = _device([1.0, 0.0]) > 0.5
    with pytest.warns(DeprecationWarning, match="Applying '\\+' to a non-numerical array"):
        twin = +flags
    assert twin.tolist() == [True, False] and twin is not flags
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bool(_device([1.0])) and (+_device([-1.0])).tolist() == [-1.0]


# -- core.pyx __pow__: x ** 2 is cupy.square(x, dtype=result_type(x.dtype, 2)) ------------------
def test_bool_squared_is_int64_as_cupys_square():
    flags = _device([True, False], np.bool_)
    assert (flags**2).dtype == np.int64 and (flags**2).tolist() == [1, 0]  # NumPy: int8
    assert (_device([3], np.int8) ** 2).dtype == np.int8
    assert (_device([3.0], np.float32) ** 2).dtype == np.float32


# -- _kernel.pyx ufunc methods: reduce/accumulate of add and multiply only, at by scatter ------
def test_ufunc_methods_as_cupys():
    a = _device([1.0, 2.0, 3.0])
    assert strict_device.add.reduce(a).item() == 6.0  # was an AttributeError
    assert strict_device.multiply.accumulate(a).tolist() == [1.0, 2.0, 6.0]
    assert np.add.reduce(a).item() == 6.0
    for refused in (lambda: np.maximum.reduce(a), lambda: strict_device.maximum.reduce(a),
                    lambda: np.subtract.accumulate(a)):  # fmt: skip
        with pytest.raises(NotImplementedError, match="not supported by CuPy"):
            refused()
    outer = np.multiply.outer(a, np.array([1.0, 10.0]))  # ufunc.outer calls cupy.array
    assert isinstance(outer, StrictArray) and outer.tolist()[2] == [3.0, 30.0]
    assert strict_device.add.outer([1.0], a).tolist() == [[2.0, 3.0, 4.0]]
    target = strict_device.zeros(3)
    strict_device.add.at(target, np.array([0, 0, 2]), 1.0)  # host indices, as _scatter_op
    np.maximum.at(target, np.array([1]), np.array([7.0]))
    assert target.tolist() == [2.0, 7.0, 1.0]
    with pytest.raises(TypeError, match="numpy.add.at into int64"):
        np.add.at(strict_device.zeros(2, np.int64), np.array([0]), 1)
    with pytest.raises(TypeError, match="takes a device array first"):
        strict_device.add.reduce(np.ones(2))
