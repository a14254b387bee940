"""Notebook 08: RMSNorm and causal attention written with course_lib ops.

Both are checked on values and gradients against the library's own ops (``cl.rms_norm``,
``cl.causal_softmax``) on random shapes, including inputs small enough for ε to matter.
"""

from __future__ import annotations

import numpy as np

from .. import (
    GraphError,
    Node,
    ShapeError,
    causal_softmax,
    constant,
    evaluate,
    grad,
    matrix_transpose,
    rms_norm,
    to_numpy,
    topological_order,
    variable,
)
from .. import sum as total
from .core import Mistake, Wrong, call, close, exercise, first_match, mismatch, require

EPS_OUTSIDE = Mistake(
    "eps-outside",
    "ε is added outside the root, as on the slide; LLaMA (and the weights trained with it) put "
    "it inside: x / sqrt(mean(x²) + ε).",
)
MEAN_OVER_ALL = Mistake(
    "mean-over-all",
    "the mean runs over every element; RMSNorm normalises each row (token) on its own: "
    "mean over the last axis, axis=-1.",
)
NO_WEIGHT = Mistake("no-weight", "multiply by the learned weight γ (weight) at the end.")
SUM_NOT_MEAN = Mistake(
    "sum-not-mean",
    "that divides by sqrt(sum(x²)), the norm, not the root MEAN square: use cl.mean.",
)
NUMPY_ON_NODES = Mistake(
    "numpy-on-nodes",
    "NumPy functions cannot compute on nodes (there are no values yet): use course_lib's "
    "cl.mean, cl.sqrt or cl.rsqrt.",
)
NO_KEEPDIMS = Mistake(
    "no-keepdims",
    "the mean over the last axis drops that axis, so it no longer lines up with x: "
    "cl.mean(..., axis=-1, keepdims=True).",
)
USES_THE_OP = Mistake(
    "uses-rms-norm",
    "this builds cl.rms_norm, the op you are asked to write: build it from mean, sqrt or rsqrt, "
    "and products.",
)


def _ops_in(out) -> set[str]:
    """The names of the ops the answer's graph is built from (how a library op is found,
    whichever function built it)."""
    return {n.op.name for n in topological_order(out)} if isinstance(out, Node) else set()


def _numpy_rms(x, w, eps, axis=-1, outside=False, reduce=np.mean):
    square = reduce(x * x, axis=axis, keepdims=True)
    return x / (np.sqrt(square) + eps if outside else np.sqrt(square + eps)) * w


def _rms_mistake(got, x, w, eps: float) -> Mistake | None:
    wrong = [
        (EPS_OUTSIDE, lambda: _numpy_rms(x, w, eps, outside=True)),
        (MEAN_OVER_ALL, lambda: _numpy_rms(x, w, eps, axis=None)),
        (NO_WEIGHT, lambda: _numpy_rms(x, 1.0, eps)),
        (SUM_NOT_MEAN, lambda: _numpy_rms(x, w, eps, reduce=np.sum)),
    ]
    return first_match(got, wrong, lambda a, b: close(a, b, rtol=1e-6))


def _values_and_grads(outputs: Node, inputs: list, feed: dict, seed) -> list[np.ndarray]:
    """The values of ``outputs`` and its gradients, brought to the host to be compared."""
    values = evaluate([outputs, *grad(total(outputs * constant(seed)), inputs)], feed)
    return [to_numpy(value) for value in values]


def _compare(label: str, out, reference: Node, inputs: list, feed: dict, mistake_of) -> None:
    """The answer's node against ``reference``: its values, then its gradients with respect to
    ``inputs`` (of the sum of the output times random numbers)."""
    require(
        isinstance(out, Node),
        f"{label} returned {type(out).__name__}; it must return a node built from cl ops",
    )
    seed = np.random.default_rng(len(label)).standard_normal(reference.shape)
    got = call(f"evaluating {label}", _values_and_grads, out, inputs, feed, seed)
    want = _values_and_grads(reference, inputs, feed, seed)
    if not close(got[0], want[0], rtol=1e-6, atol=1e-10):
        raise Wrong(f"{label} {mismatch(got[0], want[0])}", mistake_of(got[0]))
    for node, g, h in zip(inputs, got[1:], want[1:]):
        require(
            close(g, h, rtol=1e-6, atol=1e-10),
            f"{label}: the gradient with respect to {node.name} {mismatch(g, h)}",
        )


