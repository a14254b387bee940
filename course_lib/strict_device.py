"""A strict stand-in for the GPU: arrays that behave like CuPy's where CuPy is strict.

CI has no GPU, yet the GPU path must not meet a NumPy array where a CuPy array belongs
(CuPy raises ``TypeError: Unsupported type <class 'numpy.ndarray'>``), nor turn a device
array into a NumPy one without saying so (CuPy: "Implicit conversion to a NumPy array is
not allowed"). ``COURSE_LIB_DEVICE=strict`` runs course_lib on this module instead of CuPy:

* :class:`StrictArray` wraps a NumPy array that only this module may touch. Operators and
  methods work as on CuPy arrays; an operand that is a NumPy array is refused (NumPy
  *scalars* and Python numbers are accepted, as CuPy accepts them), and so is a Python list
  where CuPy wants an array (a ufunc's operand, ``dot``'s, the first argument of ``sum``...);
* ``np.asarray(a)`` and ``np.array(a)`` raise ``TypeError``; the ways out are CuPy's:
  ``a.get()``, ``asnumpy(a)``, ``a.item()``, ``a.tolist()``, ``float(a)`` of a 0-d array.
  NumPy's functions and ufuncs given a StrictArray run on the device, as CuPy's
  ``__array_function__`` and ``__array_ufunc__`` make them;
* where CuPy copies host data in itself, so does this module: NumPy arrays (and lists) as
  indices (``a[np_index]``, ``take``, ``scatter_add``, ``ufunc.at``), as the values of an
  assignment through an index array, as ``ufunc.outer``'s operands, a 0-d NumPy array in a
  comparison (``a < np.array(0.5)``, ``np.less(a, np.array(0.5))``); ufunc methods CuPy lacks
  (``np.maximum.reduce``) raise NotImplementedError, as CuPy's do;
* the module's functions (``strict_device.exp``, ``.matmul``, ...) are NumPy's, taking and
  returning StrictArrays; ``asarray``/``array`` are the explicit host-to-device copy;
* views where CuPy makes them: ``a[0]`` of a 1-d array is a 0-d view (NumPy's is a scalar),
  ``xp.array(a, copy=False)`` is ``a``, ``xp.ascontiguousarray(a)`` of a contiguous ``a`` is
  ``a`` itself; sorts are stable (CuPy's only kind), and NumPy's keywords that CuPy's ufuncs
  and reductions lack (``where=``, ``initial=``) are a TypeError, as there;
* no read-only arrays (CuPy has none): ``a.flags`` has only the contiguity flags;
* CuPy's dtypes only (booleans, integers, float16/32/64, complex64/128): an array of another
  (long double, objects, strings) is a ValueError, as ``cupy.asarray`` raises; host data in
  another byte order arrives in the native one, as on CuPy.

Why not array-api-strict: CuPy implements NumPy's API (``x.sum(axis=0)``, ``x.astype``,
``swapaxes``, ``einsum``), which the array API standard leaves out, so array-api-strict would
refuse correct CuPy code and test a portability course_lib does not aim for. This module
tests exactly what the GPU demands of course_lib: where its arrays live.
"""

from __future__ import annotations

import numbers
import operator
import warnings

import numpy as np

_REFUSED = (
    "Implicit conversion to a NumPy array is not allowed on the strict device "
    "(as on CuPy); use .get() or course_lib.to_numpy() to copy it to the host explicitly"
)


#: The dtypes CuPy has (``numpy.dtype(...).char``): booleans, integers, float16/32/64 and
#: complex64/128. CuPy refuses the others (``ValueError: Unsupported dtype``): long double,
#: objects (a Fraction operand makes one), strings, dates.
_CUPY_DTYPES = frozenset("?bhilqBHILQefdFD")

#: CuPy's comparison ufuncs, which take a 0-d NumPy array as its value (``__array_ufunc__``).
_COMPARISONS = frozenset({"less", "less_equal", "equal", "not_equal", "greater", "greater_equal"})

#: The ufuncs whose ``reduce``, ``accumulate``, ``reduceat`` and ``at`` CuPy implements
#: (``cupy/_core/_kernel.pyx``: the others raise NotImplementedError); ``outer`` works for all.
_UFUNC_METHODS = {
    "reduce": {"add", "multiply"}, "accumulate": {"add", "multiply"}, "reduceat": {"add"},
    "at": {"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor"},
}  # fmt: skip


