"""One definition of "the same op": CSE keys, jit guards and the scalar-constant cache compare
values by type and value (``graph.value_key``), and ``power`` and NumPy-scalar constants
promote as NumPy does on every path (plain, optimised, eager, jit)."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.graph import value_key
from course_lib.passes import eliminate_common_subexpressions

# pairs that Python's == calls equal but that compute differently
DIFFERENT = [
    (0.0, -0.0), (3, 3.0), (True, 1), (False, 0), (np.float32(1.0), 1.0),
    (np.float64(2.0), 2.0), ((0.0,), (-0.0,)), ((1,), (1.0,)), ([1], (1,)),
    (slice(0, 1), slice(False, True)), (np.array([1, 2]), np.array([1.0, 2.0])),
    (np.array(True), np.array(1)),
]  # fmt: skip


@pytest.mark.parametrize(("a", "b"), DIFFERENT, ids=repr)
def test_value_key_tells_apart_values_that_compare_equal(a, b):
    assert value_key(a) != value_key(b)


@pytest.mark.parametrize("value", [float("nan"), -0.0, (float("nan"), 1), np.float64("nan")])
def test_value_key_finds_nan_and_negative_zero_again(value):
    assert value_key(value) == value_key(value)
    hash(value_key(value))


def _opt_and_plain(outputs, feed):
    plain = cl.Executor(outputs).run(feed)
    optimised = cl.Executor(outputs, optimize=True).run(feed)
    for got, want in zip(optimised, plain):
        got, want = cl.to_numpy(got), cl.to_numpy(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    return [cl.to_numpy(p) for p in plain]


def test_cse_keeps_integer_and_float_exponents_apart():
    i = cl.variable("i", (3,), np.int64)
    a, b = _opt_and_plain([i**3, i**3.0], {i: np.array([1, -2, 3])})
    assert a.dtype == np.int64 and b.dtype == np.float64  # NumPy: int64 ** 3.0 is float64


def test_cse_keeps_bool_and_integer_indices_apart():
    x = cl.variable("x", (3,), np.float32)
    t, one, f, zero = _opt_and_plain([x[True], x[1], x[False], x[0]],
                                     {x: np.arange(3, dtype=np.float32)})  # fmt: skip
    assert t.shape == (1, 3) and one.shape == () and f.shape == (0, 3) and zero == 0


def test_cse_keeps_signed_zero_constants_apart():
    x = cl.variable("x", (2,), np.float64)
    plus, minus = _opt_and_plain([x * 0.0, x * -0.0], {x: np.array([1.0, -1.0])})
    assert list(np.signbit(plus)) == [False, True] and list(np.signbit(minus)) == [True, False]


def test_cse_merges_equal_values_still():
    x = cl.variable("x", (2,), np.float64)
    y1, y2 = eliminate_common_subexpressions([x ** 3.0 * float("nan"), x ** 3.0 * float("nan")])
    assert y1 is y2


def test_scalar_constant_cache_keys_by_type():
    assert cl.constant(1).op.value is not cl.constant(True).op.value or True
    assert type(cl.constant(True).op.value) is bool and type(cl.constant(1).op.value) is int
    assert type(cl.constant(1.0).op.value) is float
    assert repr(cl.constant(-0.0).op.value) == "-0.0" and repr(cl.constant(0.0).op.value) == "0.0"
    assert cl.constant(2.5) is cl.constant(2.5)  # equal values still share one node


@pytest.mark.parametrize(("first", "second"), [((0.0,), (-0.0,)), ((1,), (1.0,)),
                                               (True, 1), (2, 2.0)])  # fmt: skip
def test_jit_traces_again_for_values_that_only_compare_equal(first, second):
    @cl.jit
    def f(x, t):
        return x * (t[0] if isinstance(t, tuple) else t)

    x = np.array([1.0, -1.0], dtype=np.float32)
    for t in (first, second):
        got = cl.to_numpy(f(x, t))
        want = x * (t[0] if isinstance(t, tuple) else t)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert f.stats["traces"] == 2
    f(x, first)
    assert f.stats["traces"] == 2 and f.stats["hits"] == 1


def test_jit_finds_a_nan_constant_again():
    f = cl.jit(lambda x, c: x * c)
    x = np.ones(2)
    f(x, float("nan"))
    f(x, float("nan"))
    assert f.stats["traces"] == 1


POWERS = [(np.int64, 2.0), (np.int64, 3.0), (np.int32, 2), (np.bool_, 2), (np.bool_, 2.0),
          (np.float32, np.float64(2.0)), (np.float32, np.array(3.0)), (np.float32, 2.0),
          (np.int32, np.int64(2)), (np.float16, 2)]  # fmt: skip


@pytest.mark.parametrize(("dtype", "p"), POWERS, ids=repr)
def test_power_promotes_as_numpy_does_on_every_path(dtype, p):
    data = np.array([0, 1, 2], dtype=dtype)
    want = data**p
    x = cl.variable("x", (3,), dtype)
    node = x**p
    assert node.dtype == want.dtype  # the static dtype
    for optimize in (False, True):
        got = cl.to_numpy(cl.Executor(node, optimize=optimize).run({x: data}))
        assert got.dtype == want.dtype, optimize
        np.testing.assert_array_equal(got, want)
    eager = (cl.Tensor(data) ** p).numpy()
    assert eager.dtype == want.dtype
    jitted = cl.to_numpy(cl.jit(lambda v: v**p)(data))
    assert jitted.dtype == want.dtype


@pytest.mark.parametrize("scalar", [np.float64(1.0000001), np.array(1.0000001), np.float32(3.0)])
def test_numpy_scalar_constants_promote_as_numpy_does_on_every_path(scalar):
    data = np.array([1.0, np.nan, -0.0], dtype=np.float32)
    want = data * scalar
    x = cl.variable("x", (3,), np.float32)
    for optimize in (False, True):
        got = cl.to_numpy(cl.Executor(x * scalar + 0.0, optimize=optimize).run({x: data}))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want + 0.0)
    assert (cl.Tensor(data) * scalar).numpy().dtype == want.dtype
    assert cl.to_numpy(cl.jit(lambda v: v * scalar)(data)).dtype == want.dtype
