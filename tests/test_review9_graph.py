"""Review 9 (graph core): static dtypes against NumPy's with Python numbers on either side,
errors of the right class when built or run, value keys bit for bit, rebuild and interpret
with changed or known nodes, parameter checks and the number format of tables."""

import fractions
import itertools
import math
import warnings

import numpy as np
import pytest

import course_lib as cl
from course_lib import params
from course_lib.graph import interpret, rebuild, value_key
from course_lib.tables import number

DTYPES = ["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64"]
NUMBERS = [True, 2, -1, 1000, 2.5, 1e300, 2**63]
OPERATORS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


def _numpy(fn, a, b):
    """NumPy's result dtype of ``fn(a, b)``, or None where NumPy refuses."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(fn(a, b)).dtype
    except (TypeError, ValueError, ArithmeticError):
        return None


@pytest.mark.parametrize("symbol", OPERATORS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_static_dtype_with_a_python_number_is_numpys(symbol, dtype):
    """Was None for every Python number (x * 2.0 had no dtype), and int8 + 1000 was built."""
    fn, x = OPERATORS[symbol], cl.variable("x", (2,), dtype)
    feed = {x: np.ones(2, dtype)}
    for number_, left in itertools.product(NUMBERS, (False, True)):
        operands = (number_, feed[x]) if left else (feed[x], number_)
        expected = _numpy(fn, *operands)
        try:
            y = fn(number_, x) if left else fn(x, number_)
        except cl.NumericError:  # refused when built: NumPy refuses it too
            assert expected is None, (dtype, symbol, number_, left)
            continue
        if expected is None:  # no NumPy loop (bool - True): no dtype claimed, the run refuses
            assert y.dtype is None
            with pytest.raises(cl.CourseLibError):
                cl.evaluate(y, feed)
            continue
        assert y.dtype is not None and y.dtype == expected, (dtype, symbol, number_, left)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert cl.evaluate(y, feed).dtype == expected


def test_bool_minus_bool_and_minus_bool_claim_no_bool_dtype():
    b = cl.variable("b", (3,), "bool")
    for y in (b - b, -b, b - np.True_):
        assert y.dtype is None  # was bool, though NumPy refuses to compute it
        with pytest.raises(cl.GraphError, match="boolean"):
            cl.evaluate(y, {b: np.ones(3, bool)})


@pytest.mark.parametrize(
    ("dtype", "build"),
    [
        ("int8", lambda x: x + 1000),
        ("int8", lambda x: 1000 + x),
        ("uint8", lambda x: x * -1),
        ("int64", lambda x: x - 2**63),
        ("int8", lambda x: x**2**70),
    ],
)
def test_a_python_number_the_dtype_cannot_hold_is_refused_when_built(dtype, build):
    x = cl.variable("x", (3,), dtype)  # was built (dtype unknown), refused only when run
    with pytest.raises(cl.NumericError, match=rf"cannot compute it on \(.*x: \(3,\) {dtype}"):
        build(x)


def test_an_integer_to_a_negative_power_is_a_parameter_error_when_run():
    j = cl.variable("j", (2,), "int64")
    with pytest.raises(cl.ParameterError, match=r"pow\(-1\) at node .*negative integer powers"):
        cl.evaluate(j**-1, {j: np.ones(2, np.int64)})  # was a ShapeError: the shapes fit
    with pytest.raises(cl.ShapeError):  # shapes that do not fit stay a ShapeError
        cl.evaluate(cl.variable("a", (None,)) + cl.variable("c", (None,)),
                    {"a": np.ones(2), "c": np.ones(3)})  # fmt: skip


def test_a_bad_input_names_the_op_and_the_input():
    x = cl.variable("x", (2,), "float64")
    with pytest.raises(cl.GraphError, match=r"^add: input 2: cannot use a str"):
        x + "a"  # was 'cannot use a str as a graph value', no op
    with pytest.raises(cl.ShapeError, match=r"^mul: input 2: constant\(\): .*one shape"):
        x * [[1.0, 2.0], [3.0]]  # was NumPy's bare ValueError


def test_value_keys_and_cached_constants_keep_the_sign_of_a_nan():
    nan = float("nan")
    assert value_key(nan) == value_key(nan) and value_key(-nan) != value_key(nan)
    c = cl.constant(-nan)  # was the cached +nan constant
    assert np.signbit(c.op.value)
    x = cl.variable("x", (2,), "float64")
    assert np.signbit(cl.evaluate(x * -nan, {x: np.ones(2)})).all()
    assert value_key(0.0) != value_key(-0.0) and value_key(1.5) == value_key(1.5)


def test_a_huge_python_int_constant_has_a_name():
    assert cl.constant(10**5000).name == "2^16609…"  # was Python's ValueError (4300 digits)
    assert cl.constant(-(2**70)).name == "-2^70…" and cl.constant(2**63).name == str(2**63)


def test_exponents_numpy_cannot_compute_are_refused():
    x = cl.variable("x", (2,), "float64")
    with pytest.raises(cl.ParameterError, match="within float's range"):
        x**10**400  # was a bare OverflowError (from the op's label)
    with pytest.raises(cl.GraphError, match="Fraction"):
        x ** fractions.Fraction(1, 2)  # was Python's TypeError from the label
    with pytest.raises(cl.GraphError):
        params.exponent(np.complex64(1), "p")
    assert params.exponent(np.float32(2), "p") == 2 and params.exponent(2**1000, "p") == 2**1000


def test_rebuild_infers_the_static_facts_of_changed_inputs():
    x = cl.variable("x", (2,), "float64")
    s = cl.exp(x)
    y = (s * 2.0) * (s + 1.0)
    x2 = cl.variable("x2", (3,), "float32")
    (y2,) = rebuild([y], {x: x2})
    value = interpret(y2, {x2: np.ones(3, np.float32)}, np)[y2]
    assert (y2.shape, y2.dtype) == (value.shape, value.dtype) == ((3,), np.float32)  # was (2,), f8
    assert y2.inputs[0].inputs[0] is y2.inputs[1].inputs[0]  # still one exp
    with pytest.raises(cl.ShapeError, match="do not broadcast"):
        rebuild([y + x], {s: cl.variable("t", (4,), "float64")})
    with pytest.raises(cl.GraphError, match="rebuild"):
        rebuild([y], {x: np.ones(2)})  # was taken as an input


def test_interpret_computes_nothing_above_a_known_node():
    x = cl.variable("x", (2,), "float64")
    m = x * 2.0
    z = m + 1.0
    values = interpret(z, {m: np.ones(2)}, np)  # was: x computed, 'feed it a value'
    np.testing.assert_array_equal(values[z], [2.0, 2.0])
    assert x not in values


def test_a_dtype_of_the_other_byte_order_is_the_native_one():
    assert params.dtype(">f4", "d") is np.dtype(np.float32)
    x = cl.variable("x", (2,), ">f4")  # was '>f4', which no feed could match
    assert cl.evaluate(x * 2, {x: np.ones(2, np.float32)}).dtype == np.float32


def test_table_numbers_switch_to_powers_of_ten_as_rounded_and_take_huge_ints():
    assert number(999999.9996) == "1.000e+06"  # was 1000000.000
    assert number(-999999.9996) == "−1.000e+06"
    assert number(999999.9994) == "999999.999"
    assert number(10**400) == "1.000e+400"  # was OverflowError
    assert number(-3 * 10**5000) == "−3.000e+5000"
    assert number(float("nan")) == "nan" and number(-math.inf) == "−inf"
