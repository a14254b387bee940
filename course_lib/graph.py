"""Nodes, ops and the walks over a computational graph.

A :class:`Node` is one value of a dataflow graph: the :class:`Op` that makes it,
its input nodes, a deterministic name, and (when known) its static shape and dtype.
Nodes are immutable once built. Graph walks are iterative, so a chain of 100,000
nodes needs no recursion.

The operators of :class:`Node` (``+ - * / @ ** -x x[i] < x.T x.sum()``) are defined on
it here; each builds the op of the same name from :mod:`course_lib.ops`, which owns every op
and hands its functions over with :func:`register_ops` (the ops import this module, so it
cannot import them).
"""

from __future__ import annotations

import inspect
import itertools
import math
import operator
import os
import secrets
import struct
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from numbers import Number

import numpy as np

from . import backend, params
from .errors import (
    CourseLibError,
    GraphError,
    NumericError,
    ParameterError,
    ShapeError,
    describe_shapes,
)

Shape = tuple  # a tuple of ints; ``None`` stands for "unknown"

_MAX_AUTO_NAME = 40
_creation_counter = itertools.count()


#: Dimensions of :func:`dtype_by_example`'s arrays: enough for any axis an op names.
EXAMPLE_NDIM = 8


def dtype_by_example(op: Op, dtypes: Sequence) -> np.dtype | None:
    """The dtype of ``op`` computed by NumPy on arrays of one element, one of each dtype
    (``EXAMPLE_NDIM`` axes of size 1): int / int is float64, the sum of int8 is int64, exp of
    int8 is float16, as on real inputs. An entry may be a Python number instead (a weak
    scalar), passed as it is: ``int32 * 0.5`` is float64. Where NumPy refuses the dtypes:
    None for an op it has no loop for (``bool - bool``: the run raises NumPy's error), NumPy's
    OverflowError for a Python number they cannot hold (``int8 + 1000``). Where the example
    cannot run otherwise (an op that needs other shapes or inputs), NumPy's promotion of the
    input dtypes."""
    examples = [d if isinstance(d, Number) else np.ones((1,) * EXAMPLE_NDIM, d) for d in dtypes]
    try:
        with np.errstate(all="ignore"):  # per thread, unlike warnings.catch_warnings
            return np.asarray(op.compute(np, *examples)).dtype
    except (TypeError, ArithmeticError) as exc:
        if not _takes(op, len(examples)):
            return np.result_type(*dtypes)
        if isinstance(exc, TypeError):
            return None
        raise
    except Exception:  # noqa: BLE001  (any other failure of the example: fall back to the rule)
        return np.result_type(*dtypes)


def _takes(op: Op, n: int) -> bool:
    """Whether ``op.compute`` takes ``n`` inputs (``where``'s rule asks about two of three)."""
    try:
        inspect.signature(op.compute).bind(np, *range(n))
    except TypeError:
        return False
    return True


