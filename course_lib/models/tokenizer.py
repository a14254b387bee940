"""A byte-level tokenizer: every UTF-8 byte is one token, so the vocabulary is 256 and
nothing has to be learned or downloaded."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .. import backend
from ..errors import FeedError, GraphError, ParameterError, ShapeError


class ByteTokenizer:
    """``encode`` text to byte ids (int64), ``decode`` ids back (invalid UTF-8 becomes �)."""

    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        """The UTF-8 bytes of ``text`` as an int64 array."""
        if not isinstance(text, str):
            raise GraphError(f"ByteTokenizer.encode takes a str, got {type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate such as "\ud800"
            raise ParameterError(
                f"ByteTokenizer.encode: text[{error.start}] = {text[error.start]!r} is a lone "
                "surrogate, which has no UTF-8 bytes"
            ) from None
        return np.frombuffer(data, dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of one sequence (1-D) of byte ids (integers, each in [0, 256))."""
        backend.refuse_foreign(ids, "ByteTokenizer.decode: ids")
        try:  # an array of the current device is copied to the host
            array = backend.to_numpy(ids) if hasattr(ids, "shape") else np.asarray(list(ids))
        except TypeError:
            raise GraphError(f"ByteTokenizer.decode takes a sequence of byte ids, got "
                             f"{type(ids).__name__}") from None  # fmt: skip
        except ValueError:  # ragged rows such as [[1, 2], [3]]
            raise ShapeError("ByteTokenizer.decode takes one sequence of byte ids, got rows "
                             "of different lengths") from None  # fmt: skip
        if array.ndim != 1:  # a batch of rows would run together into one text
            raise ShapeError(f"ByteTokenizer.decode takes one sequence of byte ids (1-D), got "
                             f"shape {array.shape}: decode a batch row by row, one id as "
                             "[id]")  # fmt: skip
        if array.size and array.dtype.kind not in "iu":  # floats, bools, text, None
            raise FeedError(f"ByteTokenizer.decode: byte ids must be integers in [0, 256), "
                            f"got {array.dtype} values")  # fmt: skip
        if array.size and (array.min() < 0 or array.max() > 255):
            raise FeedError(f"ByteTokenizer.decode: byte ids must lie in [0, 256), got "
                            f"{array.min()} to {array.max()}")  # fmt: skip
        return array.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
