"""The strict stand-in for CuPy under review (review 9): it must refuse what CuPy refuses and
take what CuPy takes (the oracle: CuPy 13/14's ``cupy/_core`` sources, cited per test), and
its results must stay on the device.

These tests pin the devices themselves, so they say the same on every device.
"""

import copy

import numpy as np
import pytest

from course_lib import backend, strict_device
from course_lib.errors import DeviceError
from course_lib.strict_device import StrictArray


def _device(values, dtype=np.float64):
    return strict_device.asarray(np.asarray(values, dtype=dtype))


# -- copy.copy copies (CuPy's __copy__ is self.copy()) -------------------------------------------
def test_copy_copy_of_a_device_array_is_a_copy_not_an_alias():
    a = _device([1.0, 2.0])
    for twin in (copy.copy(a), copy.deepcopy(a)):
        assert isinstance(twin, StrictArray)
        twin[0] = 9.0
    assert a.tolist() == [1.0, 2.0]  # copy.copy shared the data: a[0] became 9.0


# -- NumPy index arrays: CuPy's _prepare_slice_list copies them in -------------------------------
def test_numpy_index_arrays_are_taken_as_cupy_copies_them_in():
    a = _device(np.arange(6.0))
    assert a[np.array([0, 2])].tolist() == [0.0, 2.0]
    assert a[np.arange(6) > 3].tolist() == [4.0, 5.0]
    assert _device(np.arange(6.0).reshape(2, 3))[np.array([1, 0]), np.array([2, 0])].tolist() == [
        5.0,
        0.0,
    ]
    assert isinstance(a[np.array([0, 2])], StrictArray)
    assert strict_device.take(a, np.array([5, 1])).tolist() == [5.0, 1.0]
    assert a.take(np.array([5, 1])).tolist() == [5.0, 1.0]
    assert np.take(a, np.array([5, 1])).tolist() == [5.0, 1.0]
    assert strict_device.take(a, indices=np.array([3])).tolist() == [3.0]


def test_assignment_takes_numpy_values_where_cupy_does():
    a = _device(np.zeros(4))
    a[np.array([0, 2])] = np.array([1.0, 3.0])  # through an index array: core.array(value)
    a[1:2] = np.array(2.0)  # a 0-d one anywhere: fill(value.item())
    assert a.tolist() == [1.0, 2.0, 3.0, 0.0]
    with pytest.raises(TypeError, match="assignment: unsupported type numpy.ndarray"):
        a[:2] = np.array([5.0, 6.0])  # CuPy: "non-scalar numpy.ndarray cannot be used for fill"
    with pytest.raises(TypeError, match="unsupported type numpy.ndarray"):
        a + np.ones(4)  # operands stay refused
    with pytest.raises(TypeError, match="unsupported type numpy.ndarray"):
        a[np.array([0])] += np.ones(1)


# -- comparisons: CuPy's __richcmp__ ------------------------------------------------------------
def test_comparisons_take_a_0d_numpy_array_and_none_as_cupy_does():
    a = _device([1.0, 2.0, 3.0])
    assert (a < np.array(2.5)).tolist() == [True, True, False]  # other.item(): accepted
    assert (a == np.array(2.0)).tolist() == [False, True, False]
    with pytest.raises(TypeError, match="unsupported type numpy.ndarray"):
        a + np.array(2.0)  # arithmetic with a 0-d NumPy array: still refused, as on CuPy
    compared = {False: (a == None, a == object()), True: (a != None,)}  # noqa: E711
    for want, results in compared.items():
        for got in results:
            assert isinstance(got, StrictArray) and got.tolist() == [want] * 3


# -- asarray of a list of device arrays: cupy.array joins them on the device ----------------------
def test_asarray_joins_a_list_of_device_arrays():
    a, b = _device([1.0, 2.0]), _device([3, 4], np.int32)
    joined = strict_device.asarray([a, b])
    assert isinstance(joined, StrictArray) and joined.dtype == np.float64
    assert joined.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert strict_device.array(((a[0], a[1]),)).tolist() == [[1.0, 2.0]]
    with pytest.raises(TypeError, match="Implicit conversion"):
        strict_device.asarray([a[0], 1.0])  # mixed: cupy falls back to numpy.array, refused


# -- scatter_add: cupyx.scatter_add's dtypes, host indices and values ----------------------------
@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint8, np.bool_, np.complex128])
def test_scatter_add_refuses_the_dtypes_cupys_atomic_add_lacks(dtype):
    with pytest.raises(TypeError, match=f"scatter_add into {np.dtype(dtype)}"):
        strict_device.scatter_add(strict_device.zeros(3, dtype), _device([0, 0], np.int64), 1)


