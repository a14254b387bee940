"""Automatic differentiation: reverse mode (``grad``), forward mode (``jvp``), dual numbers."""

from .dual import Dual
from .forward import jvp, tangent_map
from .reverse import Step, Trace, grad, gradient_trace, saved_for_backward

__all__ = [
    "Dual",
    "Step",
    "Trace",
    "grad",
    "gradient_trace",
    "jvp",
    "saved_for_backward",
    "tangent_map",
]
