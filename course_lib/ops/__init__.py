"""The op library, by family. Importing it installs the operators of :class:`Node`.

Every op keeps its forward rule, its gradient, its tangent rule and its cost together
in one class; the functions here are the public way to build nodes.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..graph import Node
from .attention import causal_attention, causal_softmax, head_mix, head_mix_t, head_scores
from .control import cond, merge, switch
from .elementwise import (
    add,
    cast,
    cos,
    div,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    maximum,
    mul,
    neg,
    ones_like,
    power,
    relu,
    rsqrt,
    sigmoid,
    silu,
    sin,
    sqrt,
    sub,
    sum_n,
    tanh,
    where,
    zeros_like,
)
from .linalg import matmul
from .nn import cross_entropy, log_softmax, softmax
from .norms import layer_norm, rms_norm
from .reductions import logsumexp, max, mean, sum, sum_to
from .rope import rope
from .shape import (
    broadcast_to,
    concat,
    getitem,
    matrix_transpose,
    permute,
    reshape,
    split,
    take,
    transpose,
)

__all__ = [
    "add", "broadcast_to", "cast", "causal_attention", "causal_softmax", "concat", "cond", "cos",
    "cross_entropy", "div", "equal", "exp", "getitem", "greater", "greater_equal",
    "head_mix", "head_mix_t", "head_scores", "layer_norm", "less", "less_equal", "log",
    "log_softmax", "logsumexp", "matmul", "matrix_transpose", "max", "maximum", "mean", "merge",
    "mul", "neg", "ones_like", "permute", "power", "relu", "reshape", "rms_norm", "rope", "rsqrt",
    "sigmoid", "silu", "sin", "softmax", "split", "sqrt", "sub", "sum", "sum_n", "sum_to",
    "switch", "take", "tanh", "transpose", "where", "zeros_like",
]  # fmt: skip


# The ufuncs NumPy calls for Python's operators when an array or a NumPy scalar is on the left
# (``np.float64(2) * x`` is ``np.multiply(2, x)``): NumPy hands them to the node, which builds
# the op, so the graph is kept.
_OPERATOR_UFUNCS = {
    np.add: add, np.subtract: sub, np.multiply: mul, np.true_divide: div, np.matmul: matmul,
    np.power: power, np.less: less, np.less_equal: less_equal, np.greater: greater,
    np.greater_equal: greater_equal,
}  # fmt: skip


def _array_ufunc(node: Node, ufunc, method: str, *inputs, **kwargs):
    """NumPy on nodes: operators build graph ops; any other ufunc is refused.

    ``np.exp(x)`` would take the values out of the graph (a symbolic node has none yet, and a
    tensor's gradients would silently stop), so it raises and points to ``cl.exp``.
    """
    if method == "__call__" and not kwargs:
        if ufunc in _OPERATOR_UFUNCS:
            return _OPERATOR_UFUNCS[ufunc](*inputs)
        if ufunc in (np.equal, np.not_equal):  # ``==`` on nodes is identity, as without NumPy
            return ufunc is np.not_equal
    call = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    ours = f"cl.{ufunc.__name__}" if ufunc.__name__ in __all__ else "course_lib's ops"
    raise GraphError(
        f"{call} cannot compute on node {node.name}: NumPy would take its values out of the "
        f"graph (a symbolic node has none yet, a tensor's gradients would stop); use {ours}, "
        "or the values (.numpy() of a tensor, Executor.run of a node)"
    )


def _iterate(node: Node):
    """``for row in x``: the rows ``x[0], x[1], ...`` along the first axis."""
    if not node.shape or node.shape[0] is None:
        raise GraphError(
            f"cannot iterate over node {node.name} of shape {node.shape}: iteration needs a "
            "first axis of known size"
        )
    return (getitem(node, i) for i in range(node.shape[0]))


def _reduction_method(reduce):
    """``x.sum(axis, keepdims)``; ``np.sum(x)`` calls it too, passing NumPy's dtype and out."""

    def method(node, axis=None, keepdims=False, dtype=None, out=None):
        if dtype is not None or out is not None:
            raise GraphError(
                f"{reduce.__name__} of node {node.name}: NumPy's dtype= and out= are not "
                f"supported; use cl.{reduce.__name__}(x, axis, keepdims) (and cl.cast for a dtype)"
            )
        return reduce(node, axis, keepdims)

    return method


def _install_operators(cls: type) -> None:
    """Give nodes Python's arithmetic operators, built from the ops above.

    NumPy defers to them (see :func:`_array_ufunc`): ``array * node`` and
    ``np.float64(2) * node`` build graph ops instead of an object array or a detached value,
    and ``np.exp(node)`` is refused with a GraphError (a TypeError) pointing to ``cl.exp``.
    """
    cls.__array_ufunc__ = _array_ufunc
    cls.__add__ = lambda a, b: add(a, b)
    cls.__radd__ = lambda a, b: add(b, a)
    cls.__sub__ = lambda a, b: sub(a, b)
    cls.__rsub__ = lambda a, b: sub(b, a)
    cls.__mul__ = lambda a, b: mul(a, b)
    cls.__rmul__ = lambda a, b: mul(b, a)
    cls.__truediv__ = lambda a, b: div(a, b)
    cls.__rtruediv__ = lambda a, b: div(b, a)
    cls.__matmul__ = lambda a, b: matmul(a, b)
    cls.__rmatmul__ = lambda a, b: matmul(b, a)
    cls.__pow__ = lambda a, p: power(a, p)
    cls.__rpow__ = lambda a, base: power(base, a)  # refused with a clear message: node exponent
    cls.__neg__ = lambda a: neg(a)
    cls.__pos__ = lambda a: a
    cls.__getitem__ = lambda a, index: getitem(a, index)
    cls.__iter__ = _iterate
    cls.__lt__ = lambda a, b: less(a, b)
    cls.__le__ = lambda a, b: less_equal(a, b)
    cls.__gt__ = lambda a, b: greater(a, b)
    cls.__ge__ = lambda a, b: greater_equal(a, b)
    cls.T = property(lambda a: transpose(a))
    cls.sum = _reduction_method(sum)
    cls.mean = _reduction_method(mean)
    cls.reshape = lambda a, *shape: reshape(a, shape[0] if len(shape) == 1 else shape)


_install_operators(Node)