class _Pointer:
    """CuPy's ``MemoryPointer``, the part course_lib reads: ``ptr``, where the first element
    is (the optimiser's overlap checks compare arrays' byte ranges with it)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class _Flags:
    """CuPy's flags: contiguity only (no ``writeable``)."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, array: np.ndarray):
        self.c_contiguous = array.flags.c_contiguous
        self.f_contiguous = array.flags.f_contiguous
        self.owndata = array.flags.owndata

    def __getitem__(self, key: str) -> bool:
        return getattr(self, {"C_CONTIGUOUS": "c_contiguous", "F_CONTIGUOUS": "f_contiguous",
                              "OWNDATA": "owndata"}[key.upper()])  # fmt: skip


def _unwrap(value, what: str):
    """The NumPy array inside ``value`` (recursing into lists and tuples); a NumPy array
    that did not come from this device is refused, as CuPy refuses it."""
    if type(value) is StrictArray:
        return value._a
    if isinstance(value, np.ndarray):
        raise TypeError(
            f"{what}: unsupported type numpy.ndarray on the strict device (CuPy refuses it "
            "too); move host data to the device with course_lib.backend.to_device() first"
        )
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, what) for v in value)
    if isinstance(value, dict):  # keyword arguments (out=...)
        return {k: _unwrap(v, what) for k, v in value.items()}
    return value


def _wrap(value):
    """NumPy results as device arrays (a NumPy scalar becomes a 0-d array, as on CuPy)."""
    if isinstance(value, np.ndarray):
        return StrictArray(value)
    if isinstance(value, np.generic):
        return StrictArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


def _operand(value, what: str):
    """An operator's other operand, or NotImplemented for a type the array does not know
    (a graph node then builds its op: ``array * node``)."""
    if type(value) is StrictArray:
        return value._a
    if isinstance(value, np.ndarray):
        return _unwrap(value, what)  # raises
    if isinstance(value, (numbers.Number, np.generic)):
        return value
    return NotImplemented


def _binary(name: str):
    op = getattr(operator, name)

    def forward(self, other):
        b = _operand(other, f"operator {name}")
        return NotImplemented if b is NotImplemented else _wrap(op(self._a, b))

    def reflected(self, other):
        b = _operand(other, f"operator {name}")
        return NotImplemented if b is NotImplemented else _wrap(op(b, self._a))

    return forward, reflected


def _inplace(name: str):
    op = getattr(operator, name)

    def method(self, other):
        b = _operand(other, f"operator {name}")
        if b is NotImplemented:
            return NotImplemented
        op(self._a, b)
        return self

    return method


def _compare(name: str):
    """A comparison as CuPy's: a 0-d NumPy array compares as its value; ``==`` (``!=``) with
    None or an object without its own ``__eq__`` is all False (all True), an array; with
    another object that leaves it to NumPy's ufunc (a list, a string), a TypeError."""
    op = getattr(operator, name)

    def method(self, other):
        if isinstance(other, np.ndarray) and other.ndim == 0:
            other = other.item()
        if name in ("eq", "ne") and (other is None or type(other).__eq__ is object.__eq__):
            return StrictArray(np.full(self._a.shape, name == "ne"))
        b = _operand(other, f"operator {name}")
        if b is not NotImplemented:
            return _wrap(op(self._a, b))
        if name in ("eq", "ne") and not _defers(other):
            raise TypeError(
                f"operator {name}: unsupported type {type(other).__name__} on the strict device "
                "(CuPy refuses it too); compare with a device array or a number"
            )
        return NotImplemented

    return method


def _defers(other) -> bool:
    """Whether CuPy leaves an operator to ``other`` (``_should_use_rop``) or to its
    ``__array_ufunc__`` (a graph node's), rather than refusing it."""
    if hasattr(other, "__array_ufunc__"):
        return True
    return getattr(other, "__array_priority__", 0) > StrictArray.__array_priority__


def _unary(name: str):
    op = getattr(operator, name)
    return lambda self: _wrap(op(self._a))


