"""Automatic differentiation: reverse mode (``grad``), forward mode (``jvp``), dual numbers."""

from .dual import Dual
from .forward import jvp, tangent_map
from .reverse import grad, gradient_trace, saved_for_backward
from .trace import Step, StepKind, Trace

__all__ = [
    "Dual",
    "Step",
    "StepKind",
    "Trace",
    "grad",
    "gradient_trace",
    "jvp",
    "saved_for_backward",
    "tangent_map",
]
