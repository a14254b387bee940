"""Sampling text from a trained model, one token at a time.

The model is causal, so the logits at position t do not depend on anything after t: a
context padded on the right gives the same next-token distribution. Contexts are padded to
a power-of-two length, so a handful of graphs (built once) serve every step. With a KV
cache each step feeds only the new token (:mod:`~course_lib.models.kv_cache`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import params
from ..errors import GraphError, ShapeError
from .decoder import DecoderLM
from .tokenizer import ByteTokenizer


def next_token_distribution(logits: np.ndarray, temperature: float, top_k: int | None):
    """Probabilities from one logits row: divided by ``temperature``, only the ``top_k``
    largest kept. ``temperature == 0`` puts all mass on the argmax (greedy decoding)."""
    logits = np.asarray(logits, dtype=np.float64)
    temperature = params.in_range(temperature, "sampling: temperature", 0.0)
    if top_k is not None:
        top_k = params.count(top_k, "sampling: top_k", 1, logits.size)
    if temperature == 0:
        probs = np.zeros_like(logits)
        probs[np.argmax(logits)] = 1.0
        return probs
    scaled = logits / temperature
    if top_k is not None:
        keep = np.argpartition(scaled, -top_k)[-top_k:]  # exactly k indices, even with ties
        kept = np.full_like(scaled, -np.inf)
        kept[keep] = scaled[keep]
        scaled = kept
    scaled -= scaled.max()
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
    Contexts longer than the model's ``max_seq_len`` keep their last ``max_seq_len`` tokens.

    ``kv_cache=True`` (models with a ``decode`` method, such as :class:`Llama`) prefills the
    prompt once and then feeds one token per step (:mod:`~course_lib.models.kv_cache`);
    without it every step recomputes the whole context. Both give the same tokens. Once
    the context fills the window, each step starts a new window at position 0, which is a
    prefill again: the cache saves work only while the text fits in ``max_seq_len``.
    """
    max_new_tokens = params.count(max_new_tokens, "generate: max_new_tokens", 0)
    params.in_range(temperature, "generate: temperature", 0.0)
    if top_k is not None:
        params.count(top_k, "generate: top_k", 1)
    params.flag(kv_cache, "generate: kv_cache")
    tokenizer = ByteTokenizer()
    as_text = isinstance(prompt, str)
    ids = list(tokenizer.encode(prompt)) if as_text else [int(i) for i in prompt]
    if not ids:
        raise ShapeError("generate needs a prompt of at least one token")
    next_logits = _cached_logits(model) if kv_cache else _recomputed_logits(model)
    rng = np.random.default_rng(seed)
    for _ in range(max_new_tokens):
        probs = next_token_distribution(next_logits(ids), temperature, top_k)
        ids.append(int(rng.choice(probs.size, p=probs)))
    return tokenizer.decode(ids) if as_text else ids


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