def _method(name: str):
    def method(self, *args, **kwargs):
        what = f"StrictArray.{name}"
        _refuse_lists(name, None, (self, *args), "StrictArray")  # a.dot(b) as dot(a, b)
        _refuse_keywords(name, None, kwargs)
        result = getattr(self._a, name)(
            *_arguments(name, args, 0, what), **_keywords(name, kwargs, what)
        )
        return self if result is self._a else _out(result, kwargs)  # astype(copy=False): self

    method.__name__ = name
    return method


def _index(index):
    """An index as NumPy takes it: device arrays unwrapped; NumPy arrays and lists stay, as
    CuPy copies them to the device itself."""
    if type(index) is StrictArray:
        return index._a
    if isinstance(index, (list, tuple)):
        return type(index)(_index(i) for i in index)
    return index


def _advanced(index) -> bool:
    """Whether ``index`` holds an index array (CuPy then copies a NumPy value in)."""
    for i in index if isinstance(index, tuple) else (index,):
        basic = i is None or i is Ellipsis or isinstance(i, slice)
        if not basic and not (np.isscalar(i) and not isinstance(i, (bool, np.bool_))):
            return True
    return False


def _arguments(name: str, args, at: int, what: str) -> tuple:
    """``args`` unwrapped for NumPy; ``take``'s indices (argument ``at``) may be host data,
    which CuPy copies in itself."""
    return tuple(
        _index(v) if name == "take" and i == at else _unwrap(v, what) for i, v in enumerate(args)
    )


def _keywords(name: str, kwargs: dict, what: str) -> dict:
    """``kwargs`` unwrapped for NumPy; ``take``'s ``indices=`` may be host data."""
    return {k: _index(v) if (name, k) == ("take", "indices") else _unwrap(v, what)
            for k, v in kwargs.items()}  # fmt: skip


def _out(result, kwargs, given=()):
    """``result``, or the ``out=`` array it was written into (CuPy returns ``out`` itself), or
    the argument it is (``ascontiguousarray(a)`` of a contiguous ``a`` is ``a``, as on CuPy)."""
    out = kwargs.get("out")
    out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    for array in (out, *given):
        if type(array) is StrictArray and result is array._a:
            return array
    return _wrap(result)


