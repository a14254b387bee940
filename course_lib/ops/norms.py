"""Normalisation layers: RMSNorm (one fused op with a hand-written backward) and LayerNorm.

RMSNorm and its input adjoint run as one-pass row kernels for large float32 host arrays
(``kernels.cpu_kernels``; row sums in double, so within float32 rounding of the code below).

FLOP convention (the lecture's table): RMSNorm costs ``4·elements + 2·rows`` — square,
sum, scale by 1/RMS and by the weight per element; mean and ``rsqrt(· + ε)`` per row. Its
adjoints count their elementwise passes: 7 per element for x's, 3 per element of x for w's.
"""

from __future__ import annotations

import math

from .. import params
from ..backend import on_host
from ..errors import ShapeError
from ..graph import Node, Op, apply, as_node
from ..kernels import cpu_kernels
from ..kernels.dispatch import run_on_gpu
from .broadcast import sum_to
from .elementwise import add, mul, ones_like, rsqrt, sub, tangent_sum
from .reductions import mean


def _check_norm_shapes(name, x, w, what="weight"):
    if x is None or w is None:
        return
    if len(x) < 1 or len(w) != 1 or (None not in (x[-1], w[0]) and w[0] != x[-1]):
        raise ValueError(
            f"{name} needs x (..., n) and a {what} (n,) of x's last size; got x {x}, {what} {w}"
        )


def _inv_rms(xp, x, eps):
    """``1 / sqrt(mean(x², last axis) + eps)``, keeping the axis."""
    ms = xp.einsum("...i,...i->...", x, x)[..., None]
    ms /= x.shape[-1]
    ms += eps
    return 1.0 / xp.sqrt(ms, out=ms)


def _on_cpu_kernels(xp, x, w, *same_as_x) -> bool:
    """Large float32 host rows (and ``g`` of x's shape) with a float32 weight of one axis."""
    return (
        on_host(xp)
        and cpu_kernels.worth_it(x, *same_as_x)
        and isinstance(w, type(x))
        and w.dtype == x.dtype
        and w.shape == x.shape[-1:]
    )


def _row_mean(a: Node) -> Node:
    return mean(a, -1, keepdims=True)


def _inv_rms_node(x: Node, eps: float) -> Node:
    """r = rsqrt(mean(x²) + ε) as a node (for the derivative rules)."""
    return rsqrt(add(_row_mean(mul(x, x)), eps))


def _normalized_tangent(x: Node, r: Node, t: Node) -> Node:
    """The tangent of x̂ = r·x along t: ``r·t − r³·x·mean(x·t)``."""
    return sub(mul(r, t), mul(mul(r, mul(r, r)), mul(x, _row_mean(mul(x, t)))))


def _grad_x_along_x(g: Node, x: Node, w: Node, r: Node, t: Node, transpose: bool) -> Node:
    """How ``rms_norm_grad_x(g, x, w) = r·gw − r³·m·x`` (gw = g·w, m = mean(gw·x)) moves
    with x: its Jacobian times t, or (``transpose``) its transposed Jacobian times t."""
    gw = mul(g, w)
    m = _row_mean(mul(gw, x))
    r2 = mul(r, r)
    xt = _row_mean(mul(x, t))
    if transpose:  # Σ_i t_i ∂dx_i/∂x_j
        terms = [mul(x, _row_mean(mul(t, gw))), mul(gw, xt)]
    else:  # Σ_j ∂dx_i/∂x_j t_j
        terms = [mul(gw, xt), mul(x, _row_mean(mul(gw, t)))]
    inner = sub(mul(mul(3.0, mul(r2, m)), mul(x, xt)), add(add(*terms), mul(m, t)))
    return mul(mul(r, r2), inner)


class _RMSNormFamily(Op):
    """What RMSNorm and its two adjoint ops share: ε (a float) as their one attribute."""

    attributes = ("eps",)

    def __init__(self, eps: float = 1e-5):
        super().__init__(eps=params.real(eps, f"{self.name}: eps", minimum=0.0))


