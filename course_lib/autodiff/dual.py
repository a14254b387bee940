"""Dual numbers a + b·ε with ε² = 0: forward mode for scalars, by hand.

``Dual(x, 1.0)`` carries the value x and the tangent ẋ = 1; every operation applies
the chain rule to the tangent, so ``f(Dual(x, 1)).dot == f'(x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import params
from ..errors import GraphError


@dataclass(frozen=True)
class Dual:
    """A value ``val`` with its tangent ``dot`` (v and v̇ in the lecture's notation).

    Both are Python floats: a number computed on a device (a 0-d CuPy array, say) comes to
    the host when the Dual is made, so the arithmetic and the repr are plain Python. Text,
    complex numbers and arrays of several numbers are refused (``Dual(1.0) + "2"`` is an
    error, not Dual(3.0, 0.0))."""

    val: float
    dot: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "val", _real(self.val, "val"))
        object.__setattr__(self, "dot", _real(self.dot, "dot"))

    @staticmethod
    def lift(x) -> Dual:
        return x if isinstance(x, Dual) else Dual(x, 0.0)

    def __add__(self, other):
        o = Dual.lift(other)
        return Dual(self.val + o.val, self.dot + o.dot)

    __radd__ = __add__

    def __sub__(self, other):
        o = Dual.lift(other)
        return Dual(self.val - o.val, self.dot - o.dot)

    def __rsub__(self, other):
        return Dual.lift(other) - self

    def __mul__(self, other):
        o = Dual.lift(other)
        return Dual(self.val * o.val, self.dot * o.val + self.val * o.dot)

    __rmul__ = __mul__

    def __truediv__(self, other):
        """``u / w``, its tangent ``(u̇ − (u/w)·ẇ) / w`` as the graph's rule (1/0 is inf)."""
        o = Dual.lift(other)
        with np.errstate(all="ignore"):
            q = np.float64(self.val) / o.val
            return Dual(q, (self.dot - q * o.dot) / np.float64(o.val))

    def __rtruediv__(self, other):
        return Dual.lift(other) / self

    def __neg__(self):
        return Dual(-self.val, -self.dot)

    def __pow__(self, p: float):
        """``u ** p`` for a number p, in IEEE arithmetic as pow in a graph: √0 has the slope
        +inf, (-8) ** (1/3) is NaN, 1e200 ** 2 is inf (plain Python floats would raise)."""
        if isinstance(p, Dual):
            raise GraphError(
                f"Dual ** p: the exponent must be a number, not the Dual {p!r} (as pow's in a "
                "graph); for u ** w with both Duals write (w * u.log()).exp()"
            )
        p = params.exponent(p, "Dual ** p: the exponent")
        with np.errstate(all="ignore"):
            x = np.asarray(self.val, dtype=np.float64)  # 0-d: NumPy's x ** 0.5 is sqrt(x)
            value = x**p
            if p == 0:  # d/dx x**0 = 0, also at x = 0
                slope = 0.0
            elif p == 0.5:  # sqrt's slope 0.5 / sqrt(x), as the graph's: -inf at -0.0
                slope = 0.5 / value
            else:
                slope = p * x ** (p - 1)
            return Dual(value, slope * self.dot)

    # exp, log, sin, cos in IEEE arithmetic, as the graph's ops: exp(1000) is inf, log(0)
    # is -inf, sin(inf) is NaN (Python's math module would raise)
    def exp(self) -> Dual:
        with np.errstate(all="ignore"):
            e = np.exp(np.float64(self.val))
            return Dual(e, e * self.dot)

    def log(self) -> Dual:
        with np.errstate(all="ignore"):
            x = np.float64(self.val)
            return Dual(np.log(x), self.dot / x)

    def sin(self) -> Dual:
        with np.errstate(all="ignore"):
            x = np.float64(self.val)
            return Dual(np.sin(x), np.cos(x) * self.dot)

    def cos(self) -> Dual:
        with np.errstate(all="ignore"):
            x = np.float64(self.val)
            return Dual(np.cos(x), -np.sin(x) * self.dot)

    def tanh(self) -> Dual:
        t = math.tanh(self.val)
        return Dual(t, (1 - t * t) * self.dot)

    def __repr__(self) -> str:
        return f"Dual({self.val:.6g}, {self.dot:.6g})"


def _real(value, field: str) -> float:
    """``value`` as a Python float: a real number, or one in a 0-d array (of any device)."""
    kind = getattr(getattr(value, "dtype", None), "kind", "f")
    if not isinstance(value, (str, bytes, complex)) and kind in "biuf":
        try:
            return float(value)
        except (TypeError, ValueError):  # None, a list, an array of several numbers
            pass
    raise GraphError(f"Dual: {field} must be a real number, got {value!r} ({type(value).__name__})")
