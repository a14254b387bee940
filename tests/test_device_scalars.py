"""Plain numbers and lists at the device boundary (the device review's findings 1, 3, 6, 7).

A scalar constant's value and a number seed of ``grad``/``jvp`` stay Python numbers in the
graph; ops that are not elementwise (reductions, reshapes, ``where``, indexing, ...) take
them :func:`~course_lib.ops.axes.as_array`, so they give on the strict device (which refuses
numbers where CuPy does) what they give on the CPU. Lists of device scalars cross the
boundary through the host; the strict device refuses lists where CuPy does.

These tests pin the devices themselves, so they say the same on every device.
"""

import numpy as np
import pytest

import course_lib as cl
from course_lib import backend, strict_device
from course_lib.errors import DeviceError
from course_lib.gradcheck import difference_errors
from course_lib.strict_device import StrictArray


def _on(device: str, build, feed=None, optimize=False):
    """The value of the graph ``build()`` makes, run on ``device``, on the host."""
    with cl.use_device(device):
        out = cl.Executor(build(), optimize=optimize).run(feed or {}, allow_unused=True)
        return np.asarray(cl.to_numpy(out[0] if isinstance(out, list) else out))


def _same_on_cpu_and_strict(build, feed=None):
    for optimize in (False, True):  # folding computes constants on the host: both paths
        want = _on("cpu", build, feed, optimize)
        got = _on("strict", build, feed, optimize)
        assert got.dtype == want.dtype, (optimize, got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"optimize={optimize}")


# -- finding 1: numbers reaching ops that are not elementwise ------------------------------------
TWO, THREE = 2.0, 3.0
VECTOR = [1.0, 2.0, 3.0]
ON_SCALAR_CONSTANTS = {
    "sum": lambda: cl.sum(cl.constant(TWO)),
    "mean": lambda: cl.mean(cl.constant(TWO)),
    "max": lambda: cl.max(cl.constant(TWO)),
    "logsumexp": lambda: cl.logsumexp(cl.constant(TWO)),
    "sum of a bool": lambda: cl.sum(cl.constant(True)),
    "mean of an int": lambda: cl.mean(cl.constant(3)),
    "reshape": lambda: cl.reshape(cl.constant(TWO), (1, 1)),
    "transpose": lambda: cl.transpose(cl.constant(TWO)),
    "permute": lambda: cl.permute(cl.constant(TWO), ()),
    "where": lambda: cl.where(cl.constant(True), cl.constant(TWO), cl.constant(THREE)),
    "where of a comparison": lambda: cl.where(cl.constant(TWO) > THREE, TWO, THREE),
    "getitem": lambda: cl.getitem(cl.constant(TWO), ()),
    "getitem None": lambda: cl.getitem(cl.constant(TWO), None),
    "take a number": lambda: cl.take(cl.constant(VECTOR), 1),
    "cross_entropy of a number": lambda: cl.cross_entropy(cl.constant(VECTOR), 2),
}


@pytest.mark.parametrize("case", ON_SCALAR_CONSTANTS)
def test_ops_on_scalar_constants_give_the_cpu_values_on_the_device(case):
    _same_on_cpu_and_strict(ON_SCALAR_CONSTANTS[case])


def test_sum_to_a_shape_known_when_run_takes_a_number():
    like = cl.variable("like")  # no static shape: SumTo reads it when the graph runs
    _same_on_cpu_and_strict(lambda: cl.sum_to(cl.constant(TWO), like), {like: np.float64(1.0)})