class RMSNorm(_RMSNormFamily):
    """``w * x * rsqrt(mean(x², last axis) + eps)`` (ε inside the square root, as in LLaMA).

    FLOPs: ``4·elements + 2·rows``. The backward is two fused ops, themselves
    differentiable (their rules are built from primitives), so higher orders work.
    """

    name = "rms_norm"
    flops_per_element, flops_per_row = 4, 2
    family = "norms"
    flop_rows = ("RMSNorm (attention)", "RMSNorm (MLP)", "RMSNorm (final)")

    def gpu_kernel(self, launch, x, w):
        """``rms_norm.cu``: one block per row of the last axis."""
        return launch.rms_norm(x, w, eps=self.eps) if x.ndim >= 1 else None

    def infer_shape(self, x, w):
        _check_norm_shapes(self.name, x, w)
        return x

    def infer_dtype(self, x, w):
        if x is not None and x.kind != "f":  # as PyTorch's: x² of integers would overflow
            raise ValueError(f"rms_norm normalizes floating-point x, got {x}; cast it first")
        return super().infer_dtype(x, w)

    def compute(self, xp, x, w):
        _check_norm_shapes(self.name, x.shape, w.shape)  # shapes unknown when built
        out = run_on_gpu(self, xp, x, w)  # rms_norm.cu on a GPU
        if out is not None:
            return out
        if _on_cpu_kernels(xp, x, w):  # one pass (kernels/cpu_kernels.py)
            return cpu_kernels.rms_norm(x, w, self.eps)
        out = x * _inv_rms(xp, x, self.eps)
        if out.dtype != xp.result_type(out.dtype, w.dtype):  # a wider weight: NumPy's promotion
            return out * w
        out *= w
        return out

    def gradient(self, node, g, needs):
        x, w = node.inputs
        return [
            apply(RMSNormGradX(self.eps), g, x, w) if needs[0] else None,
            apply(RMSNormGradW(self.eps), g, x, w) if needs[1] else None,
        ]

    def jvp(self, node, dx, dw):
        x, w = node.inputs
        r = _inv_rms_node(x, self.eps)
        along_x = None if dx is None else mul(w, _normalized_tangent(x, r, dx))
        return tangent_sum(along_x, None if dw is None else mul(dw, mul(x, r)))

    def flops(self, out_shape, x_shape, w_shape):
        rows = math.prod(out_shape[:-1])
        return self.flops_per_element * math.prod(out_shape) + self.flops_per_row * rows


class RMSNormGradX(_RMSNormFamily):
    """The adjoint of RMSNorm's input: ``r·(g·w − x̂·mean(g·w·x̂))`` with ``x̂ = r·x``."""

    name, flops_per_element = "rms_norm_grad_x", 7

    def infer_shape(self, g, x, w):
        return x

    def gpu_kernel(self, launch, g, x, w):
        """``rms_norm.cu``'s ``rms_norm_grad_x_rows``: one block per row of the last axis."""
        ok = x.ndim >= 1 and g.shape == x.shape and w.shape == x.shape[-1:]
        return launch.rms_norm_grad_x(g, x, w, eps=self.eps) if ok else None

    def compute(self, xp, g, x, w):
        out = run_on_gpu(self, xp, g, x, w)  # rms_norm.cu on a GPU
        if out is not None:
            return out
        if _on_cpu_kernels(xp, x, w, g):  # one pass (kernels/cpu_kernels.py)
            return cpu_kernels.rms_norm_grad_x(g, x, w, self.eps)
        r = _inv_rms(xp, x, self.eps)
        gw = g * w
        dot = xp.einsum("...i,...i->...", gw, x)[..., None]
        dot *= r * r / x.shape[-1]
        gw -= x * dot
        gw *= r
        return gw

    def gradient(self, node, u, needs):
        g, x, w = node.inputs
        # linear in gw = g·w through the symmetric map r·(I − x̂x̂ᵀ/n): apply it to u
        u_gw = apply(self, u, x, ones_like(w))
        r = _inv_rms_node(x, self.eps)
        return [
            mul(u_gw, w) if needs[0] else None,
            _grad_x_along_x(g, x, w, r, u, transpose=True) if needs[1] else None,
            sum_to(mul(u_gw, g), w) if needs[2] else None,
        ]

    def jvp(self, node, dg, dx, dw):
        g, x, w = node.inputs
        t_gw = tangent_sum(None if dg is None else mul(dg, w), None if dw is None else mul(g, dw))
        along_gw = None if t_gw is None else apply(self, t_gw, x, ones_like(w))
        along_x = None
        if dx is not None:
            along_x = _grad_x_along_x(g, x, w, _inv_rms_node(x, self.eps), dx, transpose=False)
        return tangent_sum(along_gw, along_x)


