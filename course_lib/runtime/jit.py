"""``jit``: trace eager-style code once into a static graph, then run the compiled graph.

The first call with new input shapes/dtypes (or new Python-constant arguments) *traces*:
the function runs on symbolic variables, producing a graph that is optimised and compiled
into an :class:`Executor`. Later calls that pass the same **guards** reuse it — that is the
warm-up cost of ``torch.compile`` in miniature. Axes marked dynamic are left unknown in the
graph and excluded from the guards, so one trace serves every size along them.

A JIT that re-traced on every new shape could spend all its time compiling, so the cache may
be capped (``max_traces``, ``torch.compile``'s recompile limit): once it is full, a call that
misses every guard falls back to eager, running ``fn`` on Tensors (define-by-run).

The guards see the arguments only. ``fn`` runs (as Python) once per trace, so what it reads
from a closure or a global is baked into the graph as it was then, and its side effects
(``print``, appending to a list) happen per trace, not per call: change such a value and
a later call still reuses the old trace — pass the value as an argument instead. A jitted
function called while another one traces (or runs eagerly) is inlined into it. Threads may
call one jitted function at once: a guard that several miss together is traced once.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from .. import backend, params
from ..errors import GraphError, ParameterError, ShapeError
from ..graph import Node, node_list, same_kind, value_key, variable
from .eager import Tensor
from .executor import Executor

# how many jitted functions this thread is inside (tracing, or running eagerly)
_inside = threading.local()


class JitFunction:
    """A traced-and-cached version of ``fn`` (see :func:`jit`)."""

    def __init__(
        self,
        fn: Callable,
        dynamic: Mapping[int, Sequence[int]] | None = None,
        optimize=True,
        max_traces: int | None = None,
    ):
        if not callable(fn):
            raise GraphError(f"jit: expected a function to compile, got a {type(fn).__name__}")
        # the name, doc and module of fn, but not its attributes: a JitFunction's own (cache,
        # stats, dynamic) would overwrite this one's
        functools.update_wrapper(self, fn, updated=())
        if not hasattr(self, "__name__"):  # a functools.partial, a callable object
            self.__name__ = type(fn).__name__
        self.fn = fn
        if not isinstance(dynamic, (Mapping, type(None))):
            raise GraphError(f"jit: dynamic must map argument indices to axes, got {dynamic!r}")
        self.dynamic = {
            params.count(k, "jit: dynamic argument index", 0): params.axes(v, "jit: dynamic axes")
            for k, v in (dynamic or {}).items()
        }
        self.optimize = params.flag(optimize, "jit: optimize")
        if max_traces is not None and params.integer(max_traces, "jit: max_traces") < 0:
            raise ParameterError(f"jit: max_traces must be at least 0 (or None), got {max_traces}")
        self.max_traces = max_traces
        self.cache: dict = {}
        self.stats = {"traces": 0, "hits": 0, "eager": 0, "trace_seconds": 0.0}
        self._tracing = threading.RLock()  # threads that miss together: one traces, once

    def __reduce__(self):
        """A copy or a pickle is a new jitted ``fn`` with these settings and no traces (a
        lock cannot be copied; each copy traces its own)."""
        return JitFunction, (self.fn, self.dynamic, self.optimize, self.max_traces)

    def __get__(self, instance, owner=None):
        """``@jit`` on a method: ``obj.f(x)`` calls the jitted ``f(obj, x)``. The instance is
        argument 0, a constant of the guards (each hashable instance its own traces, kept
        alive by the cache; what ``f`` reads from it is baked in as from a closure)."""
        return self if instance is None else functools.partial(self, instance)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise GraphError(
                f"jit({self.__name__}) takes its arguments by position (each is a traced "
                f"input or a constant of the guard), got keyword(s) {sorted(kwargs)}"
            )
        if getattr(_inside, "depth", 0):  # called by a jitted function: part of its trace
            return self.fn(*args)
        key, arrays = self._guard(args)
        entry = self.cache.get(key)
        if entry is None:
            entry = self._missed(key, args)
            if entry is None:
                return self._run_eagerly(args)
        else:
            self.stats["hits"] += 1
        executor, variables, single = entry
        # an argument the function ignores (or the optimiser removes) is a variable no
        # output uses
        result = executor.run(dict(zip(variables, arrays)), allow_unused=True)
        return result if single else tuple(result)

    def _missed(self, key: tuple, args):
        """The cache's entry for ``key``, traced now unless another thread traced it while
        this one waited (one trace per key, at most ``max_traces``, however many threads
        call at once); None when the cache is full (the call runs eagerly)."""
        with self._tracing:
            entry = self.cache.get(key)
            if entry is not None:
                self.stats["hits"] += 1
            elif self.max_traces is not None and len(self.cache) >= self.max_traces:
                self.stats["eager"] += 1
            else:
                entry = self.cache[key] = self._trace(args)
            return entry

    def _guard(self, args) -> tuple[tuple, list]:
        """The cache key (shapes, dtypes, constants) and the array arguments."""
        unknown = [i for i in self.dynamic if i >= len(args)]
        if unknown:
            raise ParameterError(
                f"jit({self.__name__}): dynamic names argument(s) {unknown}, but the call "
                f"passes {len(args)} argument(s)"
            )
        key, arrays = [], []
        for i, arg in enumerate(args):
            if isinstance(arg, Node) and not arg.is_eager:
                raise GraphError(f"jit({self.__name__}): argument {i} is a graph node; pass arrays")
            if isinstance(arg, Tensor) and arg.requires_grad:  # as np.asarray(arg) refuses it
                raise GraphError(
                    f"jit({self.__name__}): argument {i} ({arg.name}) requires grad, but the "
                    "compiled function returns arrays, so its gradients would stop; call the "
                    f"function itself to keep them, or pass {arg.name}.detach()"
                )
            array = _array(arg)
            if array is not None:
                key.append(("array", self._dims(i, array), str(array.dtype)))
                arrays.append(array)
            elif i in self.dynamic:
                raise GraphError(f"jit({self.__name__}): dynamic names axes of argument {i}, "
                                 f"a {type(arg).__name__}, not an array")  # fmt: skip
            else:
                try:
                    hash(arg)
                except TypeError:
                    raise GraphError(
                        f"jit({self.__name__}): argument {i} ({type(arg).__name__}) is neither an "
                        "array nor a hashable constant"
                    ) from None
                # by type and value (graph.value_key): (0.0,) and (-0.0,), (1,) and (1.0,)
                # each get their own trace, and nan finds its own again
                key.append(("constant", value_key(arg)))
        return tuple(key), arrays

    def _run_eagerly(self, args):
        """``fn`` on Tensors, each op computed as it is called: the fallback of a full cache.

        Floating-point arguments require grad, as every traced argument is a variable that
        ``cl.grad`` may differentiate by. The results are new arrays, as the compiled ones.
        """
        eager = []
        for arg in args:
            array = _array(arg)
            floating = array is not None and np.dtype(array.dtype).kind in "fc"
            eager.append(arg if array is None else Tensor(array, requires_grad=floating))
        with _running():
            out = self.fn(*eager)
        results = [
            node._data.copy() if node.is_eager else Executor(node).run()
            for node in self._outputs(out)
        ]
        return results[0] if isinstance(out, Node) else tuple(results)

    def _dims(self, i: int, array) -> tuple:
        """The shape argument ``i`` is traced with: its dynamic axes unknown (None)."""
        ndim = len(array.shape)
        axes = self.dynamic.get(i, ())
        if any(not -ndim <= a < ndim for a in axes):
            raise ShapeError(f"jit({self.__name__}): dynamic axes {list(axes)} of argument {i} "
                             f"do not fit its shape {tuple(array.shape)}")  # fmt: skip
        axes = {a % ndim for a in axes}
        return tuple(None if a in axes else d for a, d in enumerate(array.shape))

    def _outputs(self, out) -> list[Node]:
        if isinstance(out, (Mapping, Iterator)):  # a generator may never end
            raise GraphError(f"jit({self.__name__}) returned a {type(out).__name__}; return a "
                             "node or a tuple of nodes (tuple(d.values()), say)")  # fmt: skip
        return node_list(out, f"jit({self.__name__}) (what the function returns)")

    def _trace(self, args):
        start = time.perf_counter()
        symbolic, variables = [], []
        for i, arg in enumerate(args):
            array = _array(arg)
            if array is not None:
                var = variable(f"arg{i}", self._dims(i, array), array.dtype)
                symbolic.append(var)
                variables.append(var)
            else:
                symbolic.append(arg)
        try:
            with _running():
                out = self.fn(*symbolic)
        except GraphError as exc:
            raise GraphError(f"jit({self.__name__}) could not trace the function: {exc}") from None
        executor = Executor(same_kind(out, self._outputs(out)), optimize=self.optimize)
        self.stats["traces"] += 1
        self.stats["trace_seconds"] += time.perf_counter() - start
        return executor, variables, isinstance(out, Node)


def jit(
    fn: Callable | None = None,
    *,
    dynamic: Mapping[int, Sequence[int]] | None = None,
    optimize=True,
    max_traces: int | None = None,
):
    """Compile ``fn`` by tracing; use as ``@jit`` or ``@jit(dynamic={0: [0]})``.

    Parameters
    ----------
    dynamic : {argument index: [axes]}
        Axes whose size may change without a re-trace (e.g. the batch axis); a negative
        axis counts from the end. An index or axis that the call's arguments do not have
        is an error.
    optimize : bool, optional
        Apply the graph optimisation passes (:func:`course_lib.passes.optimize`: CSE,
        merged matmuls, accumulated products, constant folding, elementwise fusion) to each
        traced graph.
    max_traces : int, optional
        At most this many traced graphs (None: no limit). Once they are cached, a call that
        misses every guard runs ``fn`` eagerly on Tensors instead of tracing again.

    The function returns a node or a tuple of nodes (not a dict, nor a generator); an
    array argument it does not use is fine, a Tensor that requires grad is refused (its
    gradients would stop); on a method, ``self`` is argument 0 (a guarded constant). The
    jitted function returns NumPy (or CuPy) arrays (a 0-d result as :class:`Executor`
    gives it, often a NumPy scalar); ``.stats`` counts traces, cache hits,
    eager runs and the seconds spent tracing. Python ``if`` on a traced value raises a
    ``GraphError`` that points to :func:`course_lib.cond`. The guards see the arguments
    only: ``fn`` runs once per trace, so a value it reads from a closure or a global is
    baked in (changing it later does not re-trace; pass it as an argument), and its side
    effects (``print``) happen per trace, not per call.
    """
    if fn is None:
        return functools.partial(jit, dynamic=dynamic, optimize=optimize, max_traces=max_traces)
    return JitFunction(fn, dynamic, optimize, max_traces)


@contextlib.contextmanager
def _running():
    """Mark this thread as inside a jitted function (its nested jitted calls are inlined)."""
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        yield
    finally:
        _inside.depth -= 1


def _array(arg):
    """The array of an array argument (a Tensor's data), None for a Python constant."""
    if isinstance(arg, Tensor):
        return arg._data  # only read (an executor never writes its feeds): no copy on a device
    return arg if hasattr(arg, "shape") else None


def pad_to_bucket(
    array, axis: int = 0, buckets: Sequence[int] = (8, 16, 32, 64, 128, 256, 512, 1024)
):
    """Zero-pad ``array`` along ``axis`` to the smallest bucket size that fits.

    Returns the padded array and the original size. Padding to a few sizes bounds the
    number of traces of a jitted function whose input length varies.
    """
    axis = params.integer(axis, "pad_to_bucket: axis")
    array = backend.to_device(array, "pad_to_bucket: array")
    if not -array.ndim <= axis < array.ndim:
        raise ShapeError(f"pad_to_bucket: axis {axis} is out of range for shape {array.shape}")
    buckets = params.axes(buckets, "pad_to_bucket: buckets")
    if not buckets or min(buckets) < 1:
        raise ParameterError(f"pad_to_bucket: buckets must be positive sizes, got {buckets}")
    size = array.shape[axis]
    target = next((b for b in sorted(buckets) if b >= size), None)
    if target is None:
        raise ShapeError(
            f"pad_to_bucket: size {size} along axis {axis} exceeds the largest bucket "
            f"{max(buckets)}"
        )
    pad = [(0, 0)] * array.ndim
    pad[axis] = (0, target - size)
    return backend.xp().pad(array, pad), size
