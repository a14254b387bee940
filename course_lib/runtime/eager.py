"""Define-by-run: an eager ``Tensor`` that computes each op the moment it is called.

A Tensor *is* a graph node (so every op of the library works on it) that also holds
its value. Operations on tensors that require gradients record their inputs;
``backward()`` runs the same ``gradient(out)`` algorithm as :func:`course_lib.grad`,
and because every input is eager, each partial adjoint is computed as it is built.

``.grad`` accumulates across ``backward()`` calls, as in PyTorch: call
``zero_grad()`` between steps.
"""

from __future__ import annotations

import contextlib
import gc
import math
import threading
from collections.abc import Iterable

import numpy as np

from .. import backend, params
from ..autodiff import reverse
from ..errors import (
    CourseLibError,
    DeviceError,
    GraphError,
    NumericError,
    ParameterError,
    ShapeError,
    describe_shapes,
)
from ..graph import (
    COMPUTE_ERRORS,
    Node,
    Op,
    as_node,
    error_class,
    interpret,
    set_eager_hook,
    shapes_fit,
    topological_order,
)
from ..ops.elementwise import Add, Div, Mul, Sub, equal, ones_like, zeros_like


class _Recording(threading.local):
    """Per thread (as in PyTorch): whether eager ops record, innermost block last. A
    ``no_grad`` block in one thread leaves the tensors another thread computes recording."""

    def __init__(self):
        self.stack = [True]


_recording = _Recording()
_accumulating = threading.Lock()  # backward passes of several threads adding into one .grad
_pause = {"depth": 0, "was_enabled": False}  # the backward passes under way, in every thread
_pausing = threading.Lock()


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Pause Python's cycle collector (reference counting still frees memory).

    A backward pass allocates tens of thousands of short-lived, acyclic tensors; each
    burst would make the collector re-scan the whole heap (every imported module, which
    with PyTorch loaded is most of the time spent) while finding nothing to collect.
    The collector is one per process: the first pass to begin pauses it, the last to end
    (in whichever thread) enables it again if it was enabled.
    """
    with _pausing:
        if not _pause["depth"]:
            _pause["was_enabled"] = gc.isenabled()
            gc.disable()
        _pause["depth"] += 1
    try:
        yield
    finally:
        with _pausing:
            _pause["depth"] -= 1
            if not _pause["depth"] and _pause["was_enabled"]:
                gc.enable()


@contextlib.contextmanager
def _recording_set(on: bool):
    """Inside this block, this thread's eager ops record (``on``) or do not."""
    stack = _recording.stack
    stack.append(on)
    try:
        yield
    finally:
        stack.pop()


def no_grad():
    """Inside this block, eager ops do not record the graph (no gradients flow); other
    threads' ops still do."""
    return _recording_set(False)


class Leaf(Op):
    """The op of a tensor created from data (it has no inputs)."""

    name = "tensor"


_LEAF = Leaf()


def _operators(op: Op):
    """Python's pair of operators for ``op`` (``t + other`` and ``other + t`` for Add): the
    op Node's operators build, applied at once, without the dispatch through course_lib.ops."""

    def operator(self, other):
        return self.apply_eager(op, (self, as_node(other)), None)

    def reflected(self, other):
        return self.apply_eager(op, (as_node(other), self), None)

    return operator, reflected


