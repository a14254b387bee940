"""One table of ops for the derivative tests: how to build each op, its input domain,
and (for the oracle tests) the PyTorch function that computes the same thing.

The one-input elementwise ops are also found in the library itself (:data:`UNARY_OPS`, from
the ``Unary`` classes), so an op added there reaches every test that enumerates them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import course_lib as cl
from course_lib.graph import apply
from course_lib.kernels.reference import rope_tables
from course_lib.ops.attention import SoftmaxGrad
from course_lib.ops.elementwise import SiluGrad, Unary


@dataclass
class OpSpec:
    name: str
    build: object  # nodes -> node
    arity: int = 1
    domain: str = "any"  # "any" | "positive" | "away0"
    broadcast: bool = False  # binary ops whose inputs broadcast
    torch: object = None  # torch tensors -> tensor
    shape_kind: str = "any"  # "any" | "matrix" | "concat" | ...
    extra: dict = field(default_factory=dict)


def _t():
    import torch

    return torch


def _rope_torch(x, seq_axis, start=0):
    """Hugging Face's ``x·cos + rotate_half(x)·sin`` with positions ``start, start + 1, ...``
    along ``seq_axis``, the tables rounded as course_lib's (float64 for float64 x)."""
    torch = _t()
    t, d = x.shape[seq_axis], x.shape[-1]
    dtype = np.float64 if x.dtype == torch.float64 else np.float32
    tables = (a[start:] for a in rope_tables(start + t, d, dtype=dtype))
    cos, sin = (torch.tensor(np.concatenate([a, a], -1), dtype=x.dtype) for a in tables)
    shape = (t,) + (1,) * (x.dim() - seq_axis % x.dim() - 2) + (d,)
    rotated = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos.reshape(shape) + rotated * sin.reshape(shape)


