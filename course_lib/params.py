"""Checks of the parameters that ops, graph constructors and calculators take.

A wrong parameter fails when the node is built, with a message naming the op, instead of as
NaN or a crash when the graph runs. Wrong types raise :class:`GraphError` (a TypeError),
wrong values :class:`ParameterError` (a ValueError).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .errors import GraphError, OutOfRangeError, ParameterError, ShapeError


def integer(value, what: str) -> int:
    """``value`` as an int: Python or NumPy integers, not bools or floats."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise GraphError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def axis(value, what: str):
    """An axis argument: None, an int, or a tuple/list of ints (range checked by shape rules)."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return tuple(integer(a, what) for a in value)
    return integer(value, what)


def axes(value, what: str) -> tuple:
    """A tuple or list of axes (ints), such as a permutation."""
    if not isinstance(value, (tuple, list)):
        raise GraphError(f"{what} must be a tuple of integers, got {value!r}")
    return tuple(integer(a, what) for a in value)


def flag(value, what: str) -> bool:
    """A yes/no argument: True or False (so a misplaced axis is not silently truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise GraphError(f"{what} must be True or False, got {value!r}")
    return bool(value)


def is_real(value) -> bool:
    """Is ``value`` a real number (Python's or NumPy's, not a bool, not an array)?"""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def real(value, what: str, minimum: float | None = None, positive: bool = False) -> float:
    """A finite real number (not a bool), at least ``minimum`` or above 0 when asked."""
    if not is_real(value):
        raise GraphError(f"{what} must be a real number, got {value!r} ({type(value).__name__})")
    number = _float(value)
    low = (minimum is not None and number < minimum) or (positive and number <= 0)
    if not math.isfinite(number) or low:
        bound = f" and at least {minimum:g}" if minimum is not None else ""
        raise ParameterError(f"{what} must be finite{bound or ' and above 0' * positive}, "
                             f"got {number!r}")  # fmt: skip
    return number


def _float(value: numbers.Real) -> float:
    """``float(value)``; an integer or fraction beyond float's range (``10**400``) is ±inf."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def name(value, what: str) -> str | None:
    """A label for a node: a non-empty string, or None for an automatic one."""
    if value is not None and (not isinstance(value, str) or not value):
        raise GraphError(f"{what}: a name must be a non-empty string (or None), got {value!r}")
    return value


def exponent(value, what: str) -> float | int:
    """A real exponent: an int, a float, a NumPy one or a 0-d real array (±inf and NaN compute
    as in NumPy; not a bool, a complex number, a Fraction or a node). Its type is kept, so
    NumPy's promotion holds: ints keep integer dtypes (``x ** 2``), ``int64 ** 3.0`` is
    float64, and a NumPy scalar or 0-d array (``np.float64(2.0)``, kept as a NumPy scalar)
    is strongly typed."""
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind is not None and np.ndim(value) == 0 and kind in "iuf":
        value = np.asarray(value)[()]  # np.float64(2.0), np.array(2.0): a NumPy scalar
    real = (int, float, np.integer, np.floating)  # a Fraction: NumPy computes objects
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, real):
        raise GraphError(
            f"{what} must be a real number (int or float), got {value!r} of type "
            f"{type(value).__name__}; for a tensor exponent use exp(p * log(x))"
        )
    if isinstance(value, int) and not math.isfinite(_float(value)):  # NumPy cannot compute it
        raise ParameterError(f"{what} must be within float's range, got an int of "
                             f"{value.bit_length()} bits")  # fmt: skip
    return value


def positive_size(value, what: str) -> int:
    """A count such as a batch size or a width: a positive integer (``4096.0`` is accepted,
    ``2.5``, ``True``, NaN and text are not); a :class:`ShapeError` otherwise."""
    try:
        ok = not isinstance(value, (bool, np.bool_)) and int(value) == value and value >= 1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ShapeError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def dtype(value, what: str) -> np.dtype:
    """A NumPy dtype of booleans or real numbers, in the machine's byte order (``>f4`` is
    float32: arrays are made native, as :func:`course_lib.backend.plain_array` says)."""
    try:
        result = np.dtype(value)
    except (TypeError, ValueError):  # ValueError: a malformed structured one, ("f4", -1)
        raise GraphError(f"{what}: {value!r} is not a dtype (try 'float32' or np.int64)") from None
    if result.kind not in "biuf":
        raise GraphError(f"{what}: course_lib computes with booleans, integers and real "
                         f"floats, not {result}")  # fmt: skip
    return result if result.isnative else np.dtype(result.char)  # >f4's char: f, float32


def numeric_array(array, what: str):
    """``array`` if its dtype holds booleans, integers or real floats (not text, objects or
    complex numbers, which course_lib's ops and derivatives are not written for)."""
    kind = getattr(getattr(array, "dtype", None), "kind", "O")
    if kind not in "biuf":
        raise GraphError(f"{what} holds numbers (booleans, integers, real floats), not "
                         f"{getattr(array, 'dtype', type(array).__name__)} values")  # fmt: skip
    return array


def shape(value, what: str, infer: bool = False) -> tuple:
    """A static shape: non-negative ints, ``None`` for a size not known before running; with
    ``infer`` (a reshape's target) also one -1 for "the rest"."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise GraphError(f"{what} must be a tuple of integers, got {value!r}")
    out = tuple(None if d is None else integer(d, what) for d in value)
    if infer:
        if any(d is not None and d < -1 for d in out) or out.count(-1) > 1:
            raise ParameterError(f"{what} must have sizes >= 0 and at most one -1, got {out}")
    elif any(d is not None and d < 0 for d in out):
        raise ParameterError(f"{what} must have sizes >= 0 (or None), got {out}")
    return out


# -- the public parameters of optimisers, training, sampling and models ---------------------
def _interval(low, high, open_low: bool, open_high: bool) -> str:
    if high is None:
        return f"{'>' if open_low else '>='} {low:g}"
    return f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"


def in_range(value, what: str, low: float, high: float | None = None, *,
             open_low: bool = False, open_high: bool = False) -> float:  # fmt: skip
    """A real number (not a bool, not NaN) in ``[low, high]`` (``open_*``: the bound itself
    excluded; ``high`` None: no upper bound, but finite), as a float. Wrong type:
    :class:`GraphError`; outside the range: :class:`ParameterError`, naming ``what`` and the
    accepted range (``AdamW: lr must be a real number >= 0, got nan``)."""
    if np.ndim(value) == 0 and getattr(value, "dtype", None) is not None:
        value = np.asarray(value)[()]  # a NumPy scalar or a 0-d array
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise GraphError(f"{what} must be a real number {_interval(low, high, open_low, open_high)}"
                         f", got {value!r} ({type(value).__name__})")  # fmt: skip
    number = _float(value)
    inside = (
        math.isfinite(number)
        and (number > low if open_low else number >= low)
        and (high is None or (number < high if open_high else number <= high))
    )
    if not inside:
        accepted = _interval(low, high, open_low, open_high)
        raise ParameterError(f"{what} must be a real number {accepted}, got {number!r}")
    return number


def count(value, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    """An integer (Python or NumPy, not a bool or a float such as 2.5 or 3.0) in
    ``[minimum, maximum]``: a number of steps, of tokens, a top-k."""
    number = integer(value, what)
    if number < minimum or (maximum is not None and number > maximum):
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ParameterError(f"{what} must be an integer {bound}, got {number}")
    return number


def finite_array(array, what: str):
    """``array`` (on the host) if it holds real numbers (:func:`numeric_array`), none NaN or
    infinite; else a :class:`ParameterError` naming ``what`` and how many are not finite."""
    bad = int((~np.isfinite(numeric_array(np.asarray(array), what))).sum())
    if bad:
        raise ParameterError(f"{what} holds {bad} NaN or infinite value(s); refusing to load it")
    return array


def check_ids(ids, size: int, what: str) -> None:
    """Raise unless ``ids`` are integers in ``[0, size)`` (``what`` says why that range).

    NumPy would read a negative id from the end, so a bad id would silently pick a wrong row
    or class (and a gradient for none)."""
    if getattr(ids, "dtype", np.dtype(float)).kind not in "iu":
        raise GraphError(f"{what}: ids must be integers, got {type(ids).__name__} "
                         f"of dtype {getattr(ids, 'dtype', None)}")  # fmt: skip
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= size)
    if bad.any():
        flat = int(bad.reshape(-1).argmax())
        where = tuple(int(i) for i in np.unravel_index(flat, ids.shape))
        raise OutOfRangeError(
            f"{what}: id {int(ids.reshape(-1)[flat])} at position {where} is outside [0, {size}); "
            "ids count from 0, and negative ids are refused (NumPy would count from the end)"
        )
