"""Elementwise ops with NumPy broadcasting; every gradient un-broadcasts to its input.

Sigmoid, SiLU and SiLU's adjoint of large float32 host arrays run as one-pass kernels with SIMD
exponentials (``kernels.cpu_kernels``: ``1 / (1 + exp(−x))``, within float32 rounding of the
float64 value). Every other array takes the same formula in NumPy (:func:`_sigmoid`), exact to
rounding where the sigmoid is near 0 too (sigmoid(−20) is 2.06e-9 either way); the kernels'
SIMD and scalar exponentials may differ by an ulp, so an element's value can depend on its
position in the array.
"""

from __future__ import annotations

import math

import numpy as np

from .. import params
from ..backend import on_host
from ..errors import GraphError
from ..graph import Node, Op, apply
from ..kernels import cpu_kernels
from .axes import as_array
from .broadcast import broadcast_shapes, broadcast_tangent, unbroadcast


class Elementwise(Op):
    """Shape = broadcast of the inputs; ``flops_per_element`` FLOPs per output element.

    A rule's partial adjoint for input k is shaped like the output; :func:`unbroadcast`
    sums it back to input k's shape where broadcasting stretched that input.
    """

    elementwise = True
    flops_per_element = 1
    # The op as an expression for the fusion pass's code generators: "{0}", "{1}", ... are
    # the inputs. Float literals in numexpr templates take the computation's dtype.
    templates: dict[str, str] = {}

    def infer_shape(self, *shapes):
        return broadcast_shapes(*shapes)

    def expression(self, args, target):
        template = self.templates.get(target)
        return None if template is None else template.format(*args)


