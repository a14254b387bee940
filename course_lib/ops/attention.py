"""Causal grouped-query attention from three batched products and a masked softmax.

Layouts are the projections' own: queries ``a`` (B, T, H, d), keys/values ``b`` (B, S, KV, d)
with KV dividing H; query head h reads kv head ``h // (H / KV)`` (Hugging Face's
repeat-interleave), so no repeated K/V is ever materialised. Scores and probabilities are
(B, H, T, S). The three products are closed under differentiation:

==============================  ==========================  ===========================
product                          adjoint of the 1st input    adjoint of the 2nd input
==============================  ==========================  ===========================
``head_scores(a, b)  = a·bᵀ``    ``head_mix(g, b)``           ``head_mix_t(g, a)``
``head_mix(p, v)     = p·v``     ``head_scores(g, v)``        ``head_mix_t(p, g)``
``head_mix_t(p, a)   = Σ pᵀ·a``  ``head_scores(a, g)``        ``head_mix(p, g)``
==============================  ==========================  ===========================

With ``causal=True`` each product applies attention's mask M (query i sees key j when
j <= i + S − T) to its (B, H, T, S) operand: ``head_scores`` writes 0 at the masked scores,
``head_mix`` and ``head_mix_t`` count the masked probabilities as 0, ``(M ⊙ p)·v``. The
causal products are closed under differentiation too (each adjoint above, causal), so the
backward pass of ``causal_attention`` never needs the masked half; the CPU kernels skip it
(about half the work; a masked term is multiplied by 0 instead where the other operand holds
an infinity or a NaN, as ``(M ⊙ p)·v`` would).

FLOP convention: each product ``2·B·H·T·S·d`` (matmul 2mnk), causal or not, as the lecture's
table counts the whole score matrix; the masked softmax 3 per score (scale, exp, divide; the
row max and sum are not counted), softmax's count, as in the lecture's ``2bs²nd + 3bs²n``;
its adjoint 4 per score (dot, subtract, multiply, scale).

On the CPU, large float32 scores run the softmax and its adjoint as row kernels
(``kernels.cpu_kernels``: one pass over the scores); elsewhere the array module's
operations (``on_arrays``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import params
from ..backend import on_host
from ..errors import ShapeError, describe_shapes
from ..graph import Node, Op, apply
from ..kernels import cpu_kernels
from ..kernels.cpu_kernels import MASK_ON_LEFT, MASK_ON_RESULT, UNMASKED
from ..kernels.dispatch import run_on_gpu
from .elementwise import mul, sub, tangent_sum
from .nn import Softmax
from .reductions import floating, sum


def _groups(h, kv, what):
    if kv == 0:  # h % 0: Python's "integer modulo by zero", naming neither
        raise ValueError(f"{what}: keys/values need at least one kv head, got 0")
    if h is not None and kv is not None and h % kv:
        raise ValueError(f"{what}: {h} query heads are not a multiple of {kv} kv heads")


def _check_4d(what, **shapes):
    for name, shape in shapes.items():
        if shape is not None and len(shape) != 4:
            raise ValueError(f"{what} needs 4-D {name}, got shape {shape}")


def _same(what, label, a, b):
    if a is not None and b is not None and a != b:
        raise ValueError(f"{what}: {label} differ ({a} vs {b})")


def _check_causal(what, t, s):
    if t is not None and s is not None and t > s:
        raise ValueError(f"{what}(causal=True): {t} queries but only {s} keys")


def _allowed(t: int, s: int) -> np.ndarray:
    """Attention's causal mask on the host: (T, S) booleans, True where query i sees key j
    (j <= i + s - t: the queries are the last t of the s positions)."""
    return np.arange(s)[None, :] <= np.arange(t)[:, None] + (s - t)


@lru_cache(maxsize=16)
def _causal_kept(xp, t: int, s: int):
    """:func:`_allowed` on xp's device, copied there once per shape."""
    return xp.asarray(_allowed(t, s))


def _kept_only(xp, x):
    """``x`` (..., T, S) with the causally masked entries 0 (not multiplied: a NaN there
    goes too)."""
    t, s = x.shape[-2:]
    return xp.where(_causal_kept(xp, t, s), x, xp.zeros((), dtype=x.dtype))