class RMSNormGradW(_RMSNormFamily):
    """The adjoint of RMSNorm's weight: ``sum over rows of g·x̂``."""

    name, flops_per_element = "rms_norm_grad_w", 3  # per element of x

    def infer_shape(self, g, x, w):
        return w

    def gpu_kernel(self, launch, g, x, w):
        """``rms_norm.cu``: each row's r, then partial column sums over chunks of rows."""
        ok = x.ndim >= 1 and g.shape == x.shape and w.shape == x.shape[-1:]
        return launch.rms_norm_grad_w(g, x, eps=self.eps) if ok else None

    def compute(self, xp, g, x, w):
        out = run_on_gpu(self, xp, g, x, w)  # rms_norm.cu on a GPU
        if out is not None:
            return out
        if _on_cpu_kernels(xp, x, w, g):  # one pass, columns on the pool's threads
            return cpu_kernels.rms_norm_grad_w(g, x, self.eps)
        xhat = x * _inv_rms(xp, x, self.eps)
        n = x.shape[-1]
        return xp.einsum("ij,ij->j", g.reshape(-1, n), xhat.reshape(-1, n))

    def gradient(self, node, u, needs):
        g, x, w = node.inputs
        xhat = mul(x, _inv_rms_node(x, self.eps))
        # ∂/∂x of Σ_rows g·x̂ against u is x̂'s adjoint for g·u: rms_norm_grad_x(g, x, u)
        return [mul(u, xhat), apply(RMSNormGradX(self.eps), g, x, u), None]

    def jvp(self, node, dg, dx, dw):
        g, x, w = node.inputs
        r = _inv_rms_node(x, self.eps)
        along_g = None if dg is None else sum_to(mul(dg, mul(x, r)), w)
        along_x = None if dx is None else sum_to(mul(g, _normalized_tangent(x, r, dx)), w)
        return tangent_sum(along_g, along_x)

    def flops(self, out_shape, g_shape, x_shape, w_shape):
        return self.flops_per_element * math.prod(x_shape)


def rms_norm(x, weight, eps: float = 1e-5) -> Node:
    """LLaMA's RMSNorm over the last axis: ``weight * x / sqrt(mean(x²) + eps)``."""
    return apply(RMSNorm(eps), x, weight)


def layer_norm(x: Node, weight: Node, bias: Node, eps: float = 1e-5) -> Node:
    """LayerNorm over the last axis (the original Transformer's), built from primitives:
    ``(x − mean) / sqrt(var + eps) · weight + bias``; weight and bias are (n,), n x's last
    size (checked where the shapes are known when built: a :class:`ShapeError`)."""
    eps = params.real(eps, "layer_norm: eps", minimum=0.0)
    x, weight, bias = as_node(x), as_node(weight), as_node(bias)
    for what, p in (("weight", weight), ("bias", bias)):
        try:  # NumPy would broadcast others: a weight per element, or a larger output
            _check_norm_shapes("layer_norm", x.shape, p.shape, what)
        except ValueError as exc:
            raise ShapeError(str(exc)) from None
    centred = sub(x, mean(x, -1, keepdims=True))
    normalized = mul(centred, rsqrt(add(mean(mul(centred, centred), -1, keepdims=True), eps)))
    return add(mul(normalized, weight), bias)