class StrictArray:
    """A device array of the strict stand-in device (see the module's docstring)."""

    __slots__ = ("_a", "__weakref__")
    __array_priority__ = 100

    def __init__(self, array: np.ndarray):
        if array.dtype.char not in _CUPY_DTYPES:
            raise ValueError(
                f"Unsupported dtype {array.dtype} on the strict device (CuPy has no "
                f"{array.dtype} arrays either); use float64, float32, an integer or bool"
            )
        if not array.flags.writeable:  # CuPy has none: a.diagonal(), broadcast_to, real a.imag
            try:
                array.flags.writeable = True
            except ValueError:  # over memory NumPy cannot write
                array = array.copy()
        self._a = array

    # -- what CuPy arrays have -------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    T = property(lambda self: StrictArray(self._a.T))
    mT = property(lambda self: StrictArray(self._a.mT))
    real = property(lambda self: _out(self._a.real, {}, (self,)))  # a real array's is itself
    imag = property(lambda self: _wrap(self._a.imag))
    flags = property(lambda self: _Flags(self._a))
    data = property(lambda self: _Pointer(self._a.__array_interface__["data"][0]))
    device = "strict"

    @property
    def base(self):
        base = self._a.base
        return None if base is None else StrictArray(base) if isinstance(base, np.ndarray) else base

    def get(self) -> np.ndarray:
        """A NumPy copy on the host (CuPy's ``ndarray.get``)."""
        return self._a.copy()

    def __copy__(self):
        return self.copy()  # CuPy's copy.copy copies the data, as NumPy's does

    def __deepcopy__(self, memo):
        return self.copy()

    def item(self):
        return self._a.item()

    def tolist(self):
        return self._a.tolist()

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __bool__(self):
        """CuPy's truth value: an empty array is False with a DeprecationWarning (NumPy 2.2
        raises)."""
        if self._a.size == 0:
            warnings.warn(
                "The truth value of an empty array is ambiguous. Returning False, but in future "
                "this will result in an error. Use `array.size > 0` to check that an array is "
                "not empty.", DeprecationWarning, stacklevel=2,
            )  # fmt: skip
            return False
        return bool(self._a)

    def __complex__(self):
        return complex(self._a)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self)))  # CuPy's: views, 0-d ones of a 1-d array

    def __repr__(self):
        return repr(self._a).replace("array(", "strict_array(", 1)

    def __str__(self):
        return str(self._a)

    def __format__(self, format_spec: str) -> str:
        return format(self._a, format_spec)  # CuPy's: f"{loss:.3f}" of a 0-d array works

    def __bytes__(self) -> bytes:
        return bytes(self._a)

    def __getitem__(self, index):
        """CuPy's: an integer index gives a 0-d view, not a copy (``a[0] += 1`` writes ``a``)."""
        got = self._a[_index(index)]
        if isinstance(got, np.generic) and not _advanced(index):
            got = self._a[(*index, ...) if isinstance(index, tuple) else (index, ...)]
        return _wrap(got)

    def __setitem__(self, index, value):
        """CuPy copies a NumPy value in through an index array, or a 0-d one anywhere."""
        host = isinstance(value, np.ndarray) and (value.ndim == 0 or _advanced(index))
        self._a[_index(index)] = value if host else _unwrap(value, "assignment")

    def __hash__(self):
        raise TypeError("unhashable type: 'StrictArray'")

    # -- the refusals ----------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError(_REFUSED)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """``np.exp(a)`` runs on the device, as CuPy's ``__array_ufunc__`` does; a NumPy
        array among the operands is refused (a 0-d one in a comparison is its value; ``at``
        and ``outer`` copy host data in), and so is a method CuPy lacks (``np.maximum.reduce``)."""
        name, what = ufunc.__name__, f"numpy.{ufunc.__name__}.{method}".replace(".__call__", "")
        types = (StrictArray, np.ndarray, numbers.Number, np.generic)
        if not all(isinstance(x, types) for x in inputs):
            return NotImplemented
        if name not in _UFUNC_METHODS.get(method, (name,)):
            raise NotImplementedError(f"`{name}.{method}` is not supported by CuPy (nor here)")
        _refuse_keywords(what, None, kwargs, _UFUNC_KEYWORDS.get(method, _UFUNC_CALL))
        if method == "at":
            return _scatter(ufunc, *inputs, what=what)
        if method == "outer" or name in _COMPARISONS:
            inputs = tuple(_host_in(x, method == "outer") for x in inputs)
        inputs, given = _unwrap(inputs, what), kwargs
        return _out(getattr(ufunc, method)(*inputs, **_unwrap(kwargs, what)), given)

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(t, (StrictArray, np.ndarray)) for t in types):
            return NotImplemented
        what = f"numpy.{func.__name__}"
        _refuse_lists(func.__name__, func, args, "numpy")
        _refuse_keywords(func.__name__, func, kwargs)
        if func.__name__ in _SORTS:
            return _SORTS[func.__name__](*args, **kwargs)
        if func.__name__ in _READ_HOST_ARRAYS:
            return _wrap(func(*_index(args), **kwargs))
        return _out(func(*_arguments(func.__name__, args, 1, what),
                         **_keywords(func.__name__, kwargs, what)), kwargs, args)  # fmt: skip

    # -- operators -------------------------------------------------------------------------
    __add__, __radd__ = _binary("add")
    __sub__, __rsub__ = _binary("sub")
    __mul__, __rmul__ = _binary("mul")
    __truediv__, __rtruediv__ = _binary("truediv")
    __floordiv__, __rfloordiv__ = _binary("floordiv")
    __mod__, __rmod__ = _binary("mod")
    _pow, __rpow__ = _binary("pow")
    __matmul__, __rmatmul__ = _binary("matmul")
    __and__, __rand__ = _binary("and_")
    __or__, __ror__ = _binary("or_")
    __xor__, __rxor__ = _binary("xor")
    __lshift__, __rlshift__ = _binary("lshift")
    __rshift__, __rrshift__ = _binary("rshift")
    __lt__, __gt__ = _compare("lt"), _compare("gt")
    __le__, __ge__ = _compare("le"), _compare("ge")
    __eq__, __ne__ = _compare("eq"), _compare("ne")
    __iadd__, __isub__ = _inplace("iadd"), _inplace("isub")
    __imul__, __itruediv__ = _inplace("imul"), _inplace("itruediv")
    __ipow__, __imod__ = _inplace("ipow"), _inplace("imod")
    __ifloordiv__ = _inplace("ifloordiv")
    __ilshift__, __irshift__ = _inplace("ilshift"), _inplace("irshift")
    __iand__, __ior__, __ixor__ = _inplace("iand"), _inplace("ior"), _inplace("ixor")
    __neg__ = _unary("neg")
    __abs__, __invert__ = _unary("abs"), _unary("invert")

    def __pos__(self):
        """CuPy's ``+a``: of a bool array, a copy with a DeprecationWarning (NumPy raises)."""
        if self.dtype == np.bool_:
            warnings.warn(
                "Applying '+' to a non-numerical array is ill-defined. Returning a copy, but in "
                "the future this will error.", DeprecationWarning, stacklevel=2,
            )  # fmt: skip
            return self.copy()
        return _wrap(+self._a)

    def __pow__(self, other):
        """CuPy's ``a ** 2`` (a Python int) is ``square`` in the dtype ``result_type`` gives:
        of a bool array, int64 (NumPy's ``square``: int8)."""
        if type(other) is int and other == 2 and self.dtype == np.bool_:
            return _wrap(np.square(self._a, dtype=np.result_type(self._a.dtype, other)))
        return self._pow(other)

    def sort(self, axis=-1, kind=None):
        """In place, by CuPy's stable sort (which takes no other ``kind``)."""
        _stable("StrictArray.sort", self, kind).sort(axis=axis, kind="stable")

    def argsort(self, axis=-1, kind=None):
        """The indices that sort the array, by CuPy's stable sort."""
        return argsort(self, axis, kind)

    def __divmod__(self, other):
        b = _operand(other, "divmod")
        return NotImplemented if b is NotImplemented else _wrap(divmod(self._a, b))

    def __rdivmod__(self, other):
        b = _operand(other, "divmod")
        return NotImplemented if b is NotImplemented else _wrap(divmod(b, self._a))