class _Causal(Op):
    """An attention product with the attribute ``causal`` (see the module's docstring)."""

    attributes = ("causal",)
    family = "products"

    def __init__(self, causal: bool = False):
        super().__init__(causal=params.flag(causal, f"{self.name}: causal"))

    def _mask(self, where, t, s):
        """:func:`cpu_kernels.head_products`' ``mask`` for T queries and S keys."""
        return (where, s - t) if self.causal else (UNMASKED, 0)


def _on_kernels(xp, *arrays) -> bool:
    """May the CPU kernels take the products (host float32 arrays, large enough, kernels
    built)? Each ``*_in_place`` then still returns None for products too large for them."""
    return on_host(xp) and cpu_kernels.products_worth_it(*arrays)


# On the CPU small products read each head where it lies, one product per (batch, head), the
# (batch, kv group) pairs on the pool's threads: no copies into grouped layouts and back
# (cpu_kernels.head_products; strides in elements). None: the grouped matmul is faster.
def _scores_in_place(a, k, mask):
    """(B, T, H, d), (B, S, KV, d) -> (B, H, T, S): item (b, kv, g) is a[b, :, h] @ k[b, :, kv]ᵀ."""
    b, t, h, d = a.shape
    s, kv = k.shape[1], k.shape[2]
    g = h // kv
    out = np.empty((b, h, t, s), np.float32)
    strides = ((t * h * d, g * d, d), (s * kv * d, d, 0), (h * t * s, g * t * s, t * s))
    return cpu_kernels.head_products(
        a, k, out, (b, kv, g), (t, s, d), (False, True), (h * d, kv * d, s), strides, mask
    )


def _mix_in_place(p, v, mask):
    """(B, H, T, S), (B, S, KV, d) -> (B, T, H, d): item (b, kv, g) is p[b, h] @ v[b, :, kv]."""
    b, h, t, s = p.shape
    kv, d = v.shape[2], v.shape[3]
    g = h // kv
    out = np.empty((b, t, h, d), np.float32)
    strides = ((h * t * s, g * t * s, t * s), (s * kv * d, d, 0), (t * h * d, g * d, d))
    return cpu_kernels.head_products(
        p, v, out, (b, kv, g), (t, d, s), (False, False), (s, kv * d, h * d), strides, mask
    )


def _mix_t_in_place(p, a, kv, mask):
    """(B, H, T, S), (B, T, H, d) -> (B, S, KV, d): Σ over the group's heads of p[b, h]ᵀ @
    a[b, :, h] (out's head stride 0: the products add up, heads in order)."""
    b, h, t, s = p.shape
    d = a.shape[3]
    g = h // kv
    out = np.zeros((b, s, kv, d), np.float32)  # zeros: a group of no heads sums to 0
    strides = ((h * t * s, g * t * s, t * s), (t * h * d, g * d, d), (s * kv * d, d, 0))
    return cpu_kernels.head_products(
        p, a, out, (b, kv, g), (s, d, t), (True, False), (s, h * d, kv * d), strides, mask
    )


def _queries_by_group(xp, a, kv):
    """(B, T, H, d) -> (B, KV, G·T, d), contiguous: row g·T + t of group kv is head kv·G + g."""
    b, t, h, d = a.shape
    g = h // kv
    return xp.ascontiguousarray(a.reshape(b, t, kv, g, d).transpose(0, 2, 3, 1, 4)).reshape(
        b, kv, g * t, d
    )


def _heads_back(xp, y, h, t):
    """(B, KV, G·T, d) -> (B, T, H, d)."""
    b, kv, _, d = y.shape
    g = h // kv
    return xp.ascontiguousarray(y.reshape(b, kv, g, t, d).transpose(0, 3, 1, 2, 4)).reshape(
        b, t, h, d
    )


def _kv_major(xp, b):
    """(B, S, KV, d) -> (B, KV, S, d), contiguous."""
    return xp.ascontiguousarray(b.transpose(0, 2, 1, 3))