class Op:
    """One primitive: its forward rule, both derivative rules and its cost.

    Subclasses override :meth:`compute` and, when differentiable, :meth:`gradient` and
    :meth:`jvp`. An op's parameters (an axis, a shape, ...) are named once, in the class's
    ``attributes``, and set once, by ``Op.__init__``; :attr:`attrs`, :meth:`key` (two ops
    with equal keys compute the same function of their inputs) and :meth:`label` follow
    from them. Class flags say what kind of op it is:

    * ``linear``: linear in its first input, the others (a shape to match, indices, a
      predicate) being fixed, so its tangent rule is the op itself (see :meth:`jvp`);
    * ``view``: NumPy computes it as a view (new shape and strides, same memory), so it
      moves no data (see :meth:`accesses`);
    * ``elementwise``: output element i depends on input elements i only (fusable);
    * ``accepts_dead``: a control-flow op that looks at dead (untaken-branch) inputs;
    * ``shape_only``: it reads nothing but its inputs' shapes and dtypes (``ones_like``).
    """

    name = "op"
    symbol: str | None = None  # infix symbol used in auto names, e.g. "*"
    attributes: tuple[str, ...] = ()  # the op's parameters, e.g. ("axis", "keepdims")
    linear = False
    view = False
    elementwise = False
    accepts_dead = False
    shape_only = False
    flops_per_element = 0  # the cost per output element (see :meth:`flops`)

    def __init__(self, **values):
        """Set each declared attribute from ``values`` (checked by the subclass first)."""
        if values.keys() != set(self.attributes):
            raise TypeError(f"{type(self).__name__} declares the attributes {self.attributes}, "
                            f"got {tuple(values)}")  # fmt: skip
        for attribute, value in values.items():
            setattr(self, attribute, value)

    # -- forward -------------------------------------------------------------------------
    def compute(self, xp, *inputs):
        """Numbers in, numbers out; ``xp`` is the array module (numpy or cupy)."""
        raise NotImplementedError(f"{self.name} has no compute rule")

    def infer_shape(self, *shapes: Shape | None) -> Shape | None:
        """The output shape from the input shapes (``None`` where unknown)."""
        return None

    def infer_dtype(self, *dtypes):
        """The output dtype from the input dtypes (``None`` where unknown): NumPy's own answer,
        the op computed on one element of each dtype (:func:`dtype_by_example`)."""
        if not dtypes or any(d is None for d in dtypes):
            return None
        return dtype_by_example(self, dtypes)

    # -- derivatives (both return *nodes*) ----------------------------------------------
    def gradient(self, node: Node, adjoint: Node, needs: Sequence[bool]) -> list[Node | None]:
        """Partial adjoints ``v̄(k→i) = v̄i · ∂vi/∂vk`` for each input k of ``node``.

        ``needs[k]`` says whether input k leads to a node we differentiate for; a rule may
        return None there instead of building (or, eagerly, computing) a partial no one uses.
        """
        raise GraphError(f"op '{self.name}' (node {node.name}) is not differentiable")

    def jvp(self, node: Node, *tangents: Node | None) -> Node | None:
        """The tangent of ``node`` from its inputs' tangents (None means zero).

        A ``linear`` op maps the tangent of its first input as it maps the input itself:
        ``f(x + ε·ẋ, like) = f(x, like) + ε·f(ẋ, like)``, so its tangent is the op applied
        to ``ẋ`` (no tangent in, none out).
        """
        if not self.linear:
            raise GraphError(f"op '{self.name}' (node {node.name}) has no forward-mode rule")
        return None if tangents[0] is None else apply(self, tangents[0], *node.inputs[1:])

    # -- cost ----------------------------------------------------------------------------
    def flops(self, out_shape: Shape, *in_shapes: Shape) -> int:
        """Floating-point operations to compute the output (lecture convention):
        ``flops_per_element`` per output element unless the op counts otherwise."""
        return self.flops_per_element * math.prod(out_shape)

    def accesses(self, out_shape: Shape, *in_shapes: Shape) -> tuple[tuple[int, ...], int]:
        """Elements loaded from each input and stored to the output, run as one kernel.

        The compulsory traffic: each input element is read once and each output element
        written once (``C = A + B``: loads ``(n, n)``, stores ``n``); a view moves nothing;
        an op that reads only its inputs' shapes (``ones_like``) loads nothing.
        """
        if self.view:
            return (0,) * len(in_shapes), 0
        if self.shape_only:
            return (0,) * len(in_shapes), math.prod(out_shape)
        return tuple(math.prod(s) for s in in_shapes), math.prod(out_shape)

    def memory_elements(self, out_shape: Shape, *in_shapes: Shape) -> int:
        """Loads plus stores in elements, as the lecture counts them (``C = A + B``: 3n)."""
        loads, stores = self.accesses(out_shape, *in_shapes)
        return sum(loads) + stores

    def memory_bytes(self, out_shape: Shape, *in_shapes: Shape, itemsizes: Sequence[int]) -> int:
        """Loads plus stores in bytes; ``itemsizes`` gives the output's, then each input's."""
        if len(itemsizes) != len(in_shapes) + 1:
            raise ShapeError(
                f"{self.label()}: memory_bytes needs {len(in_shapes) + 1} itemsizes "
                f"(output, then each input), got {len(itemsizes)}"
            )
        loads, stores = self.accesses(out_shape, *in_shapes)
        return stores * itemsizes[0] + sum(n * size for n, size in zip(loads, itemsizes[1:]))

    # -- code generation (the fusion pass) -----------------------------------------------
    def expression(self, args: Sequence[str], target: str) -> str | None:
        """This op as one expression over the input expressions ``args``, or None.

        ``target`` is ``"numexpr"`` (CPU) or ``"cuda"`` (CUDA C, float). Elementwise ops
        that return an expression for both targets can be fused into one kernel.
        """
        return None

    # -- identity and display: both follow from the declared attributes ----------------
    @property
    def attrs(self) -> dict:
        """The declared attributes and their values, e.g. ``{"axis": 1, "keepdims": False}``."""
        return {attribute: getattr(self, attribute) for attribute in self.attributes}

    def key(self) -> tuple:
        """What makes two ops compute the same function (used by CSE)."""
        return (type(self), *(value_key(getattr(self, a)) for a in self.attributes))

    def label(self) -> str:
        """A short description such as ``sum(axis=1, keepdims=False)``."""
        if not self.attributes:
            return self.name
        args = ", ".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.name}({args})"

    def __repr__(self) -> str:
        return f"<op {self.label()}>"

    # -- facts that other layers read from the op: picture, kernel, FLOP table ----------
    glyph: str | None = None  # how the symbol is drawn in pictures when it differs ("×")
    family: str | None = None  # its compute component (course_lib.models.compute.FAMILIES)
    flop_rows: tuple[str, ...] = ()  # the LLaMA FLOP-table rows it computes (models.flops)

    def written(self, args: Sequence[str]) -> str:
        """How a node of this op is written in a picture, over its inputs' names ``args``.

        ``v2 × v3`` for an infix symbol, ``−v2`` for a prefix one, else the op's name with
        the inputs and the attributes that are set: ``sum(v1, axis=1)``.
        """
        symbol = self.glyph or self.symbol
        if symbol is not None and len(args) == 2:
            return f"{args[0]} {symbol} {args[1]}"
        if symbol is not None and len(args) == 1:
            return f"{symbol}{args[0]}"
        settings = [f"{k}={v}" for k, v in self.attrs.items() if v is not None and v is not False]
        return f"{self.name}({', '.join([*args, *settings])})"

    def gpu_kernel(self, launch, *arrays):
        """This op's CUDA kernel run on ``arrays``, or None where the kernel does not apply.

        ``launch`` offers the functions of :mod:`course_lib.kernels.launch` with the mode
        (GPU or CPU emulator) filled in, e.g. ``launch.softmax(x)``. ``compute`` asks for the
        kernel through :func:`course_lib.kernels.dispatch.run_on_gpu`, which calls this only
        on the GPU, for float32 arrays, when the op's kernel is switched on. An op with a
        kernel returns None for what it cannot handle (an axis, a rank), so ``compute``
        falls back to its array-module code; ops without a kernel keep this default.
        """
        return None


def value_key(value):
    """One definition of "the same value", for CSE keys, jit guards and constant caches.

    A hashable key that is equal exactly when the two values have the same type and the
    same value, bit for bit: ``0.0`` and ``-0.0``, ``3`` and ``3.0``, ``True`` and ``1``,
    ``np.float32(1)`` and ``1.0`` all differ (Python's ``==`` calls each pair equal, but
    they compute differently: signs of zeros, dtypes, ``x[True]`` against ``x[1]``), and a
    NaN equals itself (the same bits: ``-nan`` is another). Tuples and lists compare element
    by element, arrays by dtype, shape and bytes. A value of another type keys as itself
    (its type included), which raises TypeError when hashed if it is unhashable.
    """
    kind = type(value)
    if kind is float:  # ±0.0 and NaNs by their bits (== cannot tell them apart)
        return (float, value if value == value and value != 0.0 else struct.pack("<d", value))
    if kind in (bool, int, str) or value is None or value is Ellipsis:
        return (kind, value)
    if kind in (tuple, list):
        return (kind, tuple(value_key(v) for v in value))
    if kind is slice:
        return (slice, value_key(value.start), value_key(value.stop), value_key(value.step))
    if isinstance(value, (np.ndarray, np.generic)):
        return (kind, value.dtype.str, value.shape, value.tobytes())
    return (kind, value)


