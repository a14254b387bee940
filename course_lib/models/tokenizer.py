"""A byte-level tokenizer: every UTF-8 byte is one token, so the vocabulary is 256 and
nothing has to be learned or downloaded."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import FeedError


class ByteTokenizer:
    """``encode`` text to byte ids (int64), ``decode`` ids back (invalid UTF-8 becomes �)."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        """The UTF-8 bytes of ``text`` as an int64 array."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of byte ids (each in [0, 256))."""
        array = np.asarray(list(ids) if not hasattr(ids, "shape") else ids).reshape(-1)
        if array.size and (array.min() < 0 or array.max() > 255):
            raise FeedError(f"byte ids must lie in [0, 256), got {array.min()} to {array.max()}")
        return array.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
