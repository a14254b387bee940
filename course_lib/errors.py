"""The error hierarchy of course_lib.

Every error subclasses both :class:`CourseLibError` and the matching built-in
exception, so ``except ValueError`` keeps working for code that does not know us.
Messages name the op, the nodes and the shapes involved, and say what to do.
"""

from __future__ import annotations


class CourseLibError(Exception):
    """Base class of every error raised by course_lib."""


class ShapeError(CourseLibError, ValueError):
    """Shapes that do not fit an op (raised when the graph is built, or fed)."""


class FeedError(CourseLibError, KeyError):
    """A missing, extra or malformed value fed to an executor."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else ""


class ParameterError(CourseLibError, ValueError):
    """A parameter of an op or a calculator with the right type but an invalid value."""


class OutOfRangeError(CourseLibError, IndexError):
    """An integer id (a row of ``take``, a class of ``cross_entropy``) outside its range."""


class GraphError(CourseLibError, TypeError):
    """A graph that cannot be built or evaluated as asked (wrong node types, mixing modes)."""


class NumericError(CourseLibError, ArithmeticError):
    """Numbers an op could not compute: a Python division by zero or float overflow (on
    weakly typed constants), or NumPy's floating-point errors under ``np.errstate(...="raise")``."""


class DeviceError(CourseLibError, RuntimeError):
    """A device (CPU/GPU) that is unavailable or was asked for wrongly."""


def describe_shapes(nodes) -> str:
    """Format ``name: shape`` for each node, for error messages."""
    parts = []
    for node in nodes:
        shape = getattr(node, "shape", None)
        parts.append(f"{getattr(node, 'name', node)!s}: {'unknown' if shape is None else shape}")
    return ", ".join(parts)
