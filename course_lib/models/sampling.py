"""Sampling text from a trained model, one token at a time.

The model is causal, so the logits at position t do not depend on anything after t: a
context padded on the right gives the same next-token distribution. Contexts are padded to
a power-of-two length, so a handful of graphs (built once) serve every step. With a KV
cache each step feeds only the new token (:mod:`~course_lib.models.kv_cache`).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence, Set

import numpy as np

from .. import backend, params
from ..errors import FeedError, GraphError, NumericError, ShapeError
from .decoder import DecoderLM
from .tokenizer import ByteTokenizer


def next_token_distribution(logits: np.ndarray, temperature: float, top_k: int | None):
    """Probabilities from one logits row: divided by ``temperature``, only the ``top_k``
    largest logits kept (exactly k: among equal logits the lowest ids, so ``top_k=1`` is the
    argmax at any temperature). ``temperature == 0`` puts all mass on the argmax (greedy
    decoding: the lowest id among ties). Logits with a NaN or +inf (a model whose numbers
    diverged), or with no finite value, are a :class:`NumericError`. The logits may lie on
    the host or the current device; the probabilities are a NumPy array."""
    backend.refuse_foreign(logits, "sampling: logits")
    logits = backend.to_numpy(logits)  # a device array is copied to the host
    logits = params.numeric_array(logits, "sampling: logits").astype(np.float64)
    if logits.ndim != 1 or logits.size == 0:
        raise ShapeError(
            f"sampling: the logits must be one non-empty row (vocab_size,), got shape "
            f"{logits.shape}; for model.logits(...) of shape (batch, seq, vocab) pass [0, -1]"
        )
    temperature = params.in_range(temperature, "sampling: temperature", 0.0)
    if top_k is not None:
        top_k = params.count(top_k, "sampling: top_k", 1, logits.size)
    if np.isnan(logits).any() or not np.isfinite(logits.max()):
        raise NumericError(
            f"sampling: the logits hold {int(np.isnan(logits).sum())} NaN and "
            f"{int(np.isinf(logits).sum())} infinite value(s) (the model's numbers diverged: "
            "a learning rate too high?), so no token can be drawn"
        )
    if temperature == 0:
        probs = np.zeros_like(logits)
        probs[np.argmax(logits)] = 1.0
        return probs
    with np.errstate(over="ignore"):  # a tiny temperature: -inf far from the maximum
        scaled = (logits - logits.max()) / temperature  # at most 0: exp cannot overflow
    if top_k is not None:  # chosen on the logits: a huge temperature rounds scaled ones to ties
        keep = np.argsort(-logits, kind="stable")[:top_k]
        kept = np.full_like(scaled, -np.inf)
        kept[keep] = scaled[keep]
        scaled = kept
    probs = np.exp(scaled)
    return probs / probs.sum()


def generate(
    model: DecoderLM,
    prompt: str | Sequence[int],
    max_new_tokens: int = 100,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    kv_cache: bool = False,
):
    """Continue ``prompt`` by ``max_new_tokens`` sampled tokens.

    A ``str`` prompt is byte-encoded and the result (prompt + continuation) decoded to a
    ``str``; a sequence of ids gives a list of ids. Seeded: the same call gives the same text.
    Each step samples from :func:`next_token_distribution`: ``temperature`` divides the
    logits (0: greedy, the lowest id among tied maxima), ``top_k`` keeps the k largest
    logits, ties going to the lowest ids (``top_k=1`` is greedy at any temperature).
    Contexts longer than the model's ``max_seq_len`` keep their last ``max_seq_len`` tokens.

    ``kv_cache=True`` (models with a ``decode`` method, such as :class:`Llama`) prefills the
    prompt once and then feeds one token per step (:mod:`~course_lib.models.kv_cache`);
    without it every step recomputes the whole context. Both give the same tokens up to
    rounding: their logits differ in the last bits (about 1e-6 in float32), so a near-tie
    between two tokens can go either way. Once the context fills the window, each step
    starts a new window at position 0, which is a prefill again: the cache saves work only
    while the text fits in ``max_seq_len``.
    """
    vocab = model.config.vocab_size
    max_new_tokens = params.count(max_new_tokens, "generate: max_new_tokens", 0)
    params.in_range(temperature, "generate: temperature", 0.0)
    if top_k is not None:
        params.count(top_k, "generate: top_k", 1, vocab)
    seed = params.count(seed, "generate: seed", 0)
    params.flag(kv_cache, "generate: kv_cache")
    tokenizer = ByteTokenizer()
    as_text = isinstance(prompt, str)
    if as_text and vocab > 256:
        raise FeedError(
            f"generate: a text prompt needs a byte-level model (vocab_size 256), but this one "
            f"has vocab_size={vocab} and may sample ids that are no byte; pass token ids"
        )
    ids = _prompt_ids(tokenizer.encode(prompt) if as_text else prompt, vocab)
    if not ids:
        raise ShapeError("generate needs a prompt of at least one token")
    next_logits = _cached_logits(model) if kv_cache else _recomputed_logits(model)
    rng = np.random.default_rng(seed)
    for _ in range(max_new_tokens):
        probs = next_token_distribution(next_logits(ids), temperature, top_k)
        ids.append(int(rng.choice(probs.size, p=probs)))
    return tokenizer.decode(ids) if as_text else ids


def _prompt_ids(prompt, vocab_size: int) -> list[int]:
    """The prompt as a list of Python ints, each checked: an integer (not a bool or a
    float) in ``[0, vocab_size)``; a :class:`FeedError` naming the first that is not."""
    if backend.device_of(prompt) is not None:  # an array: ids of the host or this device
        backend.refuse_foreign(prompt, "generate: prompt")
        prompt = backend.to_numpy(prompt)
        if prompt.ndim != 1:
            raise ShapeError(f"generate: the prompt must be one sequence of token ids (1-D), "
                             f"got an array of shape {prompt.shape}")  # fmt: skip
    if isinstance(prompt, (Set, Mapping)):  # no order: the text would be scrambled
        raise GraphError(f"generate: the prompt must be a str or a sequence of token ids, "
                         f"got a {type(prompt).__name__}, which has no order")  # fmt: skip
    try:
        tokens = list(prompt)
    except TypeError:
        raise GraphError(f"generate: the prompt must be a str or a sequence of token ids, "
                         f"got {type(prompt).__name__}") from None  # fmt: skip
    ids = []
    for position, token in enumerate(tokens):
        if isinstance(token, (list, tuple)) or getattr(token, "ndim", 0) > 0:  # a batch
            raise ShapeError(f"generate: the prompt must be one sequence of token ids (1-D), "
                             f"but prompt[{position}] is a sequence; generate takes one "
                             "prompt: call it once per prompt")  # fmt: skip
        try:  # a float tensor has an __index__ too, which raises
            token_id = operator.index(token)
        except TypeError:
            token_id = None
        if token_id is None or isinstance(token, (bool, np.bool_)):
            raise FeedError(f"generate: prompt[{position}] = {token!r} is not a token id "
                            "(an integer)")  # fmt: skip
        ids.append(token_id)
        if not 0 <= ids[-1] < vocab_size:
            raise FeedError(f"generate: prompt[{position}] = {ids[-1]} is not a token id in "
                            f"[0, {vocab_size})")  # fmt: skip
    return ids


def _recomputed_logits(model: DecoderLM):
    """Next-token logits from the whole window, padded to a power of two (a handful of
    graphs, built once, serve every length)."""
    window = model.config.max_seq_len

    def next_logits(ids: list[int]) -> np.ndarray:
        context = ids[-window:]
        length = min(window, 1 << (len(context) - 1).bit_length())
        padded = np.zeros((1, length), dtype=np.int64)
        padded[0, : len(context)] = context
        return model.logits(padded)[0, len(context) - 1]

    return next_logits


def _cached_logits(model: DecoderLM):
    """Next-token logits from a KV cache: a prefill when the window starts, then only the
    tokens the cache has not seen."""
    if not hasattr(model, "decode"):
        raise GraphError(
            f"generate: kv_cache=True needs a model with a decode method (Llama); "
            f"{type(model).__name__} has none"
        )
    window = model.config.max_seq_len
    state = {"start": -1, "cache": None}  # where the cached window starts in ids

    def next_logits(ids: list[int]) -> np.ndarray:
        start = max(0, len(ids) - window)
        if start != state["start"]:  # a new window: positions restart at 0
            state["start"], state["cache"] = start, None
        cache = state["cache"]
        seen = 0 if cache is None else cache.length
        logits, state["cache"] = model.decode([ids[start + seen :]], cache)
        return logits[0, -1]

    return next_logits