class HeadScores(_Causal):
    """``s[b, h] = a[b, :, h] @ k[b, :, h // G]ᵀ``: (B, T, H, d), (B, S, KV, d) -> (B, H, T, S);
    causal: 0 at the masked scores."""

    name = "head_scores"
    flop_rows = ("softmax(QKᵀ/√d)",)  # QKᵀ: 2bs²nd of the row (causal_softmax has the rest)

    def infer_shape(self, a, k):
        _check_4d(self.name, queries=a, keys=k)
        if a is None or k is None:
            return None
        _same(self.name, "batch sizes", a[0], k[0])
        _same(self.name, "head sizes", a[3], k[3])
        _groups(a[2], k[2], self.name)
        if self.causal:
            _check_causal(self.name, a[1], k[1])
        return (a[0], a[2], a[1], k[1])

    def compute(self, xp, a, k):
        self.infer_shape(a.shape, k.shape)  # first: the kernels index by it
        b, t, h, _ = a.shape
        s, kv = k.shape[1], k.shape[2]
        if _on_kernels(xp, a, k):
            if (out := _scores_in_place(a, k, self._mask(MASK_ON_RESULT, t, s))) is not None:
                return out
        scores = xp.matmul(_queries_by_group(xp, a, kv), _kv_major(xp, k).swapaxes(-1, -2))
        scores = scores.reshape(b, h, t, s)
        return _kept_only(xp, scores) if self.causal else scores

    def gradient(self, node, g, needs):
        a, k = node.inputs
        c = self.causal
        return [head_mix(g, k, c) if needs[0] else None,
                head_mix_t(g, a, k, c) if needs[1] else None]  # fmt: skip

    def jvp(self, node, da, dk):
        a, k = node.inputs
        c = self.causal
        return tangent_sum(None if da is None else head_scores(da, k, c),
                           None if dk is None else head_scores(a, dk, c))  # fmt: skip

    def flops(self, out_shape, a_shape, k_shape):
        return 2 * math.prod(out_shape) * a_shape[-1]