class Node:
    """One value in a computational graph (immutable).

    Attributes
    ----------
    op : Op
        The primitive that computes this node.
    inputs : tuple of Node
        The nodes it consumes.
    name : str
        A deterministic label (given, or built from the op and input names).
    shape, dtype :
        The static shape and dtype, or ``None`` where not known before running.
    """

    __slots__ = ("op", "inputs", "name", "shape", "dtype", "seq", "depth", "__weakref__")
    is_eager = False  # True for nodes that hold their value: apply hands them to the eager hook

    def __init__(self, op: Op, inputs: tuple, name: str, shape=None, dtype=None):
        setter = object.__setattr__
        setter(self, "seq", next(_creation_counter))  # creation order: a topological order
        setter(self, "depth", 1 + max([i.depth for i in inputs], default=0))  # for pickles
        setter(self, "op", op)
        setter(self, "inputs", inputs)
        setter(self, "name", name)
        setter(self, "shape", shape)
        setter(self, "dtype", dtype)

    def __setattr__(self, key, value):
        name = getattr(self, "name", "<node>")  # a node being unpickled may have none yet
        raise GraphError(f"node {name} is immutable; build a new node instead of setting {key!r}")

    def __delattr__(self, key):
        raise GraphError(f"node {self.name} is immutable; its {key!r} cannot be deleted")

    # -- copies: a node never changes, so a copy is the node itself ----------------------
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        """Pickle a node as its op, inputs, name, shape and dtype (it gets a new ``seq``); a
        deep one after its deep ancestors, as a flat list (see :func:`_reduce`)."""
        return _reduce(self)

    def __bool__(self):
        raise GraphError(
            f"the truth value of node {self.name} is not known while the graph is built; "
            "for data-dependent branches use course_lib.cond(pred, true_fn, false_fn, ...)"
        )

    def __float__(self):
        raise GraphError(
            f"node {self.name} has no number while the graph is built; evaluate it first, "
            "or keep the computation in the graph (course_lib.cond for branches)"
        )

    __int__ = __float__

    def __array__(self, dtype=None, copy=None):
        raise GraphError(
            f"node {self.name} has no array while the graph is built, so NumPy cannot use it "
            "(np.asarray, np.exp, ...); use course_lib's ops (cl.exp) to stay in the graph, "
            "or evaluate it first"
        )

    def __repr__(self) -> str:
        dims = ["?" if d is None else str(d) for d in self.shape or ()]
        shape = "?" if self.shape is None else "x".join(dims) or "scalar"
        return f"<Node {self.name} = {self.op.label()} [{shape}]>"

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_variable(self) -> bool:
        return isinstance(self.op, Variable)

    @property
    def is_constant(self) -> bool:
        return isinstance(self.op, Constant)

    # -- Python's operators: each builds the op of the same name in course_lib.ops ----------
    def __add__(self, other):
        """``self + other``: :func:`course_lib.ops.add` (op ``Add``, NumPy broadcasting)."""
        return _OPS["add"](self, other)

    def __radd__(self, other):
        """``other + self``: :func:`course_lib.ops.add`."""
        return _OPS["add"](other, self)

    def __sub__(self, other):
        """``self - other``: :func:`course_lib.ops.sub` (op ``Sub``)."""
        return _OPS["sub"](self, other)

    def __rsub__(self, other):
        """``other - self``: :func:`course_lib.ops.sub`."""
        return _OPS["sub"](other, self)

    def __mul__(self, other):
        """``self * other``: :func:`course_lib.ops.mul` (op ``Mul``, NumPy broadcasting)."""
        return _OPS["mul"](self, other)

    def __rmul__(self, other):
        """``other * self``: :func:`course_lib.ops.mul`."""
        return _OPS["mul"](other, self)

    def __truediv__(self, other):
        """``self / other``: :func:`course_lib.ops.div` (op ``Div``)."""
        return _OPS["div"](self, other)

    def __rtruediv__(self, other):
        """``other / self``: :func:`course_lib.ops.div`."""
        return _OPS["div"](other, self)

    def __matmul__(self, other):
        """``self @ other``: :func:`course_lib.ops.matmul` (op ``MatMul``)."""
        return _OPS["matmul"](self, other)

    def __rmatmul__(self, other):
        """``other @ self``: :func:`course_lib.ops.matmul`."""
        return _OPS["matmul"](other, self)

    def __pow__(self, p):
        """``self ** p`` for a real number p: :func:`course_lib.ops.power` (op ``Power``)."""
        return _OPS["power"](self, p)

    def __rpow__(self, base):
        """``base ** self``: refused by :func:`course_lib.ops.power` (a node exponent), with
        the way out (``exp(p * log(base))``)."""
        return _OPS["power"](base, self)

    def __neg__(self):
        """``-self``: :func:`course_lib.ops.neg` (op ``Neg``)."""
        return _OPS["neg"](self)

    def __pos__(self):
        """``+self`` is ``self``."""
        return self

    def __lt__(self, other):
        """``self < other``: :func:`course_lib.ops.less` (a boolean node)."""
        return _OPS["less"](self, other)

    def __le__(self, other):
        """``self <= other``: :func:`course_lib.ops.less_equal`."""
        return _OPS["less_equal"](self, other)

    def __gt__(self, other):
        """``self > other``: :func:`course_lib.ops.greater`."""
        return _OPS["greater"](self, other)

    def __ge__(self, other):
        """``self >= other``: :func:`course_lib.ops.greater_equal`."""
        return _OPS["greater_equal"](self, other)

    # ``==`` and ``!=`` stay identity (nodes are dict keys): use course_lib.ops.equal

    def __getitem__(self, index):
        """``self[index]``: :func:`course_lib.ops.getitem` (op ``GetItem``)."""
        return _OPS["getitem"](self, index)

    def __iter__(self):
        """``for row in x``: the rows ``x[0], x[1], ...`` along the first axis."""
        if not self.shape or self.shape[0] is None:
            raise GraphError(
                f"cannot iterate over node {self.name} of shape {self.shape}: iteration needs "
                "a first axis of known size"
            )
        return (_OPS["getitem"](self, i) for i in range(self.shape[0]))

    def __len__(self) -> int:
        """``len(x)``: the size of the first axis, as NumPy's (known when the graph is built)."""
        if not self.shape or self.shape[0] is None:
            raise GraphError(f"len() of node {self.name} of shape {self.shape}: it needs a first "
                             "axis of known size")  # fmt: skip
        return self.shape[0]

    def __contains__(self, value):
        """``value in x`` is refused: whether an element equals ``value`` is not known while
        the graph is built (Python would compare the rows by identity, always False)."""
        raise GraphError(
            f"'in' on node {self.name}: its elements are not known while the graph is built; "
            "evaluate it and test the values, or build course_lib.equal(x, value)"
        )

    @property
    def T(self) -> Node:
        """The axes reversed: :func:`course_lib.ops.transpose` (op ``Permute``)."""
        return _OPS["transpose"](self)

    def reshape(self, *shape) -> Node:
        """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``: :func:`course_lib.ops.reshape`."""
        return _OPS["reshape"](self, shape[0] if len(shape) == 1 else shape)

    def sum(self, axis=None, keepdims=False, dtype=None, out=None) -> Node:
        """``x.sum(axis, keepdims)``: :func:`course_lib.ops.sum` (``np.sum(x)`` calls it)."""
        return self._reduce("sum", axis, keepdims, dtype, out)

    def mean(self, axis=None, keepdims=False, dtype=None, out=None) -> Node:
        """``x.mean(axis, keepdims)``: :func:`course_lib.ops.mean` (``np.mean(x)`` calls it)."""
        return self._reduce("mean", axis, keepdims, dtype, out)

    def _reduce(self, name, axis, keepdims, dtype, out) -> Node:
        if dtype is not None or out is not None:
            raise GraphError(
                f"{name} of node {self.name}: NumPy's dtype= and out= are not supported; "
                f"use cl.{name}(x, axis, keepdims) (and cl.cast for a dtype)"
            )
        return _OPS[name](self, axis, keepdims)

    def __array_ufunc__(self, ufunc, method: str, *inputs, **kwargs):
        """NumPy on nodes: the ufuncs behind Python's operators build graph ops; others are
        refused.

        With an array or a NumPy scalar on the left (``np.float64(2) * x`` is
        ``np.multiply(2, x)``) NumPy hands the operator to the node, which builds the op, so
        the graph is kept. ``np.exp(x)`` would take the values out of the graph (a symbolic
        node has none yet, and a tensor's gradients would silently stop), so it raises a
        GraphError (a TypeError) pointing to ``cl.exp`` (``np.max(x)``, NumPy's
        ``np.maximum.reduce``, to ``cl.max``). ``np.equal`` and ``np.not_equal`` are
        identity, as ``==`` and ``!=`` on nodes.
        """
        if method == "__call__" and not kwargs:
            if ufunc in _UFUNC_OPS:
                return _OPS[_UFUNC_OPS[ufunc]](*inputs)
            if ufunc in (np.equal, np.not_equal):  # ``==`` on nodes is identity, as without NumPy
                return (inputs[0] is inputs[1]) is (ufunc is np.equal)
        call = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        name = _UFUNC_REDUCES.get(ufunc) if method == "reduce" else ufunc.__name__
        ours = f"cl.{name}" if name in _OPS else "course_lib's ops"
        raise GraphError(
            f"{call} cannot compute on node {self.name}: NumPy would take its values out of the "
            f"graph (a symbolic node has none yet, a tensor's gradients would stop); use {ours}, "
            "or the values (.numpy() of a tensor, Executor.run of a node)"
        )