def _repeat_kv(k, heads):
    return k.repeat_interleave(heads // k.shape[2], dim=2)


def _allowed(t, n):
    """Attention's causal mask: query i sees key j when j <= i + n - t."""
    return _t().ones(t, n, dtype=_t().bool).tril(n - t)


def _kept(x):
    """``x`` (..., T, S) with the masked entries 0 (the causal products' operand)."""
    return x.masked_fill(~_allowed(*x.shape[-2:]), 0.0)


def _causal_softmax_torch(s, scale):
    allowed = _allowed(*s.shape[-2:])
    return (s * scale).masked_fill(~allowed, float("-inf")).softmax(-1)


def _head_scores_torch(a, k):
    return _t().einsum("bthd,bshd->bhts", a, _repeat_kv(k, a.shape[2]))


def _head_mix_torch(p, v):
    return _t().einsum("bhts,bshd->bthd", p, _repeat_kv(v, p.shape[1]))


def _attention_torch(q, k, v):
    probs = _causal_softmax_torch(_head_scores_torch(q, k), q.shape[-1] ** -0.5)
    return _head_mix_torch(probs, v)


def _head_mix_t_torch(p, a, like):
    b, s, kv, d = like.shape
    out = _t().einsum("bhts,bthd->bshd", p, a)
    return out.reshape(b, s, kv, -1, d).sum(3)


def _fixed(*shape_lists):
    return {"shapes": list(shape_lists)}


TRANSFORMER_SPECS = [
    OpSpec(
        "rms_norm",
        lambda x, w: cl.rms_norm(x, w, 1e-5),
        2,
        torch=lambda x, w: w * x * ((x * x).mean(-1, keepdim=True) + 1e-5).rsqrt(),
        shape_kind="fixed",
        extra=_fixed([(5,), (5,)], [(3, 4), (4,)], [(2, 3, 6), (6,)]),
    ),
    OpSpec(
        "layer_norm",
        lambda x, w, b: cl.layer_norm(x, w, b, 1e-5),
        3,
        torch=lambda x, w, b: _t().nn.functional.layer_norm(x, w.shape, w, b, 1e-5),
        shape_kind="fixed",
        extra=_fixed([(3, 4), (4,), (4,)], [(2, 3, 5), (5,), (5,)]),
    ),
    OpSpec(
        "rope",
        lambda x: cl.rope(x, seq_axis=-2),
        torch=lambda x: _rope_torch(x, -2),
        shape_kind="fixed",
        extra=_fixed([(3, 4)], [(2, 5, 6)]),
    ),
    OpSpec(
        "rope_bthd",
        lambda x: cl.rope(x, seq_axis=1),
        torch=lambda x: _rope_torch(x, 1),
        shape_kind="fixed",
        extra=_fixed([(2, 3, 2, 4)], [(1, 4, 3, 2)]),
    ),
    OpSpec(
        "rope_after_cached_positions",
        lambda x: cl.rope(x, seq_axis=1, start=5),
        torch=lambda x: _rope_torch(x, 1, start=5),
        shape_kind="fixed",
        extra=_fixed([(2, 1, 2, 4)], [(1, 3, 3, 6)]),
    ),
    OpSpec(
        "head_scores",
        cl.head_scores,
        2,
        torch=_head_scores_torch,
        shape_kind="fixed",
        extra=_fixed([(2, 3, 4, 2), (2, 5, 2, 2)], [(1, 2, 2, 3), (1, 2, 2, 3)]),
    ),
    OpSpec(
        "head_mix",
        cl.head_mix,
        2,
        torch=_head_mix_torch,
        shape_kind="fixed",
        extra=_fixed([(2, 4, 3, 5), (2, 5, 2, 2)], [(1, 3, 2, 2), (1, 2, 1, 3)]),
    ),
    OpSpec(
        "head_mix_t",
        cl.head_mix_t,
        3,
        torch=_head_mix_t_torch,
        shape_kind="fixed",
        extra=_fixed(
            [(2, 4, 3, 5), (2, 3, 4, 2), (2, 5, 2, 2)], [(1, 3, 2, 2), (1, 2, 3, 3), (1, 2, 3, 3)]
        ),
    ),
    # the causal products: attention's mask on the (B, H, T, S) operand, T <= S
    OpSpec(
        "head_scores_causal",
        lambda a, k: cl.head_scores(a, k, causal=True),
        2,
        torch=lambda a, k: _kept(_head_scores_torch(a, k)),
        shape_kind="fixed",
        extra=_fixed([(2, 3, 4, 2), (2, 5, 2, 2)], [(1, 4, 2, 3), (1, 4, 2, 3)]),
    ),
    OpSpec(
        "head_mix_causal",
        lambda p, v: cl.head_mix(p, v, causal=True),
        2,
        torch=lambda p, v: _head_mix_torch(_kept(p), v),
        shape_kind="fixed",
        extra=_fixed([(2, 4, 3, 5), (2, 5, 2, 2)], [(1, 3, 4, 4), (1, 4, 1, 3)]),
    ),
    OpSpec(
        "head_mix_t_causal",
        lambda p, a, like: cl.head_mix_t(p, a, like, causal=True),
        3,
        torch=lambda p, a, like: _head_mix_t_torch(_kept(p), a, like),
        shape_kind="fixed",
        extra=_fixed(
            [(2, 4, 3, 5), (2, 3, 4, 2), (2, 5, 2, 2)], [(1, 3, 4, 4), (1, 4, 3, 3), (1, 4, 3, 3)]
        ),
    ),
    OpSpec(
        "causal_softmax",
        lambda s: cl.causal_softmax(s, 0.5),
        torch=lambda s: _causal_softmax_torch(s, 0.5),
        shape_kind="fixed",
        extra=_fixed([(4, 4)], [(2, 3, 5)], [(1, 2, 3, 3)]),
    ),
    OpSpec(
        "softmax_grad",
        lambda g, p: apply(SoftmaxGrad(0.5), g, p),
        2,
        torch=lambda g, p: 0.5 * p * (g - (g * p).sum(-1, keepdim=True)),
        shape_kind="fixed",
        extra=_fixed([(3, 4), (3, 4)], [(2, 2, 5), (2, 2, 5)]),
    ),
    OpSpec(
        "causal_attention",
        lambda q, k, v: cl.causal_attention(q, k, v)[0],
        3,
        torch=_attention_torch,
        shape_kind="fixed",
        extra=_fixed(
            [(2, 4, 4, 2), (2, 4, 2, 2), (2, 4, 2, 2)],  # grouped-query
            [(1, 3, 2, 4), (1, 3, 2, 4), (1, 3, 2, 4)],  # multi-head
            [(1, 2, 3, 2), (1, 3, 1, 2), (1, 3, 1, 2)],  # multi-query, 2 queries over 3 keys
        ),
    ),
]


SPECS = [
    OpSpec("add", lambda x, y: x + y, 2, broadcast=True, torch=lambda x, y: x + y),
    OpSpec("sub", lambda x, y: x - y, 2, broadcast=True, torch=lambda x, y: x - y),
    OpSpec("mul", lambda x, y: x * y, 2, broadcast=True, torch=lambda x, y: x * y),
    OpSpec("div", lambda x, y: x / y, 2, "away0", broadcast=True, torch=lambda x, y: x / y),
    OpSpec("maximum", cl.maximum, 2, broadcast=True, torch=lambda x, y: _t().maximum(x, y)),
    OpSpec("neg", lambda x: -x, torch=lambda x: -x),
    OpSpec("pow3", lambda x: x**3, torch=lambda x: x**3),
    OpSpec("pow_half", lambda x: x**0.5, domain="positive", torch=lambda x: x**0.5),
    OpSpec("exp", cl.exp, torch=lambda x: x.exp()),
    OpSpec("log", cl.log, domain="positive", torch=lambda x: x.log()),
    OpSpec("sin", cl.sin, torch=lambda x: x.sin()),
    OpSpec("cos", cl.cos, torch=lambda x: x.cos()),
    OpSpec("tanh", cl.tanh, torch=lambda x: x.tanh()),
    OpSpec("sigmoid", cl.sigmoid, torch=lambda x: x.sigmoid()),
    OpSpec("relu", cl.relu, domain="away0", torch=lambda x: x.relu()),
    OpSpec("silu", cl.silu, torch=lambda x: _t().nn.functional.silu(x)),
    OpSpec(
        "silu_grad",
        lambda g, x: apply(SiluGrad(), g, x),
        2,
        broadcast=True,
        torch=lambda g, x: g * (x.sigmoid() * (1 + x * (1 - x.sigmoid()))),
    ),
    OpSpec("sqrt", cl.sqrt, domain="positive", torch=lambda x: x.sqrt()),
    OpSpec("rsqrt", cl.rsqrt, domain="positive", torch=lambda x: x.rsqrt()),
    OpSpec(
        "where",
        lambda x, y: cl.where(x > 0.1, x, y),
        2,
        "away0",
        broadcast=True,
        torch=lambda x, y: _t().where(x > 0.1, x, y),
    ),
    OpSpec("sum_all", lambda x: cl.sum(x), torch=lambda x: x.sum()),
    OpSpec("sum_ax0", lambda x: cl.sum(x, 0), torch=lambda x: x.sum(0)),
    OpSpec("sum_last_keep", lambda x: cl.sum(x, -1, True), torch=lambda x: x.sum(-1, keepdim=True)),
    OpSpec("mean_ax0_keep", lambda x: cl.mean(x, 0, True), torch=lambda x: x.mean(0, keepdim=True)),
    OpSpec("mean_all", lambda x: cl.mean(x), torch=lambda x: x.mean()),
    OpSpec("max_last", lambda x: cl.max(x, -1), torch=lambda x: x.amax(-1)),
    OpSpec(
        "max_all_keep",
        lambda x: cl.max(x, None, True),
        torch=lambda x: x.amax(dim=tuple(range(x.dim())), keepdim=True),
    ),
    OpSpec("logsumexp_last", lambda x: cl.logsumexp(x, -1), torch=lambda x: x.logsumexp(-1)),
    OpSpec(
        "logsumexp_0_keep",
        lambda x: cl.logsumexp(x, 0, True),
        torch=lambda x: x.logsumexp(0, keepdim=True),
    ),
    OpSpec("reshape_flat", lambda x: cl.reshape(x, (-1,)), torch=lambda x: x.reshape(-1)),
    OpSpec(
        "transpose", lambda x: cl.transpose(x), torch=lambda x: x.permute(*reversed(range(x.dim())))
    ),
    OpSpec(
        "permute_roll",
        lambda x: cl.permute(x, *np.roll(np.arange(x.ndim), 1).tolist()),
        torch=lambda x: x.permute(*np.roll(np.arange(x.dim()), 1).tolist()),
    ),
    OpSpec(
        "take_rows",
        lambda x: cl.take(x, np.array([0, x.shape[0] - 1, 0])),
        torch=lambda x: x[[0, x.shape[0] - 1, 0]],
    ),
    OpSpec(
        "broadcast_to",
        lambda x: cl.broadcast_to(x, (2,) + x.shape),
        torch=lambda x: x.expand((2,) + tuple(x.shape)),
    ),
    OpSpec("getitem", lambda x: x[::-1], torch=lambda x: x.flip(0)),
    OpSpec("getitem_fancy", lambda x: x[np.array([0, 0, -1])], torch=lambda x: x[[0, 0, -1]]),
    OpSpec(
        "concat",
        lambda x, y: cl.concat([x, y, x], axis=0),
        2,
        torch=lambda x, y: _t().cat([x, y, x], 0),
    ),
    OpSpec(
        "split",
        lambda x: cl.split(x, [1, x.shape[0] - 1])[1] * 2.0,
        torch=lambda x: x[1:] * 2.0,
        shape_kind="rows2",
    ),
    OpSpec("matmul", lambda x, y: x @ y, 2, torch=lambda x, y: x @ y, shape_kind="matrix"),
    OpSpec("softmax", lambda x: cl.softmax(x, -1), torch=lambda x: x.softmax(-1)),
    OpSpec("log_softmax", lambda x: cl.log_softmax(x, 0), torch=lambda x: x.log_softmax(0)),
    *TRANSFORMER_SPECS,
]

SPEC_BY_NAME = {s.name: s for s in SPECS}


def sample(spec: OpSpec, rng: np.random.Generator, shapes: list) -> list:
    """Input arrays of ``shapes`` in the domain of ``spec`` (away from kinks and poles)."""
    arrays = []
    for s in shapes:
        a = rng.standard_normal(s)
        if spec.domain == "positive":
            a = np.abs(a) + 0.5
        elif spec.domain == "away0":
            a = np.where(np.abs(a) < 0.2, 0.5, a)
        arrays.append(a)
    if spec.name == "maximum":  # keep x and y apart so the kink is never within eps
        big = 0 if np.broadcast_shapes(*shapes) == tuple(shapes[0]) else 1
        sign = np.where(rng.random(shapes[big]) < 0.5, 0.3, -0.3)
        arrays[big] = np.broadcast_to(arrays[1 - big], shapes[big]) + sign
    return arrays


def subclasses(cls: type) -> list[type]:
    """Every subclass of ``cls`` defined so far, at any depth."""
    found, stack = [], [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            found.append(sub)
            stack.append(sub)
    return found


#: The library's one-input elementwise ops, name -> public function: every ``Unary`` op
#: without attributes (``Power`` has its exponent), exported by ``course_lib.ops`` under its
#: name (``tests/test_op_declarations.py`` checks each is exported and has an OpSpec).
UNARY_OPS = {
    cls.name: getattr(cl.ops, cls.name, None)
    for cls in subclasses(Unary)
    if not cls.attributes and cls.__module__.startswith("course_lib.ops.")
}
#: Their rows of :data:`SPECS`, in the library's order.
UNARY_SPECS = [SPEC_BY_NAME[name] for name in UNARY_OPS if name in SPEC_BY_NAME]


def on_any_real(spec: OpSpec):
    """``spec``'s one-input op as a function of any real x, applied to x squashed into a
    bounded part of its domain (``tanh(x)``; ``sigmoid(x) + 0.5`` for ops that need positive
    inputs), so a chain of any of them stays finite and warns of nothing."""
    if spec.domain == "positive":
        return lambda x: spec.build(cl.sigmoid(x) + 0.5)
    return lambda x: spec.build(cl.tanh(x))