class HeadMix(_Causal):
    """``y[b, :, h] = p[b, h] @ v[b, :, h // G]``: (B, H, T, S), (B, S, KV, d) -> (B, T, H, d);
    causal: p's masked entries count as 0."""

    name = "head_mix"
    flop_rows = ("PV",)

    def infer_shape(self, p, v):
        _check_4d(self.name, probabilities=p, values=v)
        if p is None or v is None:
            return None
        _same(self.name, "batch sizes", p[0], v[0])
        _same(self.name, "key lengths", p[3], v[1])
        _groups(p[1], v[2], self.name)
        if self.causal:
            _check_causal(self.name, p[2], p[3])
        return (p[0], p[2], p[1], v[3])

    def compute(self, xp, p, v):
        self.infer_shape(p.shape, v.shape)  # first: the kernels index by it
        b, h, t, s = p.shape
        if _on_kernels(xp, p, v):
            if (out := _mix_in_place(p, v, self._mask(MASK_ON_LEFT, t, s))) is not None:
                return out
        kv = v.shape[2]
        p = _kept_only(xp, p) if self.causal else xp.ascontiguousarray(p)
        grouped = p.reshape(b, kv, (h // kv) * t, s)
        return _heads_back(xp, xp.matmul(grouped, _kv_major(xp, v)), h, t)

    def gradient(self, node, g, needs):
        p, v = node.inputs
        c = self.causal
        return [head_scores(g, v, c) if needs[0] else None,
                head_mix_t(p, g, v, c) if needs[1] else None]  # fmt: skip

    def jvp(self, node, dp, dv):
        p, v = node.inputs
        c = self.causal
        return tangent_sum(None if dp is None else head_mix(dp, v, c),
                           None if dv is None else head_mix(p, dv, c))  # fmt: skip

    def flops(self, out_shape, p_shape, v_shape):
        return 2 * math.prod(p_shape) * v_shape[-1]


class HeadMixT(_Causal):
    """``y[b, :, j] = Σ_{h in group j} p[b, h]ᵀ @ a[b, :, h]``: (B, H, T, S), (B, T, H, d)
    -> (B, S, KV, d), shaped like the keys/values ``like`` (it is their adjoint); causal: p's
    masked entries count as 0."""

    name = "head_mix_t"

    def infer_shape(self, p, a, like):
        _check_4d(self.name, probabilities=p, queries=a, like=like)
        if p is None or a is None or like is None:
            return like
        _same(self.name, "batch sizes", p[0], a[0])
        _same(self.name, "query lengths", p[2], a[1])
        _same(self.name, "head counts", p[1], a[2])
        _same(self.name, "key lengths", p[3], like[1])
        _same(self.name, "head sizes", a[3], like[3])
        _groups(p[1], like[2], self.name)
        if self.causal:
            _check_causal(self.name, p[2], p[3])
        return like

    def infer_dtype(self, p, a, like):
        return Op.infer_dtype(self, p, a)

    def compute(self, xp, p, a, like):
        self.infer_shape(p.shape, a.shape, like.shape)  # first: the kernels index by it
        kv = like.shape[2]
        b, h, t, s = p.shape
        if _on_kernels(xp, p, a):
            if (out := _mix_t_in_place(p, a, kv, self._mask(MASK_ON_LEFT, t, s))) is not None:
                return out
        p = _kept_only(xp, p) if self.causal else xp.ascontiguousarray(p)
        grouped = p.reshape(b, kv, (h // kv) * t, s)
        out = xp.matmul(grouped.swapaxes(-1, -2), _queries_by_group(xp, a, kv))  # (B, KV, S, d)
        return xp.ascontiguousarray(out.transpose(0, 2, 1, 3))

    def gradient(self, node, g, needs):
        p, a, _ = node.inputs
        c = self.causal
        return [head_scores(a, g, c) if needs[0] else None,
                head_mix(p, g, c) if needs[1] else None, None]  # fmt: skip

    def jvp(self, node, dp, da, dlike):
        p, a, like = node.inputs
        c = self.causal
        return tangent_sum(None if dp is None else head_mix_t(dp, a, like, c),
                           None if da is None else head_mix_t(p, da, like, c))  # fmt: skip

    def flops(self, out_shape, p_shape, a_shape, like_shape):
        return 2 * math.prod(p_shape) * a_shape[-1]


@lru_cache(maxsize=16)
def _causal_bias(xp, t: int, s: int, dtype):
    """0 where key j may be seen by query i (:func:`_allowed`), −inf elsewhere; made on the
    host and copied to xp's device once per shape."""
    return xp.asarray(np.where(_allowed(t, s), 0.0, -np.inf).astype(dtype))


class CausalSoftmax(Op):
    """``softmax(scale · s + M)`` over the last axis, ``M[i, j] = −∞`` for keys j after
    query i (queries aligned with the last keys). FLOPs: 3 per score."""

    name, flops_per_element = "causal_softmax", Softmax.flops_per_element
    attributes = ("scale",)
    family = "attention softmax"
    flop_rows = ("softmax(QKᵀ/√d)",)  # scale, exp, normalise: 3bs²n of the row

    def __init__(self, scale: float):
        super().__init__(scale=params.real(scale, f"{self.name}: scale"))

    def infer_shape(self, shape):
        if shape is not None and len(shape) < 2:
            raise ValueError(f"causal_softmax needs (..., T, S) scores, got shape {shape}")
        if shape is not None and None not in shape[-2:] and shape[-2] > shape[-1]:
            raise ValueError(f"causal_softmax: {shape[-2]} queries but only {shape[-1]} keys")
        return shape

    def gpu_kernel(self, launch, s):
        """``softmax.cu``'s ``causal_softmax_rows``: one block per row of scores."""
        return launch.causal_softmax(s, self.scale) if s.shape[-2] <= s.shape[-1] else None

    def compute(self, xp, s):
        self.infer_shape(s.shape)  # a shape unknown when built: more queries than keys
        if s.shape[-1] == 0:  # no keys, so no queries: nothing to normalise (nor a max)
            return xp.empty(s.shape, floating(xp, s).dtype)
        out = run_on_gpu(self, xp, s)  # one pass over the scores on a GPU
        if out is not None:
            return out
        if on_host(xp) and cpu_kernels.worth_it(s):  # one pass over the scores
            return cpu_kernels.causal_softmax(s, self.scale)
        return self.on_arrays(xp, s)

    def on_arrays(self, xp, s):
        """The softmax with the array module's operations (any device and dtype)."""
        s = floating(xp, s)  # integers: the scale and the −∞ mask would be cast to them
        x = s * s.dtype.type(self.scale)
        x += _causal_bias(xp, s.shape[-2], s.shape[-1], s.dtype)
        x -= x.max(axis=-1, keepdims=True)
        xp.exp(x, out=x)
        x /= x.sum(axis=-1, keepdims=True)
        return x

    def gradient(self, node, g, needs):
        return [apply(SoftmaxGrad(self.scale), g, node)]

    def jvp(self, node, ds):
        return None if ds is None else apply(SoftmaxGrad(self.scale), ds, node)


class SoftmaxGrad(Op):
    """``scale · p · (g − Σ g·p)`` over the last axis: the adjoint (and tangent) of a scaled
    softmax with output p; linear in g."""

    name, flops_per_element = "softmax_grad", 4
    attributes = ("scale",)

    def __init__(self, scale: float = 1.0):
        super().__init__(scale=params.real(scale, f"{self.name}: scale"))

    def infer_shape(self, g, p):
        _same(self.name, "shapes", g, p)
        return p

    def gpu_kernel(self, launch, g, p):
        """``softmax.cu``'s ``softmax_grad_rows``: one block per row, g and p in registers."""
        return launch.softmax_grad(g, p, self.scale) if g.shape == p.shape else None

    def compute(self, xp, g, p):
        out = run_on_gpu(self, xp, g, p)  # one pass over the scores on a GPU
        if out is not None:
            return out
        if on_host(xp) and cpu_kernels.worth_it(g, p):
            return cpu_kernels.softmax_grad(g, p, self.scale)  # one pass over the scores
        return self.on_arrays(xp, g, p)

    def on_arrays(self, xp, g, p):
        """The adjoint with the array module's operations (any device and dtype)."""
        dot = xp.einsum("...i,...i->...", g, p)[..., None]
        out = g - dot
        out *= p
        if self.scale != 1.0:
            out *= out.dtype.type(self.scale)
        return out

    def gradient(self, node, u, needs):
        g, p = node.inputs
        c = self.scale
        # d/dg: the same (linear) map; d/dp_k: c·u_k·(g_k − Σ g·p) − c·g_k·Σ u·p
        along_g = apply(self, u, p) if needs[0] else None
        if not needs[1]:
            return [along_g, None]
        centred = sub(g, sum(mul(g, p), -1, True))
        return [along_g, mul(c, sub(mul(u, centred), mul(g, sum(mul(u, p), -1, True))))]

    def jvp(self, node, dg, dp):
        g, p = node.inputs
        c = self.scale
        along_p = None
        if dp is not None:  # c·dp·(g − Σ g·p) − c·p·Σ g·dp
            centred = sub(g, sum(mul(g, p), -1, True))
            along_p = mul(c, sub(mul(dp, centred), mul(p, sum(mul(g, dp), -1, True))))
        return tangent_sum(None if dg is None else apply(self, dg, p), along_p)


def head_scores(a, k, causal: bool = False) -> Node:
    """Every query head against its kv head: (B, T, H, d), (B, S, KV, d) -> (B, H, T, S);
    ``causal``: the masked scores (key j after query i) are 0."""
    return apply(HeadScores(causal), a, k)


def head_mix(p, v, causal: bool = False) -> Node:
    """Each head's probabilities times its kv head's values: -> (B, T, H, d); ``causal``:
    the masked probabilities count as 0."""
    return apply(HeadMix(causal), p, v)


def head_mix_t(p, a, like, causal: bool = False) -> Node:
    """``Σ_{h in group} p_hᵀ a_h``, shaped like the keys/values ``like`` (B, S, KV, d);
    ``causal``: the masked entries of p count as 0."""
    return apply(HeadMixT(causal), p, a, like)


def causal_softmax(scores, scale: float = 1.0) -> Node:
    """``softmax(scale · scores)`` over the last axis with future keys masked out."""
    return apply(CausalSoftmax(scale), scores)


def causal_attention(q, k, v, scale: float | None = None) -> tuple[Node, Node]:
    """Causal grouped-query attention: q (B, T, H, d), k and v (B, S, KV, d).

    Returns ``(output (B, T, H, d), probabilities (B, H, T, S))``; ``scale`` defaults to
    ``d ** -0.5``. The products are the causal ones: neither they nor their adjoints compute
    the masked half of the scores. k and v have the same number of kv heads (where the
    graph knows both: else a :class:`ShapeError`).
    """
    kv_k, kv_v = (None if s is None or len(s) != 4 else s[2] for s in (k.shape, v.shape))
    if None not in (kv_k, kv_v) and kv_k != kv_v:  # each product would group the heads anew
        raise ShapeError(f"causal_attention: k has {kv_k} kv heads but v has {kv_v} "
                         f"({describe_shapes((k, v))})")  # fmt: skip
    if scale is None:
        if q.shape is None or q.shape[-1] is None:
            raise ShapeError(
                f"causal_attention: pass scale= when the head size of {q.name} is unknown"
            )
        scale = q.shape[-1] ** -0.5
    probs = causal_softmax(head_scores(q, k, causal=True), scale)
    return head_mix(probs, v, causal=True), probs
