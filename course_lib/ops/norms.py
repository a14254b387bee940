"""Normalisation layers: RMSNorm (one fused op with a hand-written backward) and LayerNorm.

FLOP convention (the lecture's table): RMSNorm costs ``4·elements + 2·rows`` — square,
sum, scale by 1/RMS and by the weight per element; mean and ``rsqrt(· + ε)`` per row.
"""

from __future__ import annotations

import math

from ..graph import Node, Op, apply
from .elementwise import add, mul, rsqrt, sub, tangent_sum
from .reductions import mean


def _check_norm_shapes(name, x, w):
    if x is None or w is None:
        return
    if len(x) < 1 or len(w) != 1 or (x[-1] is not None and w[0] != x[-1]):
        raise ValueError(
            f"{name} needs x (..., n) and a weight (n,) of x's last size; got x {x}, weight {w}"
        )


def _inv_rms(xp, x, eps):
    """``1 / sqrt(mean(x², last axis) + eps)``, keeping the axis."""
    ms = xp.einsum("...i,...i->...", x, x)[..., None]
    ms /= x.shape[-1]
    ms += eps
    return 1.0 / xp.sqrt(ms, out=ms)


class RMSNorm(Op):
    """``w * x * rsqrt(mean(x², last axis) + eps)`` (ε inside the square root, as in LLaMA).

    FLOPs: ``4·elements + 2·rows``.
    """

    name = "rms_norm"

    def __init__(self, eps: float = 1e-5):
        super().__init__(eps=float(eps))
        self.eps = float(eps)

    def infer_shape(self, x, w):
        _check_norm_shapes(self.name, x, w)
        return x

    def compute(self, xp, x, w):
        out = x * _inv_rms(xp, x, self.eps)
        out *= w
        return out

    def gradient(self, node, g):
        x, w = node.inputs
        return [
            apply(RMSNormGradX(self.eps), g, x, w),
            None if w.is_constant else apply(RMSNormGradW(self.eps), g, x, w),
        ]

    def _normalized(self, x):
        return mul(x, rsqrt(add(mean(mul(x, x), -1, keepdims=True), self.eps)))

    def jvp(self, node, dx, dw):
        x, w = node.inputs
        xhat = self._normalized(x)
        along_x = None
        if dx is not None:  # w·r·(dx − x̂·mean(x̂·dx))
            r = rsqrt(add(mean(mul(x, x), -1, keepdims=True), self.eps))
            centred = sub(dx, mul(xhat, mean(mul(xhat, dx), -1, keepdims=True)))
            along_x = mul(w, mul(r, centred))
        return tangent_sum(along_x, None if dw is None else mul(dw, xhat))

    def flops(self, out_shape, x_shape, w_shape):
        return 4 * math.prod(out_shape) + 2 * math.prod(out_shape[:-1])


class RMSNormGradX(Op):
    """The adjoint of RMSNorm's input: ``r·(g·w − x̂·mean(g·w·x̂))`` with ``x̂ = r·x``."""

    name = "rms_norm_grad_x"

    def __init__(self, eps: float):
        super().__init__(eps=eps)
        self.eps = eps

    def infer_shape(self, g, x, w):
        return x

    def compute(self, xp, g, x, w):
        r = _inv_rms(xp, x, self.eps)
        gw = g * w
        dot = xp.einsum("...i,...i->...", gw, x)[..., None]
        dot *= r * r / x.shape[-1]
        gw -= x * dot
        gw *= r
        return gw

    def flops(self, out_shape, *in_shapes):
        return 7 * math.prod(out_shape)


class RMSNormGradW(Op):
    """The adjoint of RMSNorm's weight: ``sum over rows of g·x̂``."""

    name = "rms_norm_grad_w"

    def __init__(self, eps: float):
        super().__init__(eps=eps)
        self.eps = eps

    def infer_shape(self, g, x, w):
        return w

    def compute(self, xp, g, x, w):
        xhat = x * _inv_rms(xp, x, self.eps)
        n = x.shape[-1]
        return xp.einsum("ij,ij->j", g.reshape(-1, n), xhat.reshape(-1, n))

    def flops(self, out_shape, g_shape, x_shape, w_shape):
        return 3 * math.prod(x_shape)


def rms_norm(x, weight, eps: float = 1e-5) -> Node:
    """LLaMA's RMSNorm over the last axis: ``weight * x / sqrt(mean(x²) + eps)``."""
    return apply(RMSNorm(eps), x, weight)


def layer_norm(x: Node, weight: Node, bias: Node, eps: float = 1e-5) -> Node:
    """LayerNorm over the last axis (the original Transformer's), built from primitives:
    ``(x − mean) / sqrt(var + eps) · weight + bias``."""
    centred = sub(x, mean(x, -1, keepdims=True))
    normalized = mul(centred, rsqrt(add(mean(mul(centred, centred), -1, keepdims=True), eps)))
    return add(mul(normalized, weight), bias)

