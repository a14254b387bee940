"""``jit``: trace eager-style code once into a static graph, then run the compiled graph.

The first call with new input shapes/dtypes (or new Python-constant arguments) *traces*:
the function runs on symbolic variables, producing a graph that is optimised and compiled
into an :class:`Executor`. Later calls that pass the same **guards** reuse it — that is the
warm-up cost of ``torch.compile`` in miniature. Axes marked dynamic are left unknown in the
graph and excluded from the guards, so one trace serves every size along them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .. import backend, params
from ..errors import GraphError, ParameterError, ShapeError
from ..graph import Node, node_list, same_kind, variable
from .eager import Tensor
from .executor import Executor


class JitFunction:
    """A traced-and-cached version of ``fn`` (see :func:`jit`)."""

    def __init__(
        self, fn: Callable, dynamic: Mapping[int, Sequence[int]] | None = None, optimize=True
    ):
        self.fn = fn
        if not isinstance(dynamic, (Mapping, type(None))):
            raise GraphError(f"jit: dynamic must map argument indices to axes, got {dynamic!r}")
        self.dynamic = {
            params.integer(k, "jit: dynamic argument index"): params.axes(v, "jit: dynamic axes")
            for k, v in (dynamic or {}).items()
        }
        self.optimize = params.flag(optimize, "jit: optimize")
        self.cache: dict = {}
        self.stats = {"traces": 0, "hits": 0, "trace_seconds": 0.0}
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        key, arrays = self._guard(args)
        entry = self.cache.get(key)
        if entry is None:
            entry = self.cache[key] = self._trace(args)
        else:
            self.stats["hits"] += 1
        executor, variables, single = entry
        result = executor.run(dict(zip(variables, arrays)))
        return result if single else tuple(result)

    def _guard(self, args) -> tuple[tuple, list]:
        """The cache key (shapes, dtypes, constants) and the array arguments."""
        key, arrays = [], []
        for i, arg in enumerate(args):
            if isinstance(arg, Node) and not arg.is_eager:
                raise GraphError(f"jit({self.__name__}): argument {i} is a graph node; pass arrays")
            if isinstance(arg, Tensor) or hasattr(arg, "shape"):
                array = arg.data if isinstance(arg, Tensor) else arg
                dims = tuple(
                    None if a in self.dynamic.get(i, ()) else d for a, d in enumerate(array.shape)
                )
                key.append(("array", dims, str(array.dtype)))
                arrays.append(array)
            else:
                try:
                    hash(arg)
                except TypeError:
                    raise GraphError(
                        f"jit({self.__name__}): argument {i} ({type(arg).__name__}) is neither an "
                        "array nor a hashable constant"
                    ) from None
                # floats by repr: -0.0 == 0.0 would reuse the other's trace, and nan != nan
                # would trace again on every call
                value = repr(arg) if isinstance(arg, float) else arg
                key.append(("constant", type(arg).__name__, value))
        return tuple(key), arrays

    def _trace(self, args):
        start = time.perf_counter()
        symbolic, variables = [], []
        for i, arg in enumerate(args):
            if isinstance(arg, Tensor) or hasattr(arg, "shape"):
                array = arg.data if isinstance(arg, Tensor) else arg
                dims = tuple(
                    None if a in self.dynamic.get(i, ()) else d for a, d in enumerate(array.shape)
                )
                var = variable(f"arg{i}", dims, array.dtype)
                symbolic.append(var)
                variables.append(var)
            else:
                symbolic.append(arg)
        try:
            out = self.fn(*symbolic)
        except GraphError as exc:
            raise GraphError(f"jit({self.__name__}) could not trace the function: {exc}") from None
        outputs = node_list(out, f"jit({self.__name__}) (what the function returns)")
        executor = Executor(same_kind(out, outputs), optimize=self.optimize)
        self.stats["traces"] += 1
        self.stats["trace_seconds"] += time.perf_counter() - start
        return executor, variables, isinstance(out, Node)


def jit(
    fn: Callable | None = None, *, dynamic: Mapping[int, Sequence[int]] | None = None, optimize=True
):
    """Compile ``fn`` by tracing; use as ``@jit`` or ``@jit(dynamic={0: [0]})``.

    Parameters
    ----------
    dynamic : {argument index: [axes]}
        Axes whose size may change without a re-trace (e.g. the batch axis).
    optimize : bool, optional
        Apply the graph optimisation passes (:func:`course_lib.passes.optimize`: constant
        folding, CSE, merged matmuls, elementwise fusion) to each traced graph.

    The jitted function returns NumPy (or CuPy) arrays; ``.stats`` counts traces, cache hits
    and the seconds spent tracing. Python ``if`` on a traced value raises a ``GraphError``
    that points to :func:`course_lib.cond`.
    """
    if fn is None:
        return functools.partial(jit, dynamic=dynamic, optimize=optimize)
    return JitFunction(fn, dynamic, optimize)


def pad_to_bucket(
    array, axis: int = 0, buckets: Sequence[int] = (8, 16, 32, 64, 128, 256, 512, 1024)
):
    """Zero-pad ``array`` along ``axis`` to the smallest bucket size that fits.

    Returns the padded array and the original size. Padding to a few sizes bounds the
    number of traces of a jitted function whose input length varies.
    """
    axis = params.integer(axis, "pad_to_bucket: axis")
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
    xp = backend.xp()
    return (xp.pad(array, pad) if xp is not np else np.pad(array, pad)), size
