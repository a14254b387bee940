"""Running graphs: the define-then-run :class:`Executor` and the eager :class:`Tensor`."""

from .eager import Tensor, no_grad, zero_grad
from .executor import Executor, evaluate

__all__ = ["Executor", "Tensor", "evaluate", "no_grad", "zero_grad"]
