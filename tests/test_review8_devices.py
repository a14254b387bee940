"""The device boundary under attack (review 8): threads and use_device, big-endian host data,
and the dtypes CuPy has no arrays of.

These tests pin the devices themselves (the CPU and the strict stand-in), so they say the same
on every device `make test` runs them on.
"""

import threading
from fractions import Fraction

import numpy as np
import pytest

import course_lib as cl
from course_lib import strict_device
from course_lib.errors import DeviceError, FeedError
from course_lib.strict_device import StrictArray


@pytest.fixture
def restored():
    """Put back the device every thread runs on, whatever the test left."""
    before = cl.get_device()
    yield
    cl.set_device(before)


# -- use_device is the thread's own -------------------------------------------------------------
def test_a_use_device_block_in_another_thread_changes_neither_this_threads_device_nor_its_way_back(
    restored,
):
    cl.set_device("cpu")
    inside, done = threading.Barrier(2, timeout=5), threading.Barrier(2, timeout=5)
    seen = {}

    def worker():
        with cl.use_device("strict"):
            seen["worker"] = cl.get_device()
            inside.wait()
            done.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait()  # the worker's strict block is open now
    seen["main"] = cl.get_device()
    x = cl.variable("x")
    seen["main computes on"] = type(cl.evaluate(x * 2.0, {x: np.ones(2)})).__name__
    with cl.use_device("cpu"):  # the blocks end in the other order than they began
        done.wait()
        thread.join(5)
    seen["main after"] = cl.get_device()
    assert seen == {"worker": "strict", "main": "cpu", "main computes on": "ndarray",
                    "main after": "cpu"}  # fmt: skip


def test_set_device_inside_a_block_lasts_until_the_block_ends(restored):
    cl.set_device("cpu")
    with cl.use_device("strict"):
        cl.set_device("cpu")  # model.to("cpu") inside a block does this
        assert cl.get_device() == "cpu" and cl.backend.xp() is np
        with pytest.raises(RuntimeError), cl.use_device("strict"):
            assert cl.backend.xp() is strict_device
            raise RuntimeError
        assert cl.get_device() == "cpu"
    assert cl.get_device() == "cpu"
    cl.set_device("strict")  # outside any block: for good
    assert cl.get_device() == "strict" and cl.backend.xp() is strict_device


# -- big-endian host data enters in the native byte order, as CuPy makes it ----------------------
@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_big_endian_data_enters_every_device_in_the_native_byte_order(device):
    big = np.arange(4, dtype=">f4")
    with cl.use_device(device):
        x = cl.variable("x", dtype=np.float32)
        out = cl.evaluate(x, {x: big})  # the declared float32: was refused as >f4
        assert out.dtype == np.float32
        np.testing.assert_array_equal(cl.to_numpy(out), [0.0, 1.0, 2.0, 3.0])
        assert cl.to_device(np.arange(3, dtype=">i8")).dtype == np.int64
        assert cl.Tensor(big).dtype == np.float32
        assert cl.constant(big).dtype == np.float32
        y = cl.variable("y")
        assert cl.evaluate(y, {y: big}).dtype == np.float32
    assert strict_device.asarray(big).dtype == np.float32  # cupy.asarray byte-swaps too


# -- the strict device holds CuPy's dtypes only --------------------------------------------------
def test_the_strict_device_refuses_the_dtypes_cupy_has_no_arrays_of():
    a = strict_device.asarray(np.arange(3.0))
    refused = {
        "long double": lambda: strict_device.asarray(np.ones(2, np.longdouble)),
        "astype(object)": lambda: a.astype(object),
        "a Fraction operand (an object array)": lambda: a + Fraction(1, 2),
        "a long double operand": lambda: a * np.longdouble(2),
        "strings": lambda: strict_device.asarray(np.array(["a"])),
    }
    for name, call in refused.items():
        with pytest.raises(ValueError, match="Unsupported dtype .* strict device"):
            call()
            pytest.fail(name)
    for dtype in (np.bool_, np.int8, np.uint64, np.float16, np.float32, np.complex128):
        assert isinstance(strict_device.asarray(np.ones(2, dtype)), StrictArray)


def test_long_double_data_is_a_device_error_naming_where_it_was_handed_in():
    x = cl.variable("x")
    with cl.use_device("strict"):
        with pytest.raises(DeviceError, match=r"fed to variable x holds float128 .* 'strict'"):
            cl.evaluate(x * 2.0, {x: np.ones(2, np.longdouble)})
        with pytest.raises(DeviceError, match=r"data of a Tensor holds float128"):
            cl.Tensor(np.ones(2, np.longdouble))
        with pytest.raises(FeedError, match="object"):  # not numbers: refused as on the CPU
            cl.evaluate(x * 2.0, {x: np.array([None, 1.0])})
    with cl.use_device("cpu"):  # the host has long doubles
        assert cl.evaluate(x * 2.0, {x: np.ones(2, np.longdouble)}).dtype == np.longdouble


@pytest.mark.parametrize("make", [lambda: np.longdouble(2),
                                  lambda: cl.constant(np.ones(2, np.longdouble))])  # fmt: skip
def test_a_long_double_constant_on_a_device_is_a_device_error_naming_it(make):
    """The constant was copied to the device as it was: the strict device's (CuPy's)
    "Unsupported dtype float128", naming neither the constant nor what to do."""
    x = cl.variable("x", (2,))
    with cl.use_device("strict"), pytest.raises(
        DeviceError, match=r"the constant .* holds float128 values, which the 'strict' device"
    ):
        cl.evaluate(x * make(), {x: np.ones(2)})
    with cl.use_device("cpu"):  # the CPU computes in long double
        assert cl.evaluate(x * make(), {x: np.ones(2)}).dtype == np.longdouble