def tangent_sum(*terms: Node | None) -> Node | None:
    """Add the tangent terms that are present (None stands for zero)."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for t in present[1:]:
        total = add(total, t)
    return total


# -- binary arithmetic ----------------------------------------------------------------------
class Add(Elementwise):
    name, symbol = "add", "+"
    family = "residual adds"
    flop_rows = ("residual (attention)", "residual (MLP)")
    templates = {"numexpr": "({0} + {1})", "cuda": "({0} + {1})"}

    def compute(self, xp, x, y):
        if on_host(xp) and cpu_kernels.splits(x, y):  # on the pool's threads
            return cpu_kernels.sum_of(x, y)
        return x + y

    def gradient(self, node, g, needs):
        return [
            unbroadcast(g, node, 0) if needs[0] else None,
            unbroadcast(g, node, 1) if needs[1] else None,
        ]

    def jvp(self, node, dx, dy):
        if dx is None:
            return None if dy is None else broadcast_tangent(dy, node, [1])
        return broadcast_tangent(dx, node, [0]) if dy is None else add(dx, dy)


class Sub(Elementwise):
    name, symbol = "sub", "-"
    glyph = "−"
    templates = {"numexpr": "({0} - {1})", "cuda": "({0} - {1})"}

    def compute(self, xp, x, y):
        return x - y

    def gradient(self, node, g, needs):
        return [
            unbroadcast(g, node, 0) if needs[0] else None,
            unbroadcast(neg(g), node, 1) if needs[1] else None,
        ]

    def jvp(self, node, dx, dy):
        if dy is None:
            return None if dx is None else broadcast_tangent(dx, node, [0])
        return broadcast_tangent(neg(dy), node, [1]) if dx is None else sub(dx, dy)


class Mul(Elementwise):
    name, symbol = "mul", "*"
    glyph = "×"
    family = "nonlinearity and gate"
    flop_rows = ("element-wise ×",)
    templates = {"numexpr": "({0} * {1})", "cuda": "({0} * {1})"}

    def compute(self, xp, x, y):
        if on_host(xp) and cpu_kernels.splits(x, y):  # on the pool's threads
            return cpu_kernels.product(x, y)
        return x * y

    def gradient(self, node, g, needs):
        x, y = node.inputs
        return [
            unbroadcast(mul(g, y), node, 0) if needs[0] else None,
            unbroadcast(mul(g, x), node, 1) if needs[1] else None,
        ]

    def jvp(self, node, dx, dy):  # each term has the output's shape: it involves x and y
        x, y = node.inputs
        return tangent_sum(None if dx is None else mul(dx, y), None if dy is None else mul(x, dy))


class Div(Elementwise):
    name, symbol = "div", "/"
    templates = {"numexpr": "({0} / {1})", "cuda": "({0} / {1})"}

    def compute(self, xp, x, y):
        return x / y

    def gradient(self, node, g, needs):
        x, y = node.inputs
        return [
            unbroadcast(div(g, y), node, 0) if needs[0] else None,
            unbroadcast(neg(div(mul(g, node), y)), node, 1) if needs[1] else None,
        ]

    def jvp(self, node, dx, dy):
        y = node.inputs[1]
        return tangent_sum(
            None if dx is None else div(dx, y),
            None if dy is None else neg(div(mul(node, dy), y)),
        )


class Maximum(Elementwise):
    name = "maximum"
    # maximumf (fused_elementwise.cu): NumPy's maximum, where NaN wins; fmaxf would drop it
    templates = {"numexpr": "maximum({0}, {1})", "cuda": "maximumf({0}, {1})"}

    def compute(self, xp, x, y):
        return xp.maximum(x, y)

    # PyTorch's convention: the larger input gets the gradient, a tie splits it in halves,
    # and where either input is NaN (so is the output) both get it
    def gradient(self, node, g, needs):
        x, y = node.inputs
        half = where(equal(x, y), mul(g, 0.5), g)
        return [
            unbroadcast(where(less(x, y), 0.0, half), node, 0) if needs[0] else None,
            unbroadcast(where(greater(x, y), 0.0, half), node, 1) if needs[1] else None,
        ]

    def jvp(self, node, dx, dy):
        if dx is None and dy is None:
            return None
        x, y = node.inputs
        a, b = (0.0 if dx is None else dx), (0.0 if dy is None else dy)
        both = add(a, b)  # the tangent where the output is NaN: both inputs count
        t = where(equal(x, y), mul(both, 0.5),
                  where(less(x, y), b, where(greater(x, y), a, both)))  # fmt: skip
        present = [k for k, d in ((0, dx), (1, dy)) if d is not None]
        return broadcast_tangent(t, node, present)


class AddN(Elementwise):
    """The sum of any number of inputs: ``sum(node_to_grad[i])`` in one node."""

    name = "sum_n"

    def written(self, args):
        return " + ".join(args)

    def compute(self, xp, *xs):
        if on_host(xp) and cpu_kernels.splits(*xs):  # on the pool's threads
            return cpu_kernels.sum_of(*xs)
        total = xs[0] + xs[1]
        for x in xs[2:]:
            total = total + x
        return total

    def gradient(self, node, g, needs):
        return [unbroadcast(g, node, k) if need else None for k, need in enumerate(needs)]

    def jvp(self, node, *tangents):
        total = tangent_sum(*tangents)
        present = [k for k, t in enumerate(tangents) if t is not None]
        return None if total is None else broadcast_tangent(total, node, present)

    def flops(self, out_shape, *in_shapes):
        return (len(in_shapes) - 1) * math.prod(out_shape)

    def expression(self, args, target):
        return f"({' + '.join(args)})"


# -- comparisons (not differentiable: their gradient is zero almost everywhere) -------------
class Compare(Elementwise):
    def infer_dtype(self, *dtypes):
        return np.dtype(bool)

    def gradient(self, node, g, needs):
        return [None] * len(node.inputs)

    def jvp(self, node, *tangents):
        return None


def _comparison(name, symbol, fn):
    template = f"({{0}} {symbol} {{1}})"
    attrs = {"name": name, "symbol": symbol, "templates": {"numexpr": template, "cuda": template}}
    cls = type(name.title().replace("_", ""), (Compare,), attrs)
    cls.compute = lambda self, xp, x, y: fn(x, y)
    return cls


Less = _comparison("less", "<", lambda x, y: x < y)
LessEqual = _comparison("less_equal", "<=", lambda x, y: x <= y)
Greater = _comparison("greater", ">", lambda x, y: x > y)
GreaterEqual = _comparison("greater_equal", ">=", lambda x, y: x >= y)
Equal = _comparison("equal", "==", lambda x, y: x == y)


class Where(Elementwise):
    """``where(cond, x, y)``: x where cond is true, else y."""

    name = "where"
    templates = {"numexpr": "where({0}, {1}, {2})", "cuda": "({0} ? {1} : {2})"}

    def infer_dtype(self, c, x, y):
        return Op.infer_dtype(self, x, y)

    def compute(self, xp, c, x, y):
        # CuPy's where wants the condition as an array; x and y may stay numbers (weakly
        # typed, as in arithmetic: where(c, x32, 0.0) stays float32)
        return xp.where(as_array(xp, c), x, y)

    def gradient(self, node, g, needs):
        c = node.inputs[0]
        return [
            None,
            unbroadcast(where(c, g, 0.0), node, 1) if needs[1] else None,
            unbroadcast(where(c, 0.0, g), node, 2) if needs[2] else None,
        ]

    def jvp(self, node, dc, dx, dy):
        if dx is None and dy is None:
            return None
        c = node.inputs[0]
        t = where(c, 0.0 if dx is None else dx, 0.0 if dy is None else dy)
        present = [0] + [k for k, d in ((1, dx), (2, dy)) if d is not None]  # the condition and
        return broadcast_tangent(t, node, present)  # the tangents in t give it its shape


# -- unary ----------------------------------------------------------------------------------
class Unary(Elementwise):
    """``y = f(x)``: the gradient is ``g * f'(x)``, the tangent ``dx * f'(x)``."""

    def derivative(self, node: Node) -> Node:
        raise NotImplementedError

    def gradient(self, node, g, needs):
        return [mul(g, self.derivative(node))]

    def jvp(self, node, dx):
        return None if dx is None else mul(dx, self.derivative(node))


class Neg(Elementwise):
    name, symbol = "neg", "-"
    glyph = "−"
    linear = True
    templates = {"numexpr": "(-{0})", "cuda": "(-{0})"}

    def compute(self, xp, x):
        return -x

    def gradient(self, node, g, needs):
        return [neg(g)]


_FLOAT = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


class Power(Unary):
    """``x ** p`` for a constant real exponent p."""

    name = "pow"
    attributes = ("p",)

    def written(self, args):
        return f"{args[0]}²" if self.p == 2 else f"{args[0]}^{self.p:g}"

    def __init__(self, p):
        super().__init__(p=params.exponent(p, "pow: the exponent"))

    def label(self):
        return f"pow({self.p:g})"

    def expression(self, args, target):
        if type(self.p) not in (int, float):
            return None  # a NumPy-scalar exponent promotes (float32 ** float64): left to NumPy
        p = float(self.p)
        if not math.isfinite(p):
            return None  # no literal for it in numexpr or C: left to NumPy (not fused)
        if p == 0.5:  # NumPy takes sqrt here: sqrt(-inf) is nan where pow(-inf, 0.5) is inf
            return f"sqrt({args[0]})" if target == "numexpr" else f"sqrtf({args[0]})"
        return f"({args[0]} ** {p!r})" if target == "numexpr" else f"powf({args[0]}, {p!r}f)"

    def infer_dtype(self, dtype):
        # NumPy's promotion: int64 ** 3.0 is float64, float32 ** np.float64(2) is float64,
        # bool ** 2 is int8; asked of NumPy itself, on one element
        if dtype is None:
            return None
        try:
            with np.errstate(all="ignore"):
                return (np.ones(1, dtype) ** self.p).dtype
        except (ValueError, TypeError):  # int ** -1: the run raises NumPy's error
            return np.result_type(dtype, self.p)

    def compute(self, xp, x):
        p = self.p
        if p == 2 and type(p) in (int, float) and getattr(x, "dtype", None) in _FLOAT:
            return x * x  # the dtype and the numbers of x ** 2 (NumPy squares), faster
        result = x**p
        if xp is not np and getattr(x, "dtype", None) == np.bool_:  # CuPy: bool ** 2 is int64
            return result.astype(self.infer_dtype(x.dtype), copy=False)
        return result

    def derivative(self, node):
        x = node.inputs[0]
        p = self.p
        if p == 0.5:  # NumPy computes x ** 0.5 as sqrt: the slope is sqrt's, 0.5 / sqrt(x)
            return div(0.5, node)  # (NaN at -inf, -inf at -0.0, as PyTorch's)
        if p == 0:  # d/dx x**0 = 0, also at x = 0 (0 · 0⁻¹ would be NaN), as in PyTorch
            return zeros_like(x)
        return mul(p, x if p - 1 == 1 else power(x, p - 1))


class Exp(Unary):
    name = "exp"
    templates = {"numexpr": "exp({0})", "cuda": "expf({0})"}

    def compute(self, xp, x):
        return xp.exp(x)

    def derivative(self, node):
        return node


class Log(Unary):
    name = "log"
    templates = {"numexpr": "log({0})", "cuda": "logf({0})"}

    def written(self, args):
        return f"ln({args[0]})"

    def compute(self, xp, x):
        return xp.log(x)

    def gradient(self, node, g, needs):
        return [div(g, node.inputs[0])]

    def jvp(self, node, dx):
        return None if dx is None else div(dx, node.inputs[0])


class Sin(Unary):
    name = "sin"
    templates = {"numexpr": "sin({0})", "cuda": "sinf({0})"}

    def compute(self, xp, x):
        return xp.sin(x)

    def derivative(self, node):
        return cos(node.inputs[0])


class Cos(Unary):
    name = "cos"
    templates = {"numexpr": "cos({0})", "cuda": "cosf({0})"}

    def compute(self, xp, x):
        return xp.cos(x)

    def derivative(self, node):
        return neg(sin(node.inputs[0]))


class Tanh(Unary):
    name = "tanh"
    templates = {"numexpr": "tanh({0})", "cuda": "tanhf({0})"}

    def compute(self, xp, x):
        return xp.tanh(x)

    def derivative(self, node):
        return sub(1.0, mul(node, node))


def _sigmoid(xp, x):
    """``1 / (1 + e^−x)``; e^−x overflows to inf far left, giving 0 (no warning). Integers
    and booleans are taken as float64 first (−x would wrap an unsigned integer)."""
    if getattr(x, "dtype", np.dtype(float)).kind not in "fc":
        x = x * 1.0
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + xp.exp(-x))


class Sigmoid(Unary):
    name, flops_per_element = "sigmoid", 3
    # 1 / (1 + e^−x), as the CPU kernel and PyTorch: exact to rounding far left too, where
    # 0.5·(tanh(x/2) + 1) cancels (every digit lost by x = −38 in float64: log(sigmoid) = −inf),
    # until e^−x overflows (float32: 0 below x ≈ −88.7, where subnormals would still be exact)
    templates = {"numexpr": "(1.0 / (1.0 + exp(-{0})))", "cuda": "(1.0f / (1.0f + expf(-{0})))"}

    def compute(self, xp, x):
        if on_host(xp) and cpu_kernels.worth_it(x):  # one pass (kernels/cpu_kernels.py)
            return cpu_kernels.sigmoid(x)
        return _sigmoid(xp, x)

    def derivative(self, node):
        return mul(node, sub(1.0, node))


class Relu(Unary):
    name = "relu"
    family = "nonlinearity and gate"
    templates = {"numexpr": "maximum({0}, 0.0)", "cuda": "maximumf({0}, 0.0f)"}

    def compute(self, xp, x):
        return xp.maximum(x, 0)

    def derivative(self, node):
        return greater(node.inputs[0], 0)


class Silu(Unary):
    """``x * sigmoid(x)`` (Swish with beta = 1), LLaMA's activation."""

    name, flops_per_element = "silu", 4
    family = "nonlinearity and gate"
    flop_rows = ("Swish",)
    templates = {
        "numexpr": "({0} * (1.0 / (1.0 + exp(-{0}))))",
        "cuda": "({0} * (1.0f / (1.0f + expf(-{0}))))",
    }

    def compute(self, xp, x):
        if on_host(xp) and cpu_kernels.worth_it(x):  # one pass (kernels/cpu_kernels.py)
            return cpu_kernels.silu(x)
        return x * _sigmoid(xp, x)

    def gradient(self, node, g, needs):
        return [apply(SiluGrad(), g, node.inputs[0])]  # g · silu'(x), one op

    def jvp(self, node, dx):
        return None if dx is None else apply(SiluGrad(), dx, node.inputs[0])