# -- the op library, as Node's operators see it ----------------------------------------------
# graph.py cannot import course_lib.ops (the ops import graph.py), so the op library hands
# its public functions over when it is imported: ``_OPS["mul"]`` is ``course_lib.ops.mul``.
_OPS: dict[str, Callable[..., Node]] = {}

# The ufuncs NumPy calls for Python's operators, and the op each of them builds.
_UFUNC_OPS = {
    np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
    np.matmul: "matmul", np.power: "power", np.less: "less", np.less_equal: "less_equal",
    np.greater: "greater", np.greater_equal: "greater_equal",
}  # fmt: skip
# The reductions NumPy computes as a ufunc's reduce (``np.max(x)`` is ``np.maximum.reduce``).
_UFUNC_REDUCES = {np.add: "sum", np.maximum: "max"}


def register_ops(functions: Mapping[str, Callable[..., Node]]) -> None:
    """Give Node's operators the op library's functions (called by :mod:`course_lib.ops`)."""
    _OPS.update(functions)


# -- leaves ---------------------------------------------------------------------------------
class Variable(Op):
    """A named input whose value is fed when the graph runs."""

    name = "variable"

    def compute(self, xp, *inputs):  # never called: executors feed variables
        raise GraphError("a variable has no compute rule; feed it a value")

    def key(self) -> tuple:
        return (Variable, id(self))  # two variables are never the same value


class Constant(Op):
    """A value fixed when the graph is built."""

    name = "constant"

    def __init__(self, value):
        super().__init__()
        self.value = value  # a Python number, or a read-only NumPy array (on the host)
        self._on_device: dict = {}  # array module name -> the value copied there once

    def __getstate__(self) -> dict:
        """Pickled without the device copies (made again where a run needs them)."""
        return {**self.__dict__, "_on_device": {}}

    def __setstate__(self, state: dict) -> None:
        """Unpickled (or deep-copied): an array is frozen again, as :func:`constant` made it
        (pickle makes arrays writable, and a run could return the constant's own memory)."""
        value = state["value"]
        self.__dict__.update(state, value=frozen(value) if isinstance(value, np.ndarray) else value)

    def compute(self, xp, *inputs):
        return self.on(xp)

    def on(self, xp):
        """The value as ``xp``'s array: numbers stay numbers (weakly typed), a NumPy array
        is copied to the device once per device and kept (a constant never changes)."""
        value = self.value
        if xp is np or isinstance(value, (bool, int, float)):
            return value
        copy = self._on_device.get(xp.__name__)
        if copy is None:
            backend.check_device_dtype(np.asarray(value), f"the constant {self.written(())}",
                                       backend.get_device())  # fmt: skip
            copy = self._on_device[xp.__name__] = xp.asarray(value)
        return copy

    def key(self) -> tuple:
        if np.ndim(self.value) == 0:
            return (Constant, value_key(self.value))
        return (Constant, id(self))

    def label(self) -> str:
        return "constant"

    def written(self, args: Sequence[str]) -> str:
        """A scalar as its value (``1``), an array as its shape (``const[3, 4]``); the
        default name of an unnamed constant."""
        value = self.value
        if np.ndim(value) == 0:
            return _scalar_name(value.item() if hasattr(value, "item") else value)
        return f"const{list(np.shape(value))}"