for _name in (
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "any", "all", "var", "std",
    "cumsum", "reshape", "transpose", "swapaxes", "ravel", "flatten", "squeeze", "copy",
    "astype", "view", "fill", "clip", "round", "dot", "nonzero", "repeat", "take", "conj",
    "conjugate", "cumprod", "diagonal", "trace", "partition", "argpartition", "searchsorted",
    "compress", "choose", "tobytes",
):  # fmt: skip
    setattr(StrictArray, _name, _method(_name))


#: Functions that take host values (numbers, shapes, dtypes) first, as CuPy's do; CuPy's other
#: non-ufunc functions refuse a number where an array belongs (``cupy.sum(1.0)``,
#: ``cupy.broadcast_to(1.0, shape)``, ``cupy.may_share_memory(1.0, a)`` all raise).
_TAKE_HOST_VALUES = frozenset({
    "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "identity",
    "tri", "indices", "result_type", "promote_types", "can_cast", "min_scalar_type", "finfo",
    "iinfo", "isscalar", "ndim", "shape", "size", "atleast_1d", "atleast_2d", "atleast_3d",
    "broadcast_shapes", "isdtype", "issubdtype",
})  # fmt: skip

#: Of those, the ones that read the dtype or shape of a NumPy array as well (CuPy's
#: ``result_type``, ``can_cast``, ``min_scalar_type``, ``ndim``, ``shape`` hand it to NumPy).
_READ_HOST_ARRAYS = frozenset({"result_type", "can_cast", "min_scalar_type", "ndim", "shape"})

#: Functions that take a sequence of arrays (CuPy takes the list or tuple itself). ``einsum``
#: copies its operands with ``cupy.asarray``, so a list or a number is an operand there too.
_TAKE_SEQUENCES = frozenset({
    "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack", "block",
    "select", "lexsort", "ravel_multi_index", "broadcast_arrays", "meshgrid", "ix_", "einsum",
})  # fmt: skip

#: Of those, the ones whose sequence must hold device arrays only ("Only cupy arrays can be
#: concatenated"; ``stack`` calls ``expand_dims`` on each).
_JOIN_ARRAYS_ONLY = frozenset({"concatenate", "stack"})

#: How many leading arguments CuPy's function wants as arrays where that is not one (a
#: ufunc's are its ``nin`` inputs): ``where`` and ``clip`` pass theirs to a ufunc, ``dot``
#: and its kin take ``ndarray`` only.
_ARRAY_OPERANDS = {"where": 3, "clip": 3, "dot": 2, "vdot": 2, "inner": 2, "outer": 2,
                   "tensordot": 2}  # fmt: skip


