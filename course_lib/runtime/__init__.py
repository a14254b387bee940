"""Running graphs: the define-then-run :class:`Executor` and the eager :class:`Tensor`."""

from .eager import Tensor, no_grad, zero_grad
from .executor import Executor, evaluate
from .jit import JitFunction, jit, pad_to_bucket

__all__ = [
    "Executor",
    "JitFunction",
    "Tensor",
    "evaluate",
    "jit",
    "no_grad",
    "pad_to_bucket",
    "zero_grad",
]