def variable(name: str, shape=None, dtype=None) -> Node:
    """A graph input called ``name``; ``shape`` may contain ``None`` for any size."""
    if not isinstance(name, str) or not name:
        raise GraphError(f"a variable needs a non-empty string name, got {name!r}")
    shape = None if shape is None else params.shape(shape, f"variable {name}: shape")
    dtype = None if dtype is None else params.dtype(dtype, f"variable {name}")
    return Node(Variable(), (), name, shape, dtype)


_scalar_constants: dict = {}


def constant(value, name: str | None = None) -> Node:
    """A constant node. Python scalars stay weakly typed (``x * 2.0`` keeps x's dtype).

    Arrays are copied (a NumPy copy is read-only), so mutating ``value`` afterwards changes
    neither the graph nor what optimised (constant-folded) and unoptimised runs compute.
    """
    if isinstance(value, Node):
        raise GraphError(f"constant() takes numbers or arrays, not the node {value.name}")
    name = params.name(name, "constant()")
    weak = type(value) in (bool, int, float)  # not np.float64 (a float subclass): NumPy
    if weak and name is None:  # scalars are strongly typed (float32 * np.float64 is float64)
        key = value_key(value)  # by type and value: 1, 1.0 and True, 0.0 and -0.0 differ
        node = _scalar_constants.get(key)
        if node is None:
            op = Constant(value)
            node = Node(op, (), op.written(()), (), None)
            if len(_scalar_constants) < 4096:
                _scalar_constants[key] = node
        return node
    if weak:
        return Node(Constant(value), (), name, (), None)
    # a host copy: changing ``value`` later cannot change the graph, and a graph runs on any
    # device (the value is copied to a device when a run there first needs it)
    value = backend.plain_array(value, "constant()")  # a masked array's mask would be lost
    try:
        array = np.array(backend.to_numpy(value))
    except ValueError as exc:  # a ragged list: [[1, 2], [3]]
        raise ShapeError(f"constant(): the value is not an array of one shape: {exc}") from None
    array = params.numeric_array(array, "constant()")
    array = frozen(array)  # nor can changing what a run returns
    op = Constant(array)
    return Node(op, (), op.written(()) if name is None else name, tuple(array.shape), array.dtype)


