"""Notebook 08: RMSNorm and causal attention written with course_lib ops; a decoding step
with a KV cache written in NumPy.

The first two are checked on values and gradients against the library's own ops
(``cl.rms_norm``, ``cl.causal_softmax``) on random shapes, including inputs small enough for ε
to matter. ``08.decode_step`` is run step after step on its own returned cache and compared
with full causal attention of the whole sequence (``cl.rope`` and ``cl.causal_attention``).
"""

from __future__ import annotations

import numpy as np

from .. import (
    GraphError,
    Node,
    ShapeError,
    causal_attention,
    causal_softmax,
    constant,
    evaluate,
    grad,
    matrix_transpose,
    rms_norm,
    rope,
    to_numpy,
    topological_order,
    variable,
)
from .. import sum as total
from .core import (
    CHANGED_INPUT,
    Mistake,
    Wrong,
    call,
    close,
    exercise,
    first_match,
    mismatch,
    require,
)

EPS_OUTSIDE = Mistake(
    "eps-outside",
    "ε is added outside the root, as on the slide; LLaMA (and the weights trained with it) put "
    "it inside: x / sqrt(mean(x²) + ε).",
)
NO_EPS = Mistake(
    "no-eps",
    "ε is missing: add it inside the square root, sqrt(mean(x²) + eps) (a row of zeros would "
    "divide by zero without it).",
)
MEAN_OVER_ALL = Mistake(
    "mean-over-all",
    "the mean runs over every element; RMSNorm normalises each row (token) on its own: "
    "mean over the last axis, axis=-1.",
)
MEAN_DOWN_THE_BATCH = Mistake(
    "mean-over-axis-0",
    "the mean runs down axis 0, across the tokens, so each token is scaled by the others: "
    "RMSNorm averages the features of each token on its own, over the LAST axis: "
    "cl.mean(x * x, axis=-1, keepdims=True).",
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
        (NO_EPS, lambda: _numpy_rms(x, w, 0.0)),
        (MEAN_OVER_ALL, lambda: _numpy_rms(x, w, eps, axis=None)),
        (MEAN_DOWN_THE_BATCH, lambda: _numpy_rms(x, w, eps, axis=0)),
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
        EPS_OUTSIDE, NO_EPS, MEAN_OVER_ALL, MEAN_DOWN_THE_BATCH, NO_WEIGHT, SUM_NOT_MEAN,
        NUMPY_ON_NODES, NO_KEEPDIMS, USES_THE_OP,
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
MASKS_DIAGONAL = Mistake(
    "masks-the-diagonal",
    "the mask also hides each position from itself (j == i), so row 0 has nothing left and its "
    "softmax is 0/0: hide only j > i, np.triu(..., k=1).",
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


def _numpy_attention(q, k, v, scale, mask="future", axis=-1, masked=-np.inf, after=False):
    """``after``: the mask multiplies the softmax's probabilities (no renormalising); else
    the masked scores become ``masked``."""
    scores = q @ k.T * scale
    t = np.arange(len(q))
    hidden = {"future": t[None, :] > t[:, None], "past": t[None, :] < t[:, None],
              "diagonal": t[None, :] >= t[:, None], "after next": t[None, :] > t[:, None] + 1,
              None: np.zeros((len(q), len(k)), bool)}[mask]  # fmt: skip
    if not after:
        scores = np.where(hidden, masked, scores)
    weights = np.exp(scores - scores.max(axis=axis, keepdims=True))
    weights = weights / weights.sum(axis=axis, keepdims=True)
    return (np.where(hidden, 0.0, weights) if after else weights) @ v


def _attention_mistake(got, q, k, v) -> Mistake | None:
    t, d = q.shape
    s = d**-0.5
    wrong = [
        (NO_SCALE, lambda: _numpy_attention(q, k, v, 1.0)),
        (NO_SCALE, lambda: _numpy_attention(q, k, v, t**-0.5)),  # √T: q.shape[0], not [1]
        (NO_SCALE, lambda: _numpy_attention(q, k, v, d**0.5)),  # multiplied by √d
        (SCALE_BY_D, lambda: _numpy_attention(q, k, v, 1.0 / d)),
        (NO_MASK, lambda: _numpy_attention(q, k, v, s, mask=None)),
        (NO_MASK, lambda: _numpy_attention(q, k, v, s, masked=0.0)),  # scores * tril: 0, not −∞
        (NO_MASK, lambda: _numpy_attention(q, k, v, s, after=True)),  # probabilities * tril
        (NO_MASK, lambda: _numpy_attention(q, k, v, s, mask="after next")),  # np.triu(k=2)
        (MASK_TRANSPOSED, lambda: _numpy_attention(q, k, v, s, mask="past")),
        (MASKS_DIAGONAL, lambda: _numpy_attention(q, k, v, s, mask="diagonal")),
        (SOFTMAX_AXIS, lambda: _numpy_attention(q, k, v, s, axis=0)),
    ]
    return first_match(got, wrong, lambda a, b: close(a, b, rtol=1e-6))


@exercise(
    "08.attention", "attention(q, k, v) -> Node: one causal head, softmax(q kᵀ/√d + mask) v",
    mistakes=(NO_SCALE, SCALE_BY_D, NO_MASK, MASK_TRANSPOSED, MASKS_DIAGONAL, SOFTMAX_AXIS,
              USES_ATTENTION),
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


# -- decode_step ------------------------------------------------------------------------------
ROPE_THETA = 10000.0

ROPE_AT_ZERO = Mistake(
    "rope-at-zero",
    "the new token's query and key are rotated by RoPE at the token's position (the "
    "`position` argument), not left as they are (which is rotating them at position 0).",
)
POSITION_FROM_LENGTH = Mistake(
    "position-from-cache-length",
    "the token's position is the `position` argument: it equals the cache's length only when "
    "the cached tokens started at position 0.",
)
UNROTATED_IN_CACHE = Mistake(
    "unrotated-in-cache",
    "the cache holds keys already rotated at their positions (that is why it never needs "
    "them again): append the rotated key, not the raw one.",
)
CACHE_ROTATED_TWICE = Mistake(
    "cache-rotated-twice",
    "the cached keys are already rotated at their positions: rotate only the new token's q "
    "and k, not the keys in the cache again.",
)
GQA_INTERLEAVED = Mistake(
    "gqa-interleaved",
    "query heads share K/V heads in consecutive groups: head h reads K/V head h // (H / KV) "
    "(np.repeat along the head axis), not h % KV (np.tile).",
)
MASKS_OWN_TOKEN = Mistake(
    "masks-own-token",
    "the new token attends to the cached tokens AND to itself (a causal mask hides only later "
    "positions): append its key and value before the attention.",
)
DECODE_SCALE_BY_D = Mistake("scale-by-d", "the scores are scaled by 1/sqrt(d), not 1/d.")
DECODE_NO_SCALE = Mistake(
    "no-scale",
    "divide the scores by sqrt(d), d the head size: softmax(q·kᵀ/√d) over the cached keys and "
    "the new one, as section 6's attention does.",
)
CACHE_WRONG_AXIS = Mistake(
    "cache-grows-wrong-axis",
    "the cache is (positions, KV heads, head size): a new token adds a row along axis 0, "
    "np.concatenate([keys, k[None]], axis=0).",
)
CACHE_REPEATS_HEADS = Mistake(
    "cache-repeats-heads",
    "cache the KV heads, not their copies for every query head: grouped-query attention "
    "exists to make the cache H / KV times smaller; repeat (or index) only to compute.",
)
CACHE_UPCAST = Mistake(
    "cache-upcast",
    "the cache keeps the dtype of k and v: float32 inputs make a float32 cache (half the bytes "
    "of float64). cos and sin of float64 angles turn float32 keys into float64: cast them.",
)


def _rotate(x: np.ndarray, position: int, interleaved: bool = False) -> np.ndarray:
    """RoPE, half-split, of the vectors along x's last axis, all at ``position`` (float64);
    ``interleaved``: the pairs (x[2i], x[2i+1]) instead (a mistake)."""
    half = x.shape[-1] // 2
    angle = position * ROPE_THETA ** (-np.arange(half) / half)
    cos, sin = np.cos(angle), np.sin(angle)
    if interleaved:
        pairs = x.reshape(*x.shape[:-1], half, 2)
        first, second = pairs[..., 0], pairs[..., 1]
        return np.stack([first * cos - second * sin, second * cos + first * sin], axis=-1
                        ).reshape(x.shape)  # fmt: skip
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def _attend(keys, values, q, k, v, position, *, rope_at="position",
                        kv_heads="repeat", own=True, scale_by_d=False, unscaled=False,
                        rotate_cache=False, rotate_k=True) -> np.ndarray:  # fmt: skip
    """The decoding step's output, from the right cache (rotated keys, values), with one
    mistake switched on: where RoPE puts the new token (``"position"``, ``"zero"``,
    ``"length"``, ``"minus"`` (rotated backwards), ``"interleaved"`` (other pairs)), which K/V
    head a query head reads (``"repeat"`` or ``"tile"``), ``own`` key and value attended,
    scale 1/d (or none, ``unscaled``), the cached keys rotated again, the new key ``rotate_k``
    or left raw."""
    s, (h, d), kv = len(keys), q.shape, k.shape[0]
    at = {"zero": 0, "length": s, "minus": -position}.get(rope_at, position)
    pairs = rope_at == "interleaved"
    q, k = _rotate(q, at, pairs), (_rotate(k, at, pairs) if rotate_k else k)
    if rotate_cache:
        keys = np.array([_rotate(key, position - s + j) for j, key in enumerate(keys)])
        keys = keys.reshape(s, kv, d)
    if own:
        keys, values = np.concatenate([keys, k[None]]), np.concatenate([values, v[None]])
    head = np.arange(h) // (h // kv) if kv_heads == "repeat" else np.arange(h) % kv
    scale = 1.0 if unscaled else 1 / d if scale_by_d else d**-0.5
    scores = np.einsum("hd,shd->hs", q, keys[:, head]) * scale
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("hs,shd->hd", weights, values[:, head])


def _full_attention(q, k, v, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Causal grouped-query attention of the whole sequence by course_lib's ops (RoPE from
    position ``start``): the output (T, H, d) and the rotated keys (T, KV, d), on the host."""
    qn, kn = (rope(constant(a[None]), ROPE_THETA, seq_axis=1, start=start) for a in (q, k))
    out, _ = causal_attention(qn, kn, constant(v[None]))
    return tuple(to_numpy(a)[0] for a in evaluate([out, kn]))


def _not_contiguous(a: np.ndarray, transposed: bool) -> np.ndarray:
    """``a`` as a view that is not contiguous: its last two axes stored transposed, or every
    other element of a wider array."""
    if transposed and a.ndim > 1:
        return np.ascontiguousarray(a.swapaxes(-1, -2)).swapaxes(-1, -2)
    wide = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def _decode_output_mistake(got, keys, values, q, k, v, position, close_enough):
    variants = [
        (ROPE_AT_ZERO, dict(rope_at="zero")),
        (POSITION_FROM_LENGTH, dict(rope_at="length")),
        (CACHE_ROTATED_TWICE, dict(rotate_cache=True)),
        (UNROTATED_IN_CACHE, dict(rotate_k=False)),  # only q rotated: the raw key cached
        (GQA_INTERLEAVED, dict(kv_heads="tile")),
        (MASKS_OWN_TOKEN, dict(own=False)),
        (DECODE_SCALE_BY_D, dict(scale_by_d=True)),
        (DECODE_NO_SCALE, dict(unscaled=True)),
    ]
    args = (keys, values, q, k, v, position)
    wrong = [(m, lambda o=o: _attend(*args, **o)) for m, o in variants]
    return first_match(got, wrong, close_enough)


#: RoPE written unlike cl.rope, said in the message (no named mistake).
_ROPE_VARIANTS = {
    "interleaved": "RoPE here rotates the pairs (x[2i], x[2i+1]); cl.rope (and LLaMA's Hugging "
                   "Face weights) pair x[i] with x[i + d/2], half-split",
    "minus": "RoPE here rotates backwards, by −position (the signs of sin swapped); cl.rope's "
             "first half is x1·cos − x2·sin, its second x2·cos + x1·sin",
}  # fmt: skip


def _rope_variant(got, keys, values, q, k, v, position, close_enough) -> str:
    """``": <what>"`` when ``got`` is the output of RoPE written another way, else ``""``."""
    args = (keys, values, q, k, v, position)
    found = next((text for way, text in _ROPE_VARIANTS.items()
                  if close_enough(got, _attend(*args, rope_at=way))), None)  # fmt: skip
    return f": {found}" if found else ""


def _check_decoded_cache(label, new_cache, want_keys, want_values, raw_k, dtype) -> None:
    """The cache an answer returned: (keys, values), each (S + 1, KV, d) of the inputs'
    dtype, the keys rotated."""
    require(
        isinstance(new_cache, tuple | list)
        and len(new_cache) == 2
        and all(type(a) is np.ndarray for a in new_cache),
        f"{label} returned a cache of type {type(new_cache).__name__}; it must be a pair "
        "(keys, values) of NumPy arrays",
    )
    keys, values = new_cache
    shape, (s1, kv, d) = want_keys.shape, want_keys.shape
    for name, got in (("keys", keys), ("values", values)):
        if got.shape != shape:
            heads = len(got.shape) == 3 and got.shape[0] == s1 and got.shape[1] > kv
            transposed = got.shape == (kv, s1, d)
            raise Wrong(
                f"{label}: the cached {name} have shape {got.shape}, expected {shape} "
                f"({s1} positions, {kv} KV heads, head size {d})",
                CACHE_REPEATS_HEADS if heads else CACHE_WRONG_AXIS if transposed else None,
            )
    want_bytes = 2 * want_keys.size * np.dtype(dtype).itemsize
    require(
        keys.nbytes + values.nbytes == want_bytes,
        f"{label}: the cache holds {keys.nbytes + values.nbytes} bytes ({keys.dtype}), expected "
        f"{want_bytes} ({np.dtype(dtype)} like the inputs)",
        CACHE_UPCAST if keys.dtype.itemsize > np.dtype(dtype).itemsize else None,
    )
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    if not close(keys, want_keys, **tolerance):
        unrotated = close(keys[:-1], want_keys[:-1], **tolerance) and close(keys[-1], raw_k)
        raise Wrong(
            f"{label}: the array of cached keys {mismatch(keys, want_keys)} (rotated at their "
            "positions)",
            UNROTATED_IN_CACHE if unrotated else None,
        )
    require(
        close(values, want_values, **tolerance),
        f"{label}: the array of cached values {mismatch(values, want_values)}",
    )


def _decode_configs() -> list[tuple]:
    """(query heads, KV heads, head size, position of the first token, tokens cached before
    the first step, steps, dtype): GQA, MHA, MQA; an empty cache; positions far from 0."""
    return [
        (4, 2, 8, 0, 0, 4, np.float64),
        (8, 2, 16, 7, 3, 3, np.float64),
        (4, 4, 8, 0, 2, 2, np.float64),
        (6, 1, 4, 100, 5, 2, np.float64),
        (6, 3, 8, 20, 1, 2, np.float32),
    ]


def _check_decode_config(answer, rng, h, kv, d, start, prefix, steps, dtype) -> None:
    total_tokens = prefix + steps
    q_all = rng.standard_normal((total_tokens, h, d)).astype(dtype)
    k_all = rng.standard_normal((total_tokens, kv, d)).astype(dtype)
    v_all = rng.standard_normal((total_tokens, kv, d)).astype(dtype)
    wide = [a.astype(np.float64) for a in (q_all, k_all, v_all)]
    want_out, want_keys = _full_attention(*wide, start)
    cache = (_not_contiguous(want_keys[:prefix].astype(dtype), True),
             _not_contiguous(v_all[:prefix], False))  # fmt: skip
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    for t in range(prefix, total_tokens):
        position = start + t
        label = (
            f"decode_step(cache of {t} tokens, q, k, v, position={position}) with {h} query "
            f"heads, {kv} KV heads, head size {d}, {np.dtype(dtype)}"
        )
        before = [a.copy() for a in cache]
        errors = [(ValueError, "concatenation axis", CACHE_WRONG_AXIS)]
        if t == 0:  # nothing to attend to but itself
            errors.append((ValueError, "zero-size array", MASKS_OWN_TOKEN))
        args = [_not_contiguous(a[t], t % 2 == 0) for a in (q_all, k_all, v_all)]
        got = call(label, answer, cache, *args, position, errors=errors)
        require(
            all(np.array_equal(a, b) and a.shape == b.shape for a, b in zip(cache, before)),
            f"{label} changed the cache it was given; return a new one",
            CHANGED_INPUT,
        )
        require(
            isinstance(got, tuple | list) and len(got) == 2 and type(got[0]) is np.ndarray,
            f"{label} returned {type(got).__name__}; it must return (out, cache), out an array",
        )
        out, new_cache = got
        if not close(out, want_out[t], **tolerance):
            right = (want_keys[:t], wide[2][:t], *(a[t] for a in wide), position)
            same = lambda a, b: close(a, b, **tolerance)  # noqa: E731
            mistake = _decode_output_mistake(out, *right, same)
            how = "" if mistake else _rope_variant(out, *right, same)
            raise Wrong(f"{label}: the output {mismatch(out, want_out[t])} (full causal "
                        f"attention){how}", mistake)  # fmt: skip
        _check_decoded_cache(label, new_cache, want_keys[: t + 1], wide[2][: t + 1],
                             wide[1][t], dtype)  # fmt: skip
        cache = tuple(new_cache)


@exercise(
    "08.decode_step",
    "decode_step(cache, q, k, v, position) -> (out, cache): one new token's grouped-query "
    "attention with RoPE over a KV cache (keys, values), the cache grown by its row",
    mistakes=(ROPE_AT_ZERO, POSITION_FROM_LENGTH, UNROTATED_IN_CACHE, CACHE_ROTATED_TWICE,
              GQA_INTERLEAVED, MASKS_OWN_TOKEN, DECODE_SCALE_BY_D, DECODE_NO_SCALE,
              CACHE_WRONG_AXIS, CACHE_REPEATS_HEADS, CACHE_UPCAST),  # fmt: skip
    points=5.0,
    forbidden=(
        "course_lib.ops.attention.causal_attention",
        "course_lib.ops.attention.head_scores",
        "course_lib.ops.attention.head_mix",
        "course_lib.ops.attention.causal_softmax",
        "course_lib.ops.rope.rope",
        "course_lib.ops.rope.Rope",
        "course_lib.kernels.reference.attention",
        "course_lib.kernels.reference.rope",
        "course_lib.models.layers.self_attention",
        "course_lib.models.kv_cache.KVCache",
        "course_lib.models.llama.Llama.decode",
    ),
)
def check_decode_step(answer) -> str:
    rng = np.random.default_rng(82)
    configs = _decode_configs()
    for config in configs:
        _check_decode_config(answer, rng, *config)
    steps = sum(config[5] for config in configs)
    return (
        f"matches full causal attention at {steps} steps of {len(configs)} sequences (GQA, MHA, "
        "MQA; an empty cache, first positions 7, 20 and 100; float32), each returned cache "
        "rotated, KV heads only, of the inputs' dtype"
    )
