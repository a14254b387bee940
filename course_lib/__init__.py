"""course_lib: a small, real engine for learning how deep-learning systems work.

Build graphs with :func:`variable`, :func:`constant` and the ops; differentiate with
:func:`grad` (reverse mode, the lecture's ``gradient(out)``) or :func:`jvp` (forward
mode); run them with :class:`Executor` or :func:`evaluate`; or compute eagerly with
:class:`Tensor`.
"""

from . import backend, errors, gradcheck, passes, perf, strides
from .autodiff import (
    Dual,
    Step,
    StepKind,
    Trace,
    grad,
    gradient_trace,
    jvp,
    saved_for_backward,
)
from .backend import describe_device, get_device, set_device, to_device, to_numpy, use_device
from .errors import (
    CourseLibError,
    DeviceError,
    FeedError,
    GraphError,
    NumericError,
    OutOfRangeError,
    ParameterError,
    ShapeError,
)
from .graph import Node, Op, constant, formula, topological_order, tree_size, variable
from .jacobians import JacobianResult, jacobian, sharpness
from .ops import *  # noqa: F403  (the op library is the public API)
from .ops import __all__ as _ops_all
from .runtime import Executor, JitFunction, Tensor, evaluate, jit, no_grad, pad_to_bucket, zero_grad

__version__ = "0.1.0"

__all__ = [
    "CourseLibError",
    "DeviceError",
    "Dual",
    "Executor",
    "FeedError",
    "GraphError",
    "NumericError",
    "OutOfRangeError",
    "ParameterError",
    "JacobianResult",
    "JitFunction",
    "Node",
    "Op",
    "ShapeError",
    "Step",
    "StepKind",
    "Tensor",
    "Trace",
    "backend",
    "constant",
    "describe_device",
    "errors",
    "evaluate",
    "formula",
    "get_device",
    "grad",
    "gradcheck",
    "gradient_trace",
    "jacobian",
    "jit",
    "jvp",
    "passes",
    "perf",
    "no_grad",
    "pad_to_bucket",
    "saved_for_backward",
    "set_device",
    "sharpness",
    "strides",
    "to_device",
    "to_numpy",
    "topological_order",
    "tree_size",
    "use_device",
    "variable",
    "zero_grad",
    *_ops_all,
]