class Tensor(Node):
    """An eager array that remembers how it was computed.

    A tensor's value never changes: ``.data`` is read-only (on the CPU), so no later write
    can change what ``backward()`` computes; ``.numpy()`` gives a writable copy. A tensor
    lives on the device current when it was made (``.device``); an op on a tensor of
    another device is a :class:`DeviceError`. A copy (``copy.copy``, ``copy.deepcopy``,
    ``pickle``) is a new leaf tensor with the same value, ``requires_grad`` and name.

    Parameters
    ----------
    array : array-like
        The value, always copied (to the current device's array type): changing ``array``
        later changes neither this tensor nor its gradients.
    requires_grad : bool
        Whether ``backward()`` should compute ``.grad`` for this tensor.
    name : str, optional
        A label used in graphs and error messages.
    """

    __slots__ = ("_data", "device", "requires_grad", "grad")
    is_eager = True

    def __init__(self, array, requires_grad: bool = False, name: str | None = None):
        name = params.name(name, "Tensor")
        xp = backend.xp()
        value = array._data if isinstance(array, Tensor) else array
        try:
            data = xp.array(backend.to_device(value, "the data of a Tensor"), copy=True)
        except CourseLibError:
            raise
        except ValueError as exc:  # a ragged list: [[1, 2], [3]]
            raise ShapeError(f"Tensor: the value is not an array of one shape: {exc}") from None
        params.numeric_array(data, "Tensor")
        requires_grad = _requires_grad(requires_grad, data.dtype)
        self._init(_LEAF, (), name or "tensor", data, requires_grad, backend.get_device())

    def _init(self, op, inputs, name, data, requires_grad, device):
        Node.__init__(self, op, inputs, name, data.shape, data.dtype)
        setter = object.__setattr__
        setter(self, "_data", data)
        setter(self, "device", device)  # the device data lives on
        setter(self, "requires_grad", requires_grad)
        setter(self, "grad", None)

    @property
    def data(self):
        """The value, read-only (a view on the CPU; on a device, whose arrays cannot be
        read-only, a copy): no write can change what ``backward()`` computes from it;
        ``.numpy()`` gives a writable copy on the host."""
        if not isinstance(self._data, np.ndarray):
            return self._data.copy()
        # a view that cannot be made writable again (flags.writeable = True is refused)
        return np.lib.stride_tricks.as_strided(self._data, writeable=False)

    def __setattr__(self, key, value):
        """Only ``requires_grad`` (True or False; floating-point leaf tensors only) and
        ``grad`` (None or a tensor of this shape) may change."""
        if key == "requires_grad":
            value = _requires_grad(value, self.dtype)
            if self.inputs and value != self.requires_grad:  # gradients would still flow
                raise GraphError(
                    f"requires_grad of {self.name} cannot change: it was computed from tensors "
                    f"that require grad; use {self.name}.detach() for its value cut from the graph"
                )
        elif key == "grad":
            if value is not None and (not isinstance(value, Tensor) or value.shape != self.shape
                                      or value.dtype != self.dtype):  # fmt: skip
                got = (f"{value.dtype} of shape {value.shape}" if isinstance(value, Tensor)
                       else type(value).__name__)  # fmt: skip
                raise GraphError(f"{self.name}.grad must be None or a Tensor of shape "
                                 f"{self.shape} and dtype {self.dtype}, got {got}")  # fmt: skip
            if value is not None and value.device != self.device:  # backward would add to it
                raise DeviceError(f"{self.name}.grad must be on its {self.device!r} device, but "
                                  f"the tensor given is on {value.device!r}")  # fmt: skip
        else:
            Node.__setattr__(self, key, value)
        object.__setattr__(self, key, value)

    # -- copies and pickles: a new leaf with the value (nodes themselves are shared) ------
    def __reduce__(self):
        return Tensor, (self.numpy(), self.requires_grad, self.name)

    def __copy__(self):  # on this tensor's device, which may no longer be the current one
        copy = Tensor.__new__(Tensor)
        copy._init(_LEAF, (), self.name, self._data.copy(), self.requires_grad, self.device)
        return copy

    def __deepcopy__(self, memo):
        return self.__copy__()

    @classmethod
    def apply_eager(cls, op: Op, inputs: tuple, name: str | None):
        """Run ``op`` on the inputs' values now; record the inputs if gradients may flow."""
        xp, device = backend.xp(), backend.get_device()
        for n in inputs:
            if n.is_eager and n.device != device:
                raise _foreign(op, n, device)
        values = [n._data if n.is_eager else _value(n, op, xp) for n in inputs]
        try:
            data = op.compute(xp, *values)
        except COMPUTE_ERRORS as exc:
            raise _eager_error(op, inputs, exc) from exc
        if not hasattr(data, "dtype"):
            data = xp.asarray(data)
        out = cls.__new__(cls)
        # no gradient flows through ints or bools
        if _recording.stack[-1] and data.dtype.kind == "f":
            for n in inputs:
                if n.is_eager and n.requires_grad:
                    out._init(op, inputs, name or op.name, data, True, device)
                    return out
        out._init(_LEAF, (), name or op.name, data, False, device)
        return out

    # -- arithmetic fast paths (the same ops as Node's operators, minus the dispatch) -----
    __add__, __radd__ = _operators(Add())
    __sub__, __rsub__ = _operators(Sub())
    __mul__, __rmul__ = _operators(Mul())
    __truediv__, __rtruediv__ = _operators(Div())

    # -- gradients -------------------------------------------------------------------------
    def backward(self, gradient=None, create_graph: bool = False) -> None:
        """Accumulate d self / d leaf into ``leaf.grad`` for every leaf that requires grad.

        ``gradient`` is the seed, needed unless ``self`` holds one number (then it is 1:
        d self/d self). With ``create_graph=True`` the gradients are differentiable tensors
        (inside ``no_grad`` too), functions of the seed as well when it is a tensor that
        requires grad; without it the seed is detached and the sums into ``.grad`` are not
        recorded, so no gradient keeps a graph alive.
        """
        if not self.requires_grad:
            why = "no tensor it was computed from does, or it was computed under no_grad"
            if np.dtype(self.dtype).kind != "f":
                why = f"it is {self.dtype} (no gradient flows through ints or bools)"
            raise GraphError(f"{self.name} does not require grad: {why}")
        if gradient is None and math.prod(self.shape) != 1:
            raise GraphError(
                f"backward: {self.name} has shape {self.shape}, and a gradient can be implied "
                "only for one number; reduce it first (cl.sum(...).backward()) or pass "
                "backward(gradient=array of its shape)"
            )
        order = topological_order([self])
        leaves = [n for n in order if not n.inputs and n.is_eager and n.requires_grad]
        seed = gradient if gradient is None or isinstance(gradient, Tensor) else Tensor(gradient)
        create_graph = params.flag(create_graph, "backward: create_graph")
        if seed is not None and seed.requires_grad and not create_graph:
            seed = seed.detach()  # else a gradient passing the seed on would keep its graph
        if seed is not None and seed.shape != self.shape:
            raise ShapeError(
                f"backward: the gradient seed has shape {seed.shape}, but {self.name} has "
                f"shape {self.shape}; pass an array of the output's shape"
            )
        # the sums into .grad too are recorded exactly when create_graph (inside no_grad too)
        with _recording_set(create_graph), _cyclic_gc_paused():
            seed = ones_like(self) if seed is None else seed
            adjoints = reverse.gradient(self, leaves, seed, order)
            grads = [adjoints[leaf] if leaf in adjoints else zeros_like(leaf) for leaf in leaves]
            with _accumulating:  # another thread's backward may add into the same leaves
                for leaf, g in zip(leaves, grads):
                    leaf.grad = g if leaf.grad is None else leaf.grad + g

    def zero_grad(self) -> None:
        """Forget the accumulated gradient."""
        self.grad = None

    def detach(self) -> Tensor:
        """The same value, cut from the graph, on this tensor's device (as ``copy.copy``; the
        value never changes, so the two share it)."""
        detached = Tensor.__new__(Tensor)
        detached._init(_LEAF, (), "tensor", self._data, False, self.device)
        return detached

    # -- conversions -----------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The value as a new, writable NumPy array (changing it leaves the tensor alone)."""
        return np.array(backend.to_numpy(self._data), copy=True)

    def item(self) -> float:
        return self._number(lambda data: data.item(), ".item()")

    def __float__(self) -> float:
        return self._number(float, "float()")

    def __int__(self) -> int:
        return self._number(int, "int()")

    def _number(self, convert, what: str):
        """``convert(value)`` of a tensor of one number (of any shape: ``(1,)`` too, as
        ``.item()``), or the refusal as a course_lib error of its kind naming this tensor and
        its shape (``int`` of nan: ParameterError, of inf: NumericError)."""
        data = self._data
        try:
            return convert(data.reshape(()) if data.size == 1 else data)
        except OverflowError as exc:  # int(inf)
            raise NumericError(f"{what} of tensor {self.name}: {exc}") from None
        except (TypeError, ValueError) as exc:
            if data.size == 1 and isinstance(exc, ValueError):  # int(nan)
                raise ParameterError(f"{what} of tensor {self.name}: {exc}") from None
            kind = GraphError if isinstance(exc, TypeError) else ShapeError
            raise kind(
                f"{what} of tensor {self.name} needs one number, but it has shape {self.shape} "
                f"({exc}); reduce it first (cl.sum(...)) or index one element"
            ) from None

    def __index__(self) -> int:
        """An integer 0-d tensor as a Python int (``range(t)``, ``x[t]``)."""
        if self.ndim != 0 or np.dtype(self.dtype).kind not in "iu":
            raise GraphError(f"only an integer tensor of shape () is an index, not {self.name} "
                             f"({self.dtype}, shape {self.shape}); use int(...)")  # fmt: skip
        return int(self._data)

    def __bool__(self) -> bool:
        return self._number(bool, "bool()")

    def __contains__(self, value) -> bool:
        """``value in t``: whether an element equals ``value``, as in NumPy and PyTorch (a
        tensor's ``==`` is identity, which would make it False for every number)."""
        return bool(equal(self, value)._data.any())

    def __len__(self) -> int:
        if not self.shape:
            raise GraphError(f"len() of tensor {self.name}: a tensor of shape () has no length")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad:  # PyTorch refuses too: the array would silently leave the graph
            raise GraphError(
                f"this tensor ({self.name}) requires grad, so NumPy cannot use it (np.asarray, "
                "np.exp, ...) without detaching it from the graph; use course_lib's ops "
                f"(cl.exp) to keep gradients, or {self.name}.detach().numpy() for the values"
            )
        # a writable copy, as .numpy(); copy=False gets a read-only view of the value
        array = backend.to_numpy(self._data)
        if copy is not False:
            return np.array(array, dtype=dtype, copy=True)
        view = np.array(array, dtype=dtype, copy=False)  # NumPy's error if it must copy
        return np.lib.stride_tricks.as_strided(view, writeable=False)  # for good

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"``: a tensor of shape () formats as its number, as in PyTorch and
        NumPy (without a format spec, as its repr)."""
        if spec and self.ndim == 0:
            return format(self._data.item(), spec)
        return super().__format__(spec)

    def __repr__(self) -> str:
        """The values (rows aligned), then as NumPy's repr the ``shape`` of an empty tensor
        and a ``dtype`` other than float64, int64 and bool, and ``requires_grad=True``."""
        value = self.numpy()
        parts = [np.array2string(value, precision=4, prefix="Tensor(")]
        if value.size == 0 and value.shape != (0,):
            parts.append(f"shape={value.shape}")
        if value.dtype not in (np.float64, np.int64, np.bool_):
            parts.append(f"dtype={value.dtype}")
        if self.requires_grad:
            parts.append("requires_grad=True")
        return f"Tensor({', '.join(parts)})"


set_eager_hook(Tensor.apply_eager)  # graph.apply runs an op on a Tensor input through this


def _value(node: Node, op: Op, xp):
    """A symbolic input's value: a constant's, or a graph of constants computed now (a
    gradient rule transposes the NumPy array of ``t @ array``); a graph with variables is
    refused."""
    if node.is_constant:
        return node.op.on(xp)
    if any(n.is_variable for n in topological_order([node])):
        raise GraphError(
            f"{op.label()}: cannot mix the eager tensor(s) with the symbolic node "
            f"{node.name}; use Tensors only, or variables and an Executor"
        )
    return interpret(node, {}, xp)[node]


def _requires_grad(value, dtype) -> bool:
    """``requires_grad`` checked: True or False, and True for floating-point tensors only."""
    value = params.flag(value, "Tensor: requires_grad")
    if value and np.dtype(dtype).kind not in "fc":
        raise GraphError(f"only floating-point tensors can require gradients, not {dtype}")
    return value


def _foreign(op: Op, tensor: Tensor, device: str) -> DeviceError:
    """The error for ``tensor``, made on another device, reaching ``op``."""
    return DeviceError(
        f"{op.label()}: tensor {tensor.name} is on the {tensor.device!r} device, but "
        f"course_lib runs on {device!r}; make it again after set_device "
        f"(Tensor(t.numpy())), or go back with set_device({tensor.device!r})"
    )


def _eager_error(op: Op, inputs: tuple, exc: Exception) -> CourseLibError:
    if isinstance(exc, CourseLibError):  # already says what is wrong: keep its class
        return type(exc)(f"{op.label()}: {exc}")
    kind = error_class(exc)  # as the executor says it: the numbers, the types, the shapes
    if isinstance(exc, ValueError) and shapes_fit(op, [i.shape for i in inputs]):
        kind = ParameterError  # a value the op cannot take on shapes it takes (int ** -1)
    if kind is not ShapeError:
        return kind(f"{op.label()} on ({describe_shapes(inputs)}): {exc}")
    try:
        op.infer_shape(*(i.shape for i in inputs))
    except (ValueError, IndexError, TypeError) as inferred:
        exc = inferred
    return ShapeError(f"{op.label()}: inputs do not fit ({describe_shapes(inputs)}): {exc}")


def zero_grad(tensors: Iterable[Tensor]) -> None:
    """Clear ``.grad`` of every tensor given."""
    for t in tensors:
        t.grad = None
