"""Dual numbers a + b·ε with ε² = 0: forward mode for scalars, by hand.

``Dual(x, 1.0)`` carries the value x and the tangent ẋ = 1; every operation applies
the chain rule to the tangent, so ``f(Dual(x, 1)).dot == f'(x)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Dual:
    """A value ``val`` with its tangent ``dot`` (v and v̇ in the lecture's notation).

    Both are Python floats: a number computed on a device (a 0-d CuPy array, say) comes to
    the host when the Dual is made, so the arithmetic and the repr are plain Python."""

    val: float
    dot: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "val", float(self.val))
        object.__setattr__(self, "dot", float(self.dot))

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
        o = Dual.lift(other)
        return Dual(self.val / o.val, (self.dot * o.val - self.val * o.dot) / o.val**2)

    def __rtruediv__(self, other):
        return Dual.lift(other) / self

    def __neg__(self):
        return Dual(-self.val, -self.dot)

    def __pow__(self, p: float):
        slope = 0.0 if p == 0 else p * self.val ** (p - 1)  # d/dx x**0 = 0, also at x = 0
        return Dual(self.val**p, slope * self.dot)

    def exp(self) -> Dual:
        e = math.exp(self.val)
        return Dual(e, e * self.dot)

    def log(self) -> Dual:
        return Dual(math.log(self.val), self.dot / self.val)

    def sin(self) -> Dual:
        return Dual(math.sin(self.val), math.cos(self.val) * self.dot)

    def cos(self) -> Dual:
        return Dual(math.cos(self.val), -math.sin(self.val) * self.dot)

    def tanh(self) -> Dual:
        t = math.tanh(self.val)
        return Dual(t, (1 - t * t) * self.dot)

    def __repr__(self) -> str:
        return f"Dual({self.val:.6g}, {self.dot:.6g})"