class SiluGrad(Elementwise):
    """SiLU's adjoint (and tangent): ``g · silu'(x) = g · s·(1 + x·(1 − s))``, ``s =
    sigmoid(x)``; inputs (g, x). One op instead of sigmoid and five elementwise passes.
    Its own derivatives: linear in g; along x, ``g · silu''(x)`` with
    ``silu''(x) = s·(1 − s)·(2 + x·(1 − 2s))``."""

    name, flops_per_element = "silu_grad", 8  # sigmoid 3, then 5 multiplies and adds
    templates = {
        "numexpr": "({0} * ((1.0 / (1.0 + exp(-{1}))) * "
        "(1.0 + {1} * (1.0 - (1.0 / (1.0 + exp(-{1})))))))",
        "cuda": "({0} * ((1.0f / (1.0f + expf(-{1}))) * "
        "(1.0f + {1} * (1.0f - (1.0f / (1.0f + expf(-{1})))))))",
    }

    def compute(self, xp, g, x):
        if on_host(xp) and cpu_kernels.worth_it(g, x):  # one pass (kernels/cpu_kernels.py)
            return cpu_kernels.silu_grad(g, x)
        s = _sigmoid(xp, x)
        return g * (s * (1.0 + x * (1.0 - s)))

    @staticmethod
    def _second(x: Node) -> Node:
        s = sigmoid(x)
        return mul(mul(s, sub(1.0, s)), add(2.0, mul(x, sub(1.0, mul(2.0, s)))))

    def gradient(self, node, u, needs):
        g, x = node.inputs
        return [
            unbroadcast(apply(self, u, x), node, 0) if needs[0] else None,
            unbroadcast(mul(mul(u, g), self._second(x)), node, 1) if needs[1] else None,
        ]

    def jvp(self, node, dg, dx):
        g, x = node.inputs
        return tangent_sum(
            None if dg is None else apply(self, dg, x),
            None if dx is None else mul(mul(dx, g), self._second(x)),
        )