def test_scatter_add_takes_host_indices_casts_values_and_names_a_host_target():
    out = strict_device.zeros(3, np.int32)
    strict_device.scatter_add(out, np.array([0, 0, 2]), np.array([1.5, 1.5, 2.5]))
    assert out.tolist() == [2, 0, 2]  # values cast to int32 as CuPy's astype (NumPy raised)
    floats = strict_device.zeros(3, np.float32)
    backend.scatter_add(strict_device, floats, _device([1, 1], np.int64), _device([0.5, 0.25]))
    assert floats.tolist() == [0.0, 0.75, 0.0] and floats.dtype == np.float32
    with pytest.raises(TypeError, match="scatter_add adds into a device array, not ndarray"):
        strict_device.scatter_add(np.zeros(3), _device([0], np.int64), _device([1.0]))


# -- out= is returned itself, as CuPy returns it -------------------------------------------------
def test_out_is_returned_itself():
    a, out = _device([1.0, 2.0]), strict_device.zeros(2)
    assert strict_device.add(a, 1.0, out=out) is out
    assert np.multiply(a, 2.0, out=out) is out and out.tolist() == [2.0, 4.0]
    total = strict_device.zeros(())
    assert a.sum(out=total) is total and total.item() == 3.0


# -- CuPy's result_type, can_cast, ... read NumPy arrays' dtypes ---------------------------------
def test_dtype_and_shape_queries_take_numpy_arrays_as_cupys_do():
    host = np.ones((2, 3), np.float32)
    assert strict_device.result_type(host, _device([1], np.int64)) == np.float64
    assert strict_device.can_cast(host, np.float64)
    assert strict_device.min_scalar_type(host) == np.float32
    assert strict_device.ndim(host) == 2 and strict_device.shape(host) == (2, 3)
    assert np.result_type(_device([1.0], np.float32), host) == np.float32


# -- random, linalg, fft: CuPy's return device arrays --------------------------------------------
def test_random_linalg_and_fft_give_device_arrays():
    rng = strict_device.random.default_rng(0)
    made = {
        "random.standard_normal": strict_device.random.standard_normal((2, 3)),
        "random.normal": strict_device.random.normal(0.0, 1.0, 4),
        "random.random()": strict_device.random.random(),  # cupy: a 0-d array
        "random.permutation": strict_device.random.permutation(_device([1, 2, 3], np.int64)),
        "default_rng().standard_normal": rng.standard_normal(3),
        "default_rng().integers": rng.integers(0, 5, 3),
        "linalg.norm": strict_device.linalg.norm(_device([3.0, 4.0])),
        "fft.rfft": strict_device.fft.rfft(_device([1.0, 1.0])),
    }
    for name, value in made.items():
        assert isinstance(value, StrictArray), name  # were NumPy arrays and floats
    assert strict_device.linalg.norm(_device([3.0, 4.0])).item() == 5.0
    with pytest.raises(TypeError, match="linalg.norm: unsupported type numpy.ndarray"):
        strict_device.linalg.norm(np.ones(2))


# -- what CuPy arrays have ----------------------------------------------------------------------
def test_divmod_real_imag_and_in_place_shifts():
    a = _device([7, 8], np.int64)
    quotient, rest = divmod(a, 3)
    assert quotient.tolist() == [2, 2] and rest.tolist() == [1, 2]
    assert [v.tolist() for v in divmod(10, a)] == [[1, 1], [3, 2]]
    alias = a
    a <<= 1  # in place, as CuPy's __ilshift__ (was a new array: alias kept the old values)
    assert alias.tolist() == [14, 16] and alias is a
    z = _device([1 + 2j], np.complex128)
    assert z.real.tolist() == [1.0] and z.imag.tolist() == [2.0]
    assert isinstance(z.real, StrictArray)


# -- the backend ---------------------------------------------------------------------------------
def test_array_module_refuses_a_name_that_is_not_a_device():
    with pytest.raises(DeviceError, match="array_module: 'tpu' is not a device"):
        backend.array_module("tpu")  # was NumPy, silently
    assert backend.array_module(" Strict") is strict_device
    if not backend.gpu_available():
        with pytest.raises(DeviceError, match="'gpu' asks for the GPU, but CuPy"):
            backend.array_module("gpu")  # was a bare ImportError


def test_complex_long_double_data_is_a_device_error_naming_where_it_was_handed_in():
    with (
        backend.use_device("strict"),
        pytest.raises(DeviceError, match=r"fed to x holds complex256 .*\.astype\('complex128'\)"),
    ):
        backend.to_device(np.ones(2, np.clongdouble), "fed to x")