def _takes_an_array_first(name: str, func, args, kwargs) -> None:
    """Refuse a number or NumPy scalar where CuPy's function wants a device array."""
    if isinstance(func, np.ufunc) or name in _TAKE_HOST_VALUES or name in _TAKE_SEQUENCES:
        return
    first = args[0] if args else next(iter(kwargs.values()), None)
    if isinstance(first, (numbers.Number, np.generic)):
        raise TypeError(
            f"strict_device.{name} takes a device array, not {type(first).__name__} (CuPy "
            "refuses it too); make one with xp.asarray(value) first"
        )


def _refuse_lists(name: str, func, args, where: str = "strict_device") -> None:
    """Refuse a Python list or tuple where CuPy's function wants a device array (NumPy would
    turn it into an array silently; CuPy raises)."""
    if name in _JOIN_ARRAYS_ONLY and args and type(args[0]) in (list, tuple):
        for value in args[0]:
            if not isinstance(value, (StrictArray, np.ndarray)):  # NumPy arrays: _unwrap says
                raise TypeError(
                    f"{where}.{name} joins device arrays only, not "
                    f"{type(value).__name__} (CuPy refuses it too); make one with "
                    "xp.asarray(value) first"
                )
    if name in _TAKE_HOST_VALUES or name in _TAKE_SEQUENCES:
        return
    count = func.nin if isinstance(func, np.ufunc) else _ARRAY_OPERANDS.get(name, 1)
    for value in args[:count]:  # positional only: a keyword's meaning is not known here
        if isinstance(value, (list, tuple)):
            raise TypeError(
                f"{where}.{name} takes device arrays, not a Python "
                f"{type(value).__name__} (CuPy refuses it too); make one with "
                "xp.asarray(value) first"
            )


#: The keywords CuPy's reductions take (method or function): NumPy's others (``initial``,
#: ``where``) are a TypeError there.
_REDUCTION_KEYWORDS = {
    **dict.fromkeys(("sum", "prod", "mean"), frozenset({"a", "axis", "dtype", "out", "keepdims"})),
    **dict.fromkeys(("max", "min", "amax", "amin", "all", "any"),
                    frozenset({"a", "axis", "out", "keepdims"})),
    **dict.fromkeys(("var", "std"), frozenset({"a", "axis", "dtype", "out", "ddof", "keepdims"})),
}  # fmt: skip

#: The keywords a CuPy ufunc's call (and ``outer``) takes (``_kernel.pyx``: "Wrong arguments"
#: for ``where=``, ``order=``...), and those of its other methods.
_UFUNC_CALL = frozenset({"out", "dtype", "casting"})
_UFUNC_KEYWORDS = {
    "reduce": frozenset({"axis", "dtype", "out", "keepdims"}),
    "accumulate": frozenset({"axis", "dtype", "out"}),
    "reduceat": frozenset({"axis", "dtype", "out"}),
}


def _refuse_keywords(name: str, func, kwargs: dict, allowed=None) -> None:
    """Refuse a keyword of NumPy's that CuPy's ufunc or reduction lacks (``where=``,
    ``initial=``): CuPy raises TypeError, so code using one would pass here only."""
    if allowed is None:
        allowed = _UFUNC_CALL if isinstance(func, np.ufunc) else _REDUCTION_KEYWORDS.get(name)
    extra = sorted(set(kwargs) - allowed) if allowed is not None else ()
    if extra:
        raise TypeError(
            f"{name} takes no {', '.join(extra)} keyword on CuPy (NumPy's only), nor here"
        )


def _stable(name: str, a, kind) -> np.ndarray:
    """The NumPy array inside device array ``a``, for a sort of ``kind`` CuPy has: None or
    'stable' (CuPy's sorts are stable; NumPy's default is not)."""
    if type(a) is not StrictArray:
        raise TypeError(f"{name} sorts a device array, not {type(a).__name__} (as on CuPy)")
    if kind not in (None, "stable"):
        raise ValueError(f"{name}: kind can only be None or 'stable' on CuPy, not {kind!r}")
    return a._a


def sort(a, axis=-1, kind=None):
    """A sorted copy, by CuPy's stable sort (which takes no other ``kind``)."""
    return StrictArray(np.sort(_stable("sort", a, kind), axis=axis, kind="stable"))


