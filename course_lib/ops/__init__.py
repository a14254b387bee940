"""The op library, by family. Importing it hands its functions to Node's operators.

Every op keeps its forward rule, its gradient, its tangent rule and its cost together
in one class; the functions here are the public way to build nodes.
"""

from __future__ import annotations

from ..graph import register_ops
from .attention import causal_attention, causal_softmax, head_mix, head_mix_t, head_scores
from .broadcast import broadcast_to, sum_to
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
from .reductions import logsumexp, max, mean, sum
from .rope import rope
from .shape import (
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


register_ops({name: globals()[name] for name in __all__})  # x * y calls mul(x, y)