class Sqrt(Unary):
    name = "sqrt"
    templates = {"numexpr": "sqrt({0})", "cuda": "sqrtf({0})"}

    def compute(self, xp, x):
        return xp.sqrt(x)

    def derivative(self, node):
        return div(0.5, node)


class Rsqrt(Unary):
    name, flops_per_element = "rsqrt", 2
    templates = {"numexpr": "(1.0 / sqrt({0}))", "cuda": "rsqrtf({0})"}

    def compute(self, xp, x):
        return 1.0 / xp.sqrt(x)

    def derivative(self, node):  # -x^(-3/2) / 2 = -rsqrt(x)³ / 2: +inf at -0.0, as PyTorch
        return mul(-0.5, mul(node, mul(node, node)))


class Cast(Elementwise):
    """Convert to ``dtype`` (e.g. a boolean mask to floats). To a float dtype it is linear; to
    an integer or boolean one a step function, whose slope is 0 wherever it has one (the
    derivative finite differences see, and PyTorch's: no gradient flows through it)."""

    name, flops_per_element = "cast", 0
    attributes = ("dtype",)

    def __init__(self, dtype):
        super().__init__(dtype=params.dtype(dtype, "cast"))

    def infer_dtype(self, *dtypes):
        return self.dtype

    def compute(self, xp, x):
        return xp.asarray(x).astype(self.dtype, copy=False)  # its own dtype: x itself

    def gradient(self, node, g, needs):
        x = node.inputs[0]
        if self.dtype.kind != "f":
            return [zeros_like(x)]
        return [cast(g, x.dtype) if x.dtype is not None else g]

    def jvp(self, node, dx):
        return None if dx is None or self.dtype.kind != "f" else cast(dx, self.dtype)