def argsort(a, axis=-1, kind=None):
    """The indices that sort ``a``, by CuPy's stable sort: ties keep their order."""
    return StrictArray(np.argsort(_stable("argsort", a, kind), axis=axis, kind="stable"))


_SORTS = {"sort": sort, "argsort": argsort}


def _function(name: str, func):
    def call(*args, **kwargs):
        what = f"strict_device.{name}"
        _takes_an_array_first(name, func, args, kwargs)
        _refuse_lists(name, func, args)
        _refuse_keywords(name, func, kwargs)
        if name in _READ_HOST_ARRAYS:
            return _wrap(func(*_index(args), **kwargs))
        result = func(*_arguments(name, args, 1, what), **_keywords(name, kwargs, what))
        return _out(result, kwargs, args)

    call.__name__ = name
    call.__doc__ = f"NumPy's ``{name}`` on the strict device."
    if isinstance(func, np.ufunc):  # xp.add.reduce(a), xp.multiply.outer(a, b)
        for method in ("reduce", "accumulate", "reduceat", "outer", "at"):
            setattr(call, method, _ufunc_method(name, func, method))
    return call


def _ufunc_method(name: str, ufunc, method: str):
    """``ufunc.method`` of the strict device: NumPy's, handed to StrictArray.__array_ufunc__
    (which holds CuPy's rules); ``outer`` copies host operands in, as CuPy's does."""

    def call(*args, **kwargs):
        if method == "outer":
            args = (*(asarray(a) for a in args[:2]), *args[2:])
        elif not args or type(args[0]) is not StrictArray:
            raise TypeError(f"strict_device.{name}.{method} takes a device array first")
        return getattr(ufunc, method)(*args, **kwargs)

    call.__name__ = f"{name}.{method}"
    return call


def asarray(value, dtype=None, order=None, copy=None):
    """Host data (a NumPy array, a number, a list) copied to the device, or a device array
    as it is: CuPy's explicit transfer (a big-endian array arrives in the native byte order,
    as CuPy makes it; a dtype CuPy lacks is a ValueError). A device array is itself unless
    ``dtype``, ``order`` or ``copy=True`` asks for a copy (``copy=False`` then raises)."""
    if type(value) is StrictArray:
        return _out(np.asarray(value._a, dtype=dtype, order=order, copy=copy), {}, (value,))
    if hasattr(value, "__cuda_array_interface__"):
        raise TypeError("a CuPy array cannot enter the strict device; use .get() first")
    if _device_arrays(value):  # cupy.asarray([a, b]) joins device arrays on the device
        return StrictArray(np.array(_unwrap(value, "asarray"), dtype=dtype, order=order or "K"))
    return StrictArray(_native(np.array(value, dtype=dtype, order=order or "K", copy=True)))