def frozen(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` that no one can write, not even by setting ``flags.writeable``
    (its memory is an immutable ``bytes`` object, so neither it nor any view of it can be
    made writable again): what a constant holds and what a run may return of it."""
    return np.frombuffer(array.tobytes(), dtype=array.dtype).reshape(array.shape)  # C order


def _scalar_name(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int) and value.bit_length() > 64:  # Python writes up to 4300 digits
        return f"{'-' if value < 0 else ''}2^{abs(value).bit_length() - 1}…"
    return repr(value)


def as_node(value) -> Node:
    """Return ``value`` if it is a node, else wrap it as a constant."""
    if isinstance(value, Node):
        return value
    if type(value) is float:  # fast path: cached scalars
        node = _scalar_constants.get(value_key(value))
        if node is not None:
            return node
    if isinstance(value, Number) or hasattr(value, "shape") or isinstance(value, (list, tuple)):
        return constant(value)
    raise GraphError(f"cannot use a {type(value).__name__} as a graph value")


# -- building nodes -------------------------------------------------------------------------
def _as_input(op: Op, k: int, value) -> Node:
    """Input ``k`` of ``op`` as a node (:func:`as_node`); a value that cannot be one is an error
    of its kind naming the op and the input."""
    try:
        return as_node(value)
    except CourseLibError as exc:
        raise type(exc)(f"{op.label()}: input {k + 1}: {exc}") from None


def _no_eager_hook(op: Op, inputs: tuple, name: str | None) -> Node:
    raise GraphError(f"{op.label()}: an input holds a value, but no eager hook is registered")


# How an op runs at once on nodes that hold values (``is_eager``): a layer above registers it
# (the eager layer, when it is imported), so graph.py imports no layer above it.
_eager_hook: list[Callable[[Op, tuple, str | None], Node]] = [_no_eager_hook]


def set_eager_hook(hook: Callable[[Op, tuple, str | None], Node]) -> None:
    """Make :func:`apply` call ``hook(op, inputs, name)`` when an input is eager."""
    _eager_hook[0] = hook


def auto_name(op: Op, inputs: Sequence[Node]) -> str:
    """A deterministic symbolic name like ``(x1*x2)`` or ``exp(v1)``; long ones abbreviate."""
    if op.symbol is not None and len(inputs) == 2:
        name = f"({inputs[0].name}{op.symbol}{inputs[1].name})"
    elif op.symbol is not None and len(inputs) == 1:
        name = f"{op.symbol}{inputs[0].name}"
    else:
        name = f"{op.name}({', '.join(i.name for i in inputs)})"
    return name if len(name) <= _MAX_AUTO_NAME else f"{op.name}(…)"


def apply(op: Op, *args, name: str | None = None) -> Node:
    """Make the node ``op(*args)``; numbers and arrays become constants.

    If an input is eager (holds its value), the registered eager hook (:func:`set_eager_hook`)
    runs the op at once and returns its result.
    Shapes are checked here, so a bad shape fails when the graph is built, and so is a
    Python number the other input's dtype cannot hold (``int8 + 1000``: NumericError).
    """
    inputs = tuple([a if isinstance(a, Node) else _as_input(op, k, a) for k, a in enumerate(args)])
    for node in inputs:
        if node.is_eager:
            return _eager_hook[0](op, inputs, name)
    return Node(op, inputs, name or auto_name(op, inputs), *_static(op, inputs))


def _static(op: Op, inputs: Sequence[Node]) -> tuple:
    """The static shape and dtype of ``op`` on ``inputs``; inputs that do not fit are a
    ShapeError, a Python number the other dtype cannot hold a NumericError."""
    try:
        return op.infer_shape(*(i.shape for i in inputs)), op.infer_dtype(*_dtypes_of(op, inputs))
    except ShapeError:
        raise
    except ArithmeticError as exc:  # int8 + 1000
        typed = ", ".join(f"{i.name}: {i.shape} {_dtype_name(i)}" for i in inputs)
        raise NumericError(f"{op.label()}: NumPy cannot compute it on ({typed}): {exc}") from exc
    except (ValueError, IndexError, TypeError) as exc:
        raise ShapeError(
            f"{op.label()}: inputs do not fit ({describe_shapes(inputs)}): {exc}"
        ) from exc


def _dtype_name(node: Node) -> str:
    """``float32``, or ``Python int`` for a weak scalar (``unknown dtype`` where not known)."""
    if is_weak_scalar(node):
        return f"Python {type(node.op.value).__name__}"
    return "unknown dtype" if node.dtype is None else str(node.dtype)


def _dtypes_of(op: Op, inputs: Sequence[Node]) -> list:
    """The inputs' dtypes for ``op.infer_dtype``; NumPy's rule (:meth:`Op.infer_dtype`) also
    gets weak scalars as the Python numbers they are (``float32 * 2.0`` is float32, ``int8 +
    1000`` is refused), unless all are (a Python number's result has no dtype)."""
    weak = [is_weak_scalar(i) for i in inputs]
    if type(op).infer_dtype is not Op.infer_dtype or all(weak):
        return [i.dtype for i in inputs]
    return [i.op.value if w else i.dtype for i, w in zip(inputs, weak)]


# -- walks ----------------------------------------------------------------------------------
def topological_order(outputs: Node | Iterable[Node]) -> list[Node]:
    """All nodes the outputs (a node or several) depend on, each after its inputs.

    The order is creation order (``seq``), which is topological because a node's inputs
    exist before it does; it is also the lecture's v1, v2, ... numbering. Iterative, so
    graphs of any depth work.
    """
    if isinstance(outputs, Node):  # not its rows (iterating a node gives x[0], x[1], ...)
        outputs = [outputs]
    seen: set[Node] = set()
    stack = [o for o in outputs if not (o in seen or seen.add(o))]
    found = list(stack)
    while stack:
        for child in stack.pop().inputs:
            if child not in seen:
                seen.add(child)
                stack.append(child)
                found.append(child)
    found.sort(key=_seq)
    return found


_seq = operator.attrgetter("seq")


def rebuild(outputs: Sequence[Node], replace: dict) -> list[Node]:
    """Copies of the graph of ``outputs`` with the nodes of ``replace`` substituted.

    Nodes that do not depend on a replaced node are shared, not copied. A copy keeps its
    node's static shape and dtype while its inputs' are unchanged, else infers them anew (a
    float32 node in for a float64 one makes its users float32), as :func:`apply` does.
    """
    new = dict(zip(replace, node_list(list(replace.values()), "rebuild: replace's values")))
    for node in topological_order(outputs):
        if node not in new and any(i in new for i in node.inputs):
            inputs = tuple(new.get(i, i) for i in node.inputs)
            same = all(_facts(a) == _facts(b) for a, b in zip(inputs, node.inputs))
            static = (node.shape, node.dtype) if same else _static(node.op, inputs)
            new[node] = Node(node.op, inputs, node.name, *static)
    return [new.get(o, o) for o in outputs]


def _facts(node: Node) -> tuple:
    """What :func:`_static` reads of an input (``dtype == None`` is True for float64)."""
    weak = node.op.value if is_weak_scalar(node) else None
    return node.shape, None if node.dtype is None else node.dtype.str, value_key(weak)


# -- pickles ---------------------------------------------------------------------------------
# Pickle writes a node's inputs inside it, so a chain of a few hundred ops went past Python's
# recursion limit. A node deeper than _SHALLOW is written after a flat list, in creation order,
# of its deep ancestors that the pickle has not written yet, each written shallow (its inputs
# are in the pickle already): every node is written once, so a gradient graph, whose nodes
# reach back into the forward pass, pickles in linear size. Every node is keyed by the token
# of the process that made it and its seq, so what two pickles of one graph share is one node
# again once loaded (nodes never change: sharing them is safe).
_SHALLOW = 100
_tokens = [(0, secrets.token_hex(8))]  # (first seq, token): a forked child's new nodes get its own
_unpickled: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # (token, seq) -> node
_unpickling = threading.Lock()  # two threads loading one node build it once
_writing = threading.local()  # .dump, .ancestors: weakrefs to this thread's _Dump, _Ancestors


def _forked() -> None:
    """In a forked child: its new nodes take seqs its parent and siblings also give theirs."""
    _tokens.append((next(_creation_counter), secrets.token_hex(8)))


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork either
    os.register_at_fork(after_in_child=_forked)


def _token(seq: int) -> str:
    return next(token for first, token in reversed(_tokens) if seq >= first)


def _alive(name: str):
    """This thread's ``_writing.name``, or None where it is gone."""
    ref = getattr(_writing, name, None)
    return None if ref is None else ref()


class _Dump:
    """The deep nodes a pickler has written. A deep node's arguments start with it, so the
    pickler's memo holds it from the first on; written a second time, it is in a second
    pickler too, and says nothing about either any more. It loads as ``()``."""

    __slots__ = ("listed", "writes", "__weakref__")

    def __init__(self):
        self.listed: dict[int, Node] = {}  # id -> node
        self.writes = 0

    def __reduce__(self):
        self.writes += 1
        return tuple, ()


class _Ancestors:
    """A deep node's deep ancestors that its pickler has not written, written (and loaded)
    as a list in creation order, each one shallow."""

    __slots__ = ("node", "dump", "shallow", "__weakref__")

    def __init__(self, node: Node, dump: _Dump):
        self.node, self.dump, self.shallow = node, dump, {}

    def __reduce__(self):
        listed = self.dump.listed if self.dump.writes == 1 else {}
        listed[id(self.node)] = self.node
        found, todo = [], [self.node]
        while todo:
            for i in todo.pop().inputs:
                if i.depth > _SHALLOW and listed.get(id(i)) is not i:
                    listed[id(i)] = i
                    found.append(i)
                    todo.append(i)
        found.sort(key=_seq)
        self.shallow = {id(n): n for n in found}
        _writing.ancestors = weakref.ref(self)
        return list, (found + [_Written()],)


class _Written:
    """The end of an :class:`_Ancestors` list: its nodes are written (it loads as ``()``)."""

    def __reduce__(self):
        _writing.ancestors = None
        return tuple, ()


def _reduce(node: Node) -> tuple:
    """``node.__reduce__``: shallow (its inputs written inside it) when it is at most
    ``_SHALLOW`` deep or in the ancestors being written, else after its ancestors."""
    args = (_token(node.seq), node.seq, node.op, node.inputs, node.name, node.shape, node.dtype)
    ancestors = _alive("ancestors")
    if node.depth <= _SHALLOW or ancestors is not None and ancestors.shallow.get(id(node)) is node:
        return _unpickle_node, args
    dump = _alive("dump")
    if dump is None or dump.writes > 1:
        dump = _Dump()
        _writing.dump = weakref.ref(dump)
    return _unpickle_deep, (dump, _Ancestors(node, dump), *args)


def _unpickle_node(token: str, seq: int, op: Op, inputs: tuple, name, shape, dtype) -> Node:
    """The node ``seq`` of the process ``token``: built once, then shared."""
    with _unpickling:
        node = _unpickled.get((token, seq))
        if node is None:
            node = _unpickled[token, seq] = Node(op, inputs, name, shape, dtype)
    return node


def _unpickle_deep(dump, ancestors: list, *args) -> Node:
    """A deep node, loaded after its ancestors (each by :func:`_unpickle_node`)."""
    return _unpickle_node(*args)


def creation_mark() -> int:
    """A number below the ``seq`` of every node created from now on."""
    return next(_creation_counter)


def consumers(order: Sequence[Node]) -> dict[Node, list[Node]]:
    """For each node of ``order``, the nodes of ``order`` that use it (in order)."""
    users: dict[Node, list[Node]] = {n: [] for n in order}
    for node in order:
        for inp in node.inputs:
            if inp in users and (not users[inp] or users[inp][-1] is not node):
                users[inp].append(node)
    return users


def tree_size(node: Node) -> int:
    """How many nodes ``node`` has written out as a formula, a tree: a value used twice is
    written, and counted, twice (``x * x`` has 3). The graph shares it, so it has
    ``len(topological_order(node))`` nodes; the two differ most for repeated uses, which
    is where symbolic differentiation swells."""
    size: dict[Node, int] = {}
    for n in topological_order(node):
        size[n] = 1 + sum(size[i] for i in n.inputs)
    return size[node]


FORMULA_LIMIT = 100_000  # characters: a longer formula is refused (draw the graph instead)


def formula(node: Node, names: Mapping[Node, str] | None = None) -> str:
    """``node`` written out as one formula over its inputs, e.g. ``(4 × x) × (1 − x)``.

    Nodes in ``names`` are written by that name, variables and constants by their own;
    every other node is its op written over its inputs' formulas (:meth:`Op.written`),
    ``node`` itself included. A value used twice is written out twice, as on paper, so the
    text can be exponentially longer than the graph (``y = y * y`` forty times): its length
    is counted on the graph first, and beyond ``FORMULA_LIMIT`` characters it is refused
    with a :class:`GraphError`.
    """
    names = names or {}

    def is_leaf(n: Node) -> bool:
        return not n.inputs or (n is not node and n in names)

    order = _written_order(node, is_leaf)
    forms: dict[Node, _Form] = {}
    for n in order:
        if is_leaf(n):
            forms[n] = _Form.of_text(names.get(n, n.name))
        else:
            forms[n] = _Form.of_op(n.op, [(forms[i], is_leaf(i)) for i in n.inputs])
    length = forms[node].length
    if length > FORMULA_LIMIT:
        # a length of thousands of digits is beyond what Python writes in decimal (4300 digits)
        size = f"{length:,}" if length < 10**15 else f"about 2^{length.bit_length() - 1}"
        raise GraphError(
            f"formula: the written-out formula would have {size} characters (more "
            f"than the limit of {FORMULA_LIMIT:,}); draw the graph instead with cl.draw_graph"
        )
    return _write(order, forms, is_leaf, names)


def _written_order(node: Node, is_leaf: Callable[[Node], bool]) -> list[Node]:
    """The nodes ``node``'s formula is written from, each once, inputs before users."""
    order: list[Node] = []
    placed: set[Node] = set()
    stack = [node]
    while stack:  # iterative post-order, stopping at named nodes and leaves
        n = stack[-1]
        missing = [] if is_leaf(n) else [i for i in n.inputs if i not in placed]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        if n not in placed:
            placed.add(n)
            order.append(n)
    return order


class _Form:
    """What a node's written-out formula is, counted without writing it: its length in
    characters, and whether it is one call ``name(...)`` (which needs no parentheses)."""

    __slots__ = ("length", "is_call")

    def __init__(self, length: int, is_call: bool):
        self.length, self.is_call = length, is_call

    @classmethod
    def of_text(cls, text: str) -> _Form:
        return cls(len(text), _is_call(text))

    @classmethod
    def of_op(cls, op: Op, operands: list[tuple[_Form, bool]]) -> _Form:
        """``op`` written over operands (form, is a leaf) as :func:`_write` writes it: the
        op writes stand-ins, whose places say where (and how often) each operand goes."""
        stand_ins = [f"\ue000{k}\ue001" for k in range(len(operands))]  # no name, no "("
        template = op.written(stand_ins)
        uses = [template.count(s) for s in stand_ins]
        is_call = _is_call(template)
        if template in stand_ins:  # the op writes one operand as it is: a call if that is
            is_call = operands[stand_ins.index(template)][0].is_call
        length = len(template) - sum(u * len(s) for u, s in zip(uses, stand_ins))
        for u, (form, leaf) in zip(uses, operands):
            length += u * (form.length + 2 * _parenthesized(is_call, form, leaf))
        return cls(length, is_call)


def _parenthesized(in_call: bool, operand: _Form, leaf: bool) -> bool:
    """Whether an operand is written in parentheses: a compound one that is not a call,
    unless the whole is a call such as ``cos(x × x)``."""
    return not (in_call or leaf or operand.is_call)


def _write(order: list[Node], forms: dict, is_leaf: Callable, names: Mapping) -> str:
    """The formula of ``order``'s last node (each text dropped once its users have it)."""
    users_left = Counter(i for n in order if not is_leaf(n) for i in set(n.inputs))
    texts: dict[Node, str] = {}
    for n in order:
        if is_leaf(n):
            texts[n] = names.get(n, n.name)
            continue
        in_call = forms[n].is_call
        texts[n] = n.op.written(
            [
                f"({texts[i]})" if _parenthesized(in_call, forms[i], is_leaf(i)) else texts[i]
                for i in n.inputs
            ]
        )
        for i in set(n.inputs):
            users_left[i] -= 1
            if not users_left[i]:
                del texts[i]
    return texts[order[-1]]


def _is_call(text: str) -> bool:
    """Whether ``text`` is one call ``name(...)``: its first parenthesis closes at its end."""
    head, paren, _ = text.partition("(")
    if not (paren and head.isidentifier() and text.endswith(")")):
        return False
    depth = 0
    for position, char in enumerate(text[len(head) :], start=len(head)):
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return position == len(text) - 1
    return False


# -- shared helpers: output lists, static shapes, weak scalars, the reference interpreter ---
def node_list(nodes: Node | Iterable[Node], caller: str) -> list[Node]:
    """``nodes`` as a list (one node becomes ``[node]``, not its rows); anything in it that
    is not a node is a :class:`GraphError` naming ``caller``."""
    if isinstance(nodes, Node):
        return [nodes]
    found = list(nodes) if isinstance(nodes, Iterable) else [nodes]
    for node in found:
        if not isinstance(node, Node):
            raise GraphError(f"{caller}: expected graph nodes, got a {type(node).__name__}")
    return found


def same_kind(nodes: Node | Iterable[Node], results: list):
    """``results`` in the form ``nodes`` was given: one result for one node, else the list."""
    return results[0] if isinstance(nodes, Node) else results


def is_static(shape: Shape | None) -> bool:
    """Whether ``shape`` is fully known: not None, and no axis None."""
    return shape is not None and None not in shape


def numel(shape: Shape | None) -> int | None:
    """Number of elements of a static shape (None if unknown)."""
    return math.prod(shape) if is_static(shape) else None


def is_weak_scalar(node: Node) -> bool:
    """A Python-number constant (``2.0`` in ``x * 2.0``): it has no dtype of its own and
    takes its user's, as in NumPy; generated code writes it inline."""
    return node.is_constant and node.dtype is None and type(node.op.value) in (bool, int, float)


def interpret(outputs: Node | Iterable[Node], values: dict, xp) -> dict:
    """Compute every node the outputs depend on, op by op in topological order.

    ``values`` ({node: array}) holds what is known beforehand (fed variables, the inputs of
    a fused body, any node) and is filled in with the value of every node the outputs need
    (none above a known one); constants compute themselves.
    This is a graph's meaning in a few lines; the executor (a layer above)
    runs the same ops from a schedule compiled once that frees intermediates (and runs
    ``cond``, which this loop does not). ``xp`` is the array module (numpy or cupy).
    """
    outputs = node_list(outputs, "interpret")
    order, needed = topological_order(outputs), set(outputs)
    for node in reversed(order):  # not the nodes above known values (a fed intermediate)
        if node in needed and node not in values:
            needed.update(node.inputs)
    for node in order:
        if node in needed and node not in values:
            args = [values[i] for i in node.inputs]
            try:
                values[node] = node.op.compute(xp, *args)
            except COMPUTE_ERRORS as exc:
                raise compute_error(node, args, exc) from exc
    return values


#: What an op's compute may raise on bad values; runs turn each into :func:`compute_error`.
COMPUTE_ERRORS = (ValueError, TypeError, IndexError, ArithmeticError)
#: The course_lib error for each of them that is not one already (else ShapeError).
_ERROR_FOR = ((ArithmeticError, NumericError), (TypeError, GraphError))


def compute_error(node: Node, inputs: Sequence, exc: Exception) -> CourseLibError:
    """The error for ``node``'s op failing on the arrays ``inputs``: it names the op, the node
    and the input shapes, and keeps a :class:`CourseLibError`'s class; NumPy's and Python's
    errors become the course_lib error of their kind (an arithmetic error NumericError, a
    type error GraphError, else ShapeError: NumPy's value and index errors are mostly shapes
    that do not fit; course_lib's own range checks raise OutOfRangeError). A value error on
    shapes the op's rule accepts is about a parameter's value: ParameterError (``int ** -1``)."""
    shapes = [tuple(getattr(v, "shape", ())) for v in inputs]
    named = ", ".join(f"{i.name}: {s}" for i, s in zip(node.inputs, shapes))
    message = f"{node.op.label()} at node {node.name} failed on inputs ({named}): {exc}"
    if isinstance(exc, CourseLibError):
        return type(exc)(message)
    if isinstance(exc, ValueError) and shapes_fit(node.op, shapes):
        return ParameterError(message)
    return error_class(exc)(message)


def shapes_fit(op: Op, shapes: Sequence[Shape]) -> bool:
    """Whether ``op``'s shape rule gives an output shape for ``shapes``."""
    try:
        return op.infer_shape(*shapes) is not None
    except Exception:  # noqa: BLE001  (any failure: the shapes do not fit)
        return False


def error_class(exc: Exception) -> type:
    """The course_lib error for NumPy's or Python's ``exc`` in an op (see compute_error)."""
    return next((error for base, error in _ERROR_FOR if isinstance(exc, base)), ShapeError)
