"""The op library, by family. Importing it installs the operators of :class:`Node`.

Every op keeps its forward rule, its gradient, its tangent rule and its cost together
in one class; the functions here are the public way to build nodes.
"""

from __future__ import annotations

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


def _install_operators(cls: type) -> None:
    """Give nodes Python's arithmetic operators, built from the ops above.

    ``__array_ufunc__ = None`` makes NumPy hand ``array * node`` and ``np.float64(2) * node``
    to the node's reflected operator (so the graph is kept) and refuse ``np.exp(node)`` with a
    TypeError, instead of silently building an object array or detaching the graph.
    """
    cls.__array_ufunc__ = None
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
    cls.__neg__ = lambda a: neg(a)
    cls.__pos__ = lambda a: a
    cls.__getitem__ = lambda a, index: getitem(a, index)
    cls.__lt__ = lambda a, b: less(a, b)
    cls.__le__ = lambda a, b: less_equal(a, b)
    cls.__gt__ = lambda a, b: greater(a, b)
    cls.__ge__ = lambda a, b: greater_equal(a, b)
    cls.T = property(lambda a: transpose(a))
    cls.sum = lambda a, axis=None, keepdims=False: sum(a, axis, keepdims)
    cls.mean = lambda a, axis=None, keepdims=False: mean(a, axis, keepdims)
    cls.reshape = lambda a, *shape: reshape(a, shape[0] if len(shape) == 1 else shape)


_install_operators(Node)