class Fill(Op):
    """``zeros_like`` / ``ones_like``: a constant array shaped like the input, in its dtype."""

    attributes = ("value",)
    shape_only = True
    floating = False  # Seed: float64 where the input is an integer or a boolean

    def written(self, args):
        return "1" if self.value == 1 else super().written(args)

    def __init__(self, value):
        super().__init__(value=value)

    @property
    def name(self) -> str:
        return {0: "zeros_like", 1: "ones_like"}.get(self.value, "full_like")

    def infer_shape(self, shape):
        return shape

    def compute(self, xp, x):
        x = as_array(xp, x)  # x may be a number
        if self.floating and x.dtype.kind not in "fc":
            return xp.full(x.shape, self.value, dtype=np.float64)
        return xp.full_like(x, self.value)

    def gradient(self, node, g, needs):
        return [None]

    def jvp(self, node, dx):
        return None


# -- public functions -----------------------------------------------------------------------
_ADD, _SUB, _MUL, _DIV, _NEG = Add(), Sub(), Mul(), Div(), Neg()


def add(x, y) -> Node:
    """``x + y`` with broadcasting."""
    return apply(_ADD, x, y)


def sub(x, y) -> Node:
    """``x - y`` with broadcasting."""
    return apply(_SUB, x, y)


def mul(x, y) -> Node:
    """``x * y`` with broadcasting."""
    return apply(_MUL, x, y)