x0 = cl.variable("x0", shape=())
xv = cl.variable("xv", shape=(3,))
FEED = {x0: 1.0, xv: np.array([1.0, 2.0, 0.5])}
NUMBER_SEEDS = {
    "grad of sum": lambda: cl.grad(cl.sum(cl.exp(x0)), x0, seed=2.0),
    "grad of mean": lambda: cl.grad(cl.mean(x0 * 3.0), x0, seed=2.0),
    "grad of max": lambda: cl.grad(cl.max(xv), xv, seed=2.0),
    "grad of logsumexp": lambda: cl.grad(cl.logsumexp(xv), xv, seed=2.0),
    "grad, an int seed": lambda: cl.grad(cl.sum(xv), xv, seed=2),
    "grad of transpose": lambda: cl.grad(cl.transpose(x0), x0, seed=2.0),
    "grad of getitem": lambda: cl.grad(cl.getitem(xv, 1), xv, seed=2.0),
    "grad of a gather": lambda: cl.grad(cl.getitem(xv, np.array(1)), xv, seed=2.0),
    "grad of reshape": lambda: cl.grad(cl.reshape(x0, (1,))[0], x0, seed=2.0),
    "grad of take": lambda: cl.grad(cl.take(xv, 1), xv, seed=2.0),
    "grad of cross_entropy": lambda: cl.grad(cl.cross_entropy(xv, 2), xv, seed=2.0),
    "jvp of sum": lambda: cl.jvp(cl.sum(x0), {x0: 1.0}),
    "jvp of mean": lambda: cl.jvp(cl.mean(x0 * 3.0), {x0: 1.0}),
    "jvp of reshape": lambda: cl.jvp(cl.reshape(x0, (1, 1)), {x0: 1.0}),
    "jvp of transpose": lambda: cl.jvp(cl.transpose(x0), {x0: 1.0}),
    "jvp of getitem": lambda: cl.jvp(cl.getitem(x0, ()), {x0: 1.0}),
    "jvp of concat": lambda: cl.jvp(
        cl.concat([cl.reshape(x0, (1,)), x0 * cl.ones_like(xv)]), {x0: 1.0}
    ),
    "jvp of softmax": lambda: cl.jvp(cl.softmax(cl.reshape(x0, (1,))), {x0: 1.0}),
}


@pytest.mark.parametrize("case", NUMBER_SEEDS)
def test_number_seeds_give_the_cpu_derivatives_on_the_device(case):
    _same_on_cpu_and_strict(NUMBER_SEEDS[case], FEED)


def test_a_number_seed_scales_the_gradient():
    with cl.use_device("strict"):
        g = cl.evaluate(cl.grad(cl.sum(xv * xv), xv, seed=2.0), {xv: [1.0, 2.0, 3.0]})
        assert isinstance(g, StrictArray)
        np.testing.assert_allclose(cl.to_numpy(g), [4.0, 8.0, 12.0])


def test_logsumexp_of_a_number_on_the_cpu_is_its_value():
    with cl.use_device("cpu"):
        for optimize in (False, True):  # it raised a raw AttributeError both ways
            out = cl.Executor(cl.logsumexp(cl.constant(2.0)), optimize=optimize).run()
            np.testing.assert_allclose(out, 2.0)


# -- finding 3: lists of device scalars ----------------------------------------------------------
def test_lists_of_device_scalars_enter_and_leave_the_device():
    with cl.use_device("strict"):
        a = cl.to_device(np.float64(1.5))
        losses = [a, a * 2.0]  # collected step by step
        np.testing.assert_array_equal(cl.to_numpy(losses), [1.5, 3.0])
        np.testing.assert_array_equal(cl.to_numpy(([a, 1.0], (a, a))), [[1.5, 1.0], [1.5, 1.5]])
        assert isinstance(cl.to_device(losses), StrictArray)
        np.testing.assert_array_equal(cl.Tensor(losses).numpy(), [1.5, 3.0])
        np.testing.assert_array_equal(cl.to_numpy(cl.evaluate(cl.constant(losses) * 2.0)),
                                      [3.0, 6.0])  # fmt: skip
        x = cl.variable("x")
        np.testing.assert_array_equal(cl.to_numpy(cl.evaluate(x * 2.0, {x: losses})), [3.0, 6.0])
    with cl.use_device("cpu"):  # the way out takes any device's arrays, as for one array
        np.testing.assert_array_equal(cl.to_numpy(losses), [1.5, 3.0])