def array(value, dtype=None, copy=True, order="K", ndmin=0):
    """A device array from host data (a copy) or a device array: a copy unless ``copy`` is
    False or None and none is needed, as on CuPy (then the array itself, or a view of it)."""
    if type(value) is StrictArray:
        made = np.array(value._a, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
        return _out(made, {}, (value,))
    source = asarray(value)._a
    return StrictArray(_native(np.array(source, dtype=dtype, copy=True, order=order, ndmin=ndmin)))


def _device_arrays(value) -> bool:
    """Whether ``value`` is a non-empty list or tuple of device arrays (or of such lists)."""
    return (
        type(value) in (list, tuple)
        and len(value) > 0
        and all(type(v) is StrictArray or _device_arrays(v) for v in value)
    )


def _native(host: np.ndarray) -> np.ndarray:
    """``host`` in the machine's byte order (CuPy byte-swaps big-endian host data)."""
    return host if host.dtype.isnative else host.astype(host.dtype.newbyteorder("="))


def ascontiguousarray(value, dtype=None):
    _takes_an_array_first("ascontiguousarray", ascontiguousarray, (value,), {})
    _refuse_lists("ascontiguousarray", ascontiguousarray, (value,))
    result = np.ascontiguousarray(_unwrap(value, "ascontiguousarray"), dtype=dtype)
    return _out(result, {}, (value,))  # a contiguous array of that dtype is itself


def asnumpy(value) -> np.ndarray:
    """A NumPy copy of a device array (``cupy.asnumpy``); host data passes through."""
    return value.get() if type(value) is StrictArray else np.asarray(value)


#: The dtypes CuPy's scatter ops write into (``_routines_indexing.pyx``, its atomics), by
#: ufunc: ``cupyx.scatter_add`` (``add.at``) int32, uint32, uint64, float16/32/64 (CuPy 13 to
#: 14.1 refuse the others, int64 from 14.2 on); ``subtract.at`` int32 and uint32 only.
_SCATTER_DTYPES = {
    "add": "iILQefd", "subtract": "iI", "maximum": "ilqILQfd", "minimum": "ilqILQfd",
    "bitwise_and": "ilqILQ", "bitwise_or": "ilqILQ", "bitwise_xor": "ilqILQ",
}  # fmt: skip


def scatter_add(target: StrictArray, index, values) -> None:
    """``target[index] += values`` with repeated indices accumulated (``cupyx.scatter_add``):
    into a device array of a dtype CuPy's atomicAdd has; the index (and, through an index
    array, the values) may be host data, which CuPy copies in; values take target's dtype."""
    if type(target) is not StrictArray:
        raise TypeError(
            f"scatter_add adds into a device array, not {type(target).__name__} (CuPy refuses "
            "it too)"
        )
    _scatter(np.add, target, index, values, what="scatter_add")


def _scatter(ufunc, target, index, values=None, *, what: str) -> None:
    """``ufunc.at(target, index, values)`` as CuPy's scatter ops (``_scatter_op``): into a
    device array (for add, of a dtype atomicAdd has); host indices, and values through an index
    array, are copied in; values take target's dtype."""
    if type(target) is not StrictArray:
        raise TypeError(f"{what} writes into a device array, not {type(target).__name__}")
    if target.dtype.char not in _SCATTER_DTYPES[ufunc.__name__]:
        kinds = ", ".join(sorted({str(np.dtype(c)) for c in _SCATTER_DTYPES[ufunc.__name__]}))
        raise TypeError(
            f"{what} into {target.dtype}: CuPy's {ufunc.__name__}.at (scatter) supports "
            f"{kinds} only"
        )
    host = isinstance(values, np.ndarray) and (values.ndim == 0 or _advanced(index))
    values = np.asarray(values if host else _unwrap(values, what))
    ufunc.at(target._a, _index(index), values.astype(target.dtype, copy=False))


def _host_in(value, arrays: bool):
    """A ufunc operand as CuPy takes it: a 0-d NumPy array as its value, and with ``arrays``
    (``outer``, which calls ``cupy.array``) any NumPy array copied in."""
    if isinstance(value, np.ndarray) and (arrays or value.ndim == 0):
        return asarray(value) if arrays else value.item()
    return value


ndarray = StrictArray


class _Namespace:
    """A NumPy submodule (or random generator) as CuPy's: its functions take and return device
    arrays (``xp.random.standard_normal(3)``, ``xp.linalg.norm(a)``)."""

    def __init__(self, name: str, inner, random: bool):
        self._name, self._inner, self._random = name, inner, random

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        generator = self._random and value in (np.random.RandomState, np.random.Generator)
        if generator or callable(value) and not isinstance(value, type):
            make = _random if self._random else _function
            value = make(f"{self._name}.{name}", value)
        setattr(self, name, value)
        return value


def _random(name: str, func):
    """NumPy's random ``func`` on the device: numbers first, results device arrays (a number
    too, as ``cupy.random.random()`` is a 0-d array), a generator one of device arrays."""

    def call(*args, **kwargs):
        result = func(*_unwrap(args, name), **_unwrap(kwargs, name))
        if isinstance(result, (np.random.Generator, np.random.RandomState)):
            return _Namespace(name, result, random=True)
        if isinstance(result, numbers.Number):
            return StrictArray(np.asarray(result))
        return _wrap(result)

    call.__name__ = name
    return call


def __getattr__(name: str):
    """NumPy's functions (taking and returning StrictArrays), dtypes and constants."""
    value = getattr(np, name)  # AttributeError for a name NumPy lacks too
    if name in ("random", "linalg", "fft"):
        value = _Namespace(name, value, random=name == "random")
    elif isinstance(value, np.ufunc) or (callable(value) and not isinstance(value, type)):
        value = _function(name, value)
    globals()[name] = value
    return value