def div(x, y) -> Node:
    """``x / y`` with broadcasting."""
    return apply(_DIV, x, y)


def neg(x) -> Node:
    """``-x``."""
    return apply(_NEG, x)


def power(x, p) -> Node:
    """``x ** p`` for a real number p (checked by :class:`Power`)."""
    return apply(Power(p), x)


def sum_n(*xs) -> Node:
    """The sum of nodes as one node, given like Python's ``max``: as separate arguments,
    ``sum_n(a, b, c)``, or as one list, ``sum_n(node_to_grad[i])``."""
    if len(xs) == 1 and isinstance(xs[0], (list, tuple)):
        xs = tuple(xs[0])
    if not xs:
        raise GraphError("sum_n: nothing to add (an empty sum has no shape); pass one node or more")
    return apply(AddN(), *xs) if len(xs) > 1 else xs[0]


def maximum(x, y) -> Node:
    """Elementwise maximum (a tie splits the gradient in halves, as PyTorch's)."""
    return apply(Maximum(), x, y)


def where(cond, x, y) -> Node:
    """``x`` where ``cond`` holds, else ``y``."""
    return apply(Where(), cond, x, y)


def less(x, y) -> Node:
    return apply(Less(), x, y)


def less_equal(x, y) -> Node:
    return apply(LessEqual(), x, y)


def greater(x, y) -> Node:
    return apply(Greater(), x, y)


def greater_equal(x, y) -> Node:
    return apply(GreaterEqual(), x, y)


def equal(x, y) -> Node:
    return apply(Equal(), x, y)


def cast(x, dtype) -> Node:
    """Convert ``x`` to ``dtype``."""
    return apply(Cast(dtype), x)


def zeros_like(x) -> Node:
    """Zeros with the shape and dtype of ``x``."""
    return apply(Fill(0), x)


def ones_like(x) -> Node:
    """Ones with the shape and dtype of ``x``."""
    return apply(Fill(1), x)


class Seed(Fill):
    """A gradient's default seed, ``d x / d x`` (drawn as the lecture's ``ones_like``): ones
    in the dtype of ``x`` when it is a float and in float64 otherwise, so a variable of no
    declared dtype fed integers or booleans still gets exact gradients (``True + True`` is
    True, int8 arithmetic wraps)."""

    floating = True

    def __init__(self, value=1):
        super().__init__(value)


def seed_like(x) -> Node:
    """:class:`Seed` of ``x``: ones shaped like it, in a float dtype."""
    return apply(Seed(), x)


def _unary(cls):
    op = cls()

    def fn(x) -> Node:
        return apply(op, x)

    fn.__name__ = cls.name
    fn.__doc__ = f"Elementwise ``{cls.name}(x)``."
    return fn


exp = _unary(Exp)
log = _unary(Log)
sin = _unary(Sin)
cos = _unary(Cos)
tanh = _unary(Tanh)
sigmoid = _unary(Sigmoid)
relu = _unary(Relu)
silu = _unary(Silu)
sqrt = _unary(Sqrt)
rsqrt = _unary(Rsqrt)