def test_a_list_holding_another_devices_array_is_refused_by_name():
    with cl.use_device("strict"):
        a = cl.to_device(np.float64(1.5))
    with cl.use_device("cpu"):
        x = cl.variable("x")
        for enter in (lambda: cl.Tensor([1.0, a]), lambda: cl.evaluate(x * 2.0, {x: [a, a]})):
            with pytest.raises(DeviceError, match="'strict' device, but course_lib runs on 'cpu'"):
                enter()
    for device in ("cpu", "strict"):  # CPU-only code takes host data only, in lists too
        with cl.use_device(device), pytest.raises(DeviceError, match="CPU only"):
            backend.host_array([a, 1.0], "conv2d: x")
    np.testing.assert_array_equal(backend.host_array([[1.0], (2.0,)]), [[1.0], [2.0]])


# -- finding 6: the strict device refuses lists where CuPy does ----------------------------------
def test_strict_device_refuses_lists_where_cupy_does():
    a = strict_device.asarray(np.arange(3.0))
    three = [1.0, 2.0, 3.0]
    refused = {  # CuPy: ufunc operands, where's and clip's (ufuncs inside), dot's (ndarray
        # only), the first argument of sum, transpose..., concatenate's elements
        "exp": lambda: strict_device.exp(three), "add": lambda: strict_device.add(a, (1.0,) * 3),
        "matmul": lambda: strict_device.matmul(a, three), "sum": lambda: strict_device.sum(three),
        "transpose": lambda: strict_device.transpose([three]),
        "where": lambda: strict_device.where([True, False, True], a, 0.0),
        "where's y": lambda: strict_device.where(a > 0, a, three),
        "numpy.where": lambda: np.where(a > 0, a, three),
        "dot": lambda: strict_device.dot(a, three), "a.dot": lambda: a.dot(three),
        "clip": lambda: a.clip(three, 5.0),
        "concatenate": lambda: strict_device.concatenate([a, [1.0]]),
        "numpy.concatenate": lambda: np.concatenate([a, [1.0]]),
        "stack": lambda: strict_device.stack([a, 1.0]),
        "ascontiguousarray": lambda: strict_device.ascontiguousarray(three),
    }  # fmt: skip
    for name, call in refused.items():
        try:
            call()
        except TypeError as error:
            assert "CuPy refuses it too" in str(error), name
        else:
            pytest.fail(f"{name} took a list")
    # what CuPy takes: sequences of arrays, einsum's operands (cupy.asarray), shapes and axes,
    # take's indices, a list assigned into an array
    assert isinstance(strict_device.concatenate((a, a)), StrictArray)
    assert isinstance(strict_device.stack([a, a]), StrictArray)
    assert float(strict_device.einsum("i,i->", a, three)) == 8.0
    assert strict_device.take(a, [2, 0]).tolist() == [2.0, 0.0]
    assert a.reshape((3, 1)).shape == (3, 1) and strict_device.zeros((2, 3)).shape == (2, 3)
    assert strict_device.sum(a[None], axis=(0, 1)).tolist() == 3.0
    a[:] = three
    assert a.tolist() == three


# -- finding 7: gradcheck's difference quotients of a function returning device scalars ----------
def test_difference_errors_of_a_function_returning_device_scalars():
    with cl.use_device("strict"):
        x = cl.variable("x", shape=())
        run = cl.Executor(cl.exp(x))
        errors = difference_errors(lambda v: run.run({x: v}), np.exp(1.0), 1.0, [1e-2, 1e-4])
    for name, values in errors.items():
        assert isinstance(values, np.ndarray) and values.shape == (2,), name
        assert values[1] < values[0], name  # a smaller step, a smaller error
