"""Training text without a download: the installed Python standard library's docstrings
(read with ``ast``), or any text file the user names; a held-out split; and random training
windows."""

from __future__ import annotations

import ast
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np

from .. import backend, params
from ..errors import FeedError, GraphError, ParameterError, ShapeError


@lru_cache(maxsize=4)
def stdlib_docstrings(max_chars: int = 1_500_000) -> str:
    """Docstrings of the standard library's top-level modules, their classes and functions.

    Files are read in sorted order until ``max_chars`` characters are collected, so the
    text is the same on every run with the same Python (and cached in memory).
    """
    max_chars = params.count(max_chars, "stdlib_docstrings: max_chars", 0)
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    total = 0
    for path in sorted(root.glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    parts.append(doc)
                    total += len(doc) + 2
        if total >= max_chars:
            break
    return "\n\n".join(parts)[:max_chars]


def load_text(path: str | Path) -> str:
    """The UTF-8 text of a file the user names (undecodable bytes become �)."""
    return Path(path).read_text(encoding="utf-8", errors="replace")


def host_tokens(tokens, what: str) -> np.ndarray:
    """Token ids on the host: host data as it is, an array of the current device copied
    back (windows are cut on the host), another device's refused."""
    backend.refuse_foreign(tokens, what)
    return backend.to_numpy(tokens)


def split_tokens(tokens: np.ndarray, held_out: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation): the last ``held_out`` fraction of ``tokens`` is held out, in
    one piece, so no training window overlaps a validation window."""
    tokens = host_tokens(tokens, "split_tokens: tokens")
    if tokens.ndim != 1:
        raise ShapeError(f"split_tokens needs a 1-D token array, got shape {tokens.shape}")
    if not 0 < params.real(held_out, "split_tokens: held_out") < 1:
        raise ParameterError(f"split_tokens: held_out must lie in (0, 1), got {held_out}")
    cut = tokens.size - int(round(held_out * tokens.size))
    if not 0 < cut < tokens.size:
        raise ShapeError(
            f"split_tokens: {tokens.size} tokens leave no text on one side of a {held_out:g} split"
        )
    return tokens[:cut], tokens[cut:]


def random_windows(tokens: np.ndarray, batch: int, seq: int, rng: np.random.Generator):
    """``batch`` windows of ``seq`` consecutive tokens at random offsets: (batch, seq)."""
    tokens = host_tokens(tokens, "random_windows: tokens")
    batch = params.positive_size(batch, "random_windows: batch")
    seq = params.positive_size(seq, "random_windows: seq")
    if not isinstance(rng, np.random.Generator):
        raise GraphError(f"random_windows: rng must be a numpy.random.Generator "
                         f"(np.random.default_rng(seed)), got {type(rng).__name__}")  # fmt: skip
    if tokens.ndim != 1 or tokens.size < seq:
        raise ShapeError(f"random_windows: need a 1-D token array of at least seq={seq} "
                         f"tokens, got shape {tokens.shape}")  # fmt: skip
    if tokens.dtype.kind not in "iu":
        raise FeedError(f"random_windows: tokens must be integer ids, got dtype {tokens.dtype}")
    starts = rng.integers(0, tokens.size - seq + 1, size=batch)
    return tokens[starts[:, None] + np.arange(seq)]
