"""Sampling text from a trained model, one token at a time.

The model is causal, so the logits at position t do not depend on anything after t: a
context padded on the right gives the same next-token distribution. Contexts are padded to
a power-of-two length, so a handful of graphs (built once) serve every step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from .decoder import DecoderLM
from .tokenizer import ByteTokenizer


def next_token_distribution(logits: np.ndarray, temperature: float, top_k: int | None):
    """Probabilities from one logits row: divided by ``temperature``, only the ``top_k``
    largest kept. ``temperature == 0`` puts all mass on the argmax (greedy decoding)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and not 1 <= top_k <= logits.size:
        raise ValueError(f"top_k must be in [1, {logits.size}], got {top_k}")
    if temperature == 0:
        probs = np.zeros_like(logits)
        probs[np.argmax(logits)] = 1.0
        return probs
    scaled = logits / temperature
    if top_k is not None:
        kth = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
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
):
    """Continue ``prompt`` by ``max_new_tokens`` sampled tokens.

    A ``str`` prompt is byte-encoded and the result (prompt + continuation) decoded to a
    ``str``; a sequence of ids gives a list of ids. Seeded: the same call gives the same text.
    Contexts longer than the model's ``max_seq_len`` keep their last ``max_seq_len`` tokens.
    """
    tokenizer = ByteTokenizer()
    as_text = isinstance(prompt, str)
    ids = list(tokenizer.encode(prompt)) if as_text else [int(i) for i in prompt]
    if not ids:
        raise ShapeError("generate needs a prompt of at least one token")
    rng = np.random.default_rng(seed)
    window = model.config.max_seq_len
    for _ in range(max_new_tokens):
        context = ids[-window:]
        length = min(window, max(2, 1 << (len(context) - 1).bit_length()))
        padded = np.zeros((1, length), dtype=np.int64)
        padded[0, : len(context)] = context
        logits = model.logits(padded)[0, len(context) - 1]
        probs = next_token_distribution(logits, temperature, top_k)
        ids.append(int(rng.choice(probs.size, p=probs)))
    return tokenizer.decode(ids) if as_text else ids
