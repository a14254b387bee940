"""The KV cache: what a decoder keeps so that each new token costs one token's work.

Generating token t + 1 needs the attention of position t over positions 0..t. Everything
else position t needs from the past is in the keys and values of positions 0..t − 1, and
the causal mask guarantees they never change once computed. So a decoder computes them once
(*prefill*: the whole prompt in one pass), keeps them, and then feeds one token at a time:
its query, key and value, attention over the kept keys and values plus its own, and the
cache grows by one row per layer. Without the cache every step recomputes the whole prefix.

The cache belongs to the weights that computed it, so :class:`KVCache` holds them too (as
eager tensors, made once per prefill); a model trained further needs a new prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from .. import backend
from ..errors import ShapeError
from ..runtime import Tensor


@dataclass(frozen=True)
class KVCache:
    """Per layer, the keys (after RoPE) and values (batch, length, n_kv, d) of the tokens
    seen so far, the parameters (eager tensors) that computed them, and the device they
    live on (the current one when the cache was made).

    A decoding step returns a new cache and leaves this one as it is, so one prefix can be
    continued in several ways.
    """

    params: dict = field(repr=False)
    keys: tuple = ()
    values: tuple = ()
    device: str = field(default_factory=backend.get_device)
    config: object = field(default=None, repr=False)  # the configuration of the prefill's model

    @classmethod
    def empty(cls, arrays: dict[str, np.ndarray], config=None) -> KVCache:
        """A cache with no tokens, for the parameters ``arrays`` (copied into tensors) of a
        model of configuration ``config``."""
        return cls({name: Tensor(a, name=name) for name, a in arrays.items()}, config=config)

    @property
    def length(self) -> int:
        """Tokens cached per sequence (0 before the prefill)."""
        return self.keys[0].shape[1] if self.keys else 0

    @property
    def batch(self) -> int | None:
        """Sequences cached (None before the prefill)."""
        return self.keys[0].shape[0] if self.keys else None

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys and values (the parameters not counted)."""
        # from the shapes: Tensor.data on a device would copy the whole cache to count it
        return sum(math.prod(t.shape) * np.dtype(t.dtype).itemsize
                   for t in (*self.keys, *self.values))  # fmt: skip

    def past(self) -> list[tuple[Tensor, Tensor]] | None:
        """(keys, values) per layer, or None when nothing is cached yet."""
        return list(zip(self.keys, self.values)) if self.keys else None

    def check_params(self, arrays: dict, config=None) -> None:
        """A ShapeError unless this cache's parameters have the names and shapes of
        ``arrays`` and its model's configuration is ``config`` (a cache made by a model of
        another configuration cannot continue: another RoPE base or norm ε with the same
        shapes computed other keys)."""
        mine = {name: tuple(t.shape) for name, t in self.params.items()}
        theirs = {name: tuple(a.shape) for name, a in arrays.items()}
        if mine != theirs:
            name = next(n for n in sorted(mine.keys() | theirs.keys())
                        if mine.get(n) != theirs.get(n))  # fmt: skip
            raise ShapeError(
                f"KVCache: this cache was made by a model of another configuration "
                f"(parameter {name}: {mine.get(name, 'absent')} in the cache, "
                f"{theirs.get(name, 'absent')} in the model); prefill with this model "
                "(decode without a cache)"
            )
        if self.config is not None and config is not None and self.config != config:
            changed = "; ".join(
                f"{f.name}={getattr(self.config, f.name)!r} in the cache, "
                f"{getattr(config, f.name)!r} in the model"
                for f in fields(config) if getattr(config, f.name) != getattr(self.config, f.name)
            )
            raise ShapeError(f"KVCache: this cache was made by a model of another configuration "
                             f"({changed}); prefill with this model (decode without a cache)")

    def check_room(self, batch: int, new: int, max_seq_len: int) -> None:
        """A ShapeError unless ``new`` tokens of ``batch`` sequences fit after the cached ones."""
        if self.batch is not None and batch != self.batch:
            raise ShapeError(
                f"KVCache: the cache holds {self.batch} sequence(s), got tokens for {batch}"
            )
        if self.length + new > max_seq_len:
            raise ShapeError(
                f"KVCache: {self.length} cached + {new} new tokens exceed max_seq_len="
                f"{max_seq_len} (the position tables' length); prefill a shorter window"
            )