@exercise(
    "08.rmsnorm", "rmsnorm(x, weight, eps) -> Node: x / sqrt(mean(x², last axis) + eps) * weight",
    mistakes=(
        EPS_OUTSIDE, MEAN_OVER_ALL, NO_WEIGHT, SUM_NOT_MEAN, NUMPY_ON_NODES, NO_KEEPDIMS,
        USES_THE_OP,
    ),
)
def check_rmsnorm(answer) -> str:
    rng = np.random.default_rng(80)
    cases = [
        ((4, 8), 1e-5, 1.0),
        ((2, 3, 16), 1e-6, 1.0),
        ((6,), 1e-5, 1.0),
        ((1, 1), 1e-5, 1.0),
        ((3, 5), 1e-5, 1e-3),
        ((5, 4), 0.1, 1e3),
    ]
    errors = [
        (GraphError, "cannot compute on node", NUMPY_ON_NODES),
        (ShapeError, "broadcast", NO_KEEPDIMS),
    ]
    for shape, eps, scale in cases:
        x, w = variable("x", shape, np.float64), variable("weight", shape[-1:], np.float64)
        label = f"rmsnorm(x, weight, {eps:g}) for x of shape {shape}"
        out = call(label, answer, x, w, eps, errors=errors)
        require("rms_norm" not in _ops_in(out), f"{label} uses cl.rms_norm", USES_THE_OP)
        feed = {x: scale * rng.standard_normal(shape), w: rng.standard_normal(shape[-1:])}
        mistake_of = lambda got: _rms_mistake(got, feed[x], feed[w], eps)  # noqa: E731, B023
        _compare(f"{label} at |x| ~ {scale:g}", out, rms_norm(x, w, eps), [x, w], feed, mistake_of)
    return (
        f"right values and gradients (x and weight) on {len(cases)} inputs: 1-D to 3-D, one "
        "element, |x| ~ 1e-3 where ε matters, large ε"
    )


# -- attention --------------------------------------------------------------------------------
NO_SCALE = Mistake(
    "no-scale", "divide the scores by sqrt(d), d the size of a query: softmax(q kᵀ / √d)."
)
SCALE_BY_D = Mistake("scale-by-d", "the scale is 1/sqrt(d), not 1/d.")
NO_MASK = Mistake(
    "no-mask",
    "position i sees later positions j > i (the tokens it has to predict): mask them with -inf "
    "before the softmax, or use cl.causal_softmax(scores, scale).",
)
MASK_TRANSPOSED = Mistake(
    "mask-transposed",
    "the mask hides the past instead of the future: row i (a query) may use columns j <= i.",
)
USES_ATTENTION = Mistake(
    "uses-attention",
    "this builds the library's attention (cl.causal_attention: its head_scores and head_mix "
    "ops): write it from matmul, matrix_transpose and a masked softmax.",
)
_ATTENTION_OPS = {"head_scores", "head_mix"}
SOFTMAX_AXIS = Mistake(
    "softmax-axis",
    "the softmax runs down the columns; each query's weights (a row, the last axis) must sum to 1.",
)


def _numpy_attention(q, k, v, scale, mask="future", axis=-1):
    scores = q @ k.T * scale
    t = np.arange(len(q))
    if mask:
        hidden = t[None, :] > t[:, None] if mask == "future" else t[None, :] < t[:, None]
        scores = np.where(hidden, -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return weights / weights.sum(axis=axis, keepdims=True) @ v


def _attention_mistake(got, q, k, v) -> Mistake | None:
    d = q.shape[1]
    wrong = [
        (NO_SCALE, lambda: _numpy_attention(q, k, v, 1.0)),
        (SCALE_BY_D, lambda: _numpy_attention(q, k, v, 1.0 / d)),
        (NO_MASK, lambda: _numpy_attention(q, k, v, d**-0.5, mask=None)),
        (MASK_TRANSPOSED, lambda: _numpy_attention(q, k, v, d**-0.5, mask="past")),
        (SOFTMAX_AXIS, lambda: _numpy_attention(q, k, v, d**-0.5, axis=0)),
    ]
    return first_match(got, wrong, lambda a, b: close(a, b, rtol=1e-6))


@exercise(
    "08.attention", "attention(q, k, v) -> Node: one causal head, softmax(q kᵀ/√d + mask) v",
    mistakes=(NO_SCALE, SCALE_BY_D, NO_MASK, MASK_TRANSPOSED, SOFTMAX_AXIS, USES_ATTENTION),
    forbidden=("course_lib.ops.attention.causal_attention",
               "course_lib.models.layers.self_attention"),  # fmt: skip
)
def check_attention(answer) -> str:
    rng = np.random.default_rng(81)
    sizes = [(5, 8), (1, 4), (7, 2), (16, 16), (3, 1)]
    for t, d in sizes:
        q, k, v = (variable(name, (t, d), np.float64) for name in "qkv")
        label = f"attention(q, k, v) for {t} positions and head size {d}"
        out = call(label, answer, q, k, v)
        require(not _ops_in(out) & _ATTENTION_OPS, f"{label} is built from head_scores/head_mix",
                USES_ATTENTION)  # fmt: skip
        feed = {node: 2 * rng.standard_normal((t, d)) for node in (q, k, v)}
        reference = causal_softmax(q @ matrix_transpose(k), d**-0.5) @ v
        mistake_of = lambda got: _attention_mistake(got, feed[q], feed[k], feed[v])  # noqa: E731, B023
        _compare(label, out, reference, [q, k, v], feed, mistake_of)
    return (
        f"right values and gradients (q, k and v) for {len(sizes)} sizes, one position and "
        "head size 1 too"
    )
