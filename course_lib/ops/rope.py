"""Rotary position embedding (RoPE), half-split like Hugging Face's ``rotate_half``.

Position t rotates the pair (x[i], x[i + d/2]) by the angle ``t · θ^(−2i/d)``; positions
count from ``start`` (0 for a whole sequence; the number of cached tokens when a decoder
feeds only new ones):
``y = x·cos + rotate_half(x)·sin`` with ``rotate_half(x) = (−x₂, x₁)``. A rotation's
transpose is the rotation by the opposite angle, so the gradient is RoPE with −sin.

FLOP convention: 3 per rotated element (two products and one sum), the lecture's 3bsnd.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import params
from ..backend import on_host
from ..errors import ParameterError
from ..graph import Node, Op, apply
from ..kernels import cpu_kernels
from ..kernels.dispatch import run_on_gpu
from ..kernels.reference import rope_tables


@lru_cache(maxsize=32)
def _tables(xp, start: int, seq_len: int, head_dim: int, theta: float, dtype, inverse: bool):
    """cos and sin (−sin rotating back) of positions ``start`` ... ``seq_len − 1``, on xp's
    device: computed and copied there once per shape, not on every call. Rounded to float64
    for float64 x, else to float32 (the kernels' tables), then to x's dtype."""
    cos, sin = rope_tables(seq_len, head_dim, theta, dtype if dtype == np.float64 else np.float32)
    cos, sin = cos[start:].astype(dtype), sin[start:].astype(dtype)
    return xp.asarray(cos), xp.asarray(-sin if inverse else sin)


class Rope(Op):
    """Rotate the last axis (head_dim d, even) by position along ``seq_axis`` (``start``,
    ``start + 1``, ...).

    ``inverse=True`` rotates back (the adjoint). The cos/sin tables are float64 for float64
    x, float32 otherwise (Hugging Face's are float32 for every dtype). FLOPs: 3 per element.
    """

    name, flops_per_element = "rope", 3
    attributes = ("theta", "seq_axis", "inverse", "start")
    linear = True
    family = "positions"
    flop_rows = ("RoPE",)

    def gpu_kernel(self, launch, x, cos, sin):
        """``rope.cu``: one thread per pair, positions along ``seq_axis``."""
        return launch.rope(x, cos, sin, axis=self.seq_axis % x.ndim) if x.ndim >= 2 else None

    def __init__(
        self, theta: float = 10000.0, seq_axis: int = -2, inverse: bool = False, start: int = 0
    ):
        if params.integer(start, "rope: start") < 0:
            raise ParameterError(f"rope: start is a position, at least 0; got {start}")
        super().__init__(
            theta=params.real(theta, "rope: theta", positive=True),
            seq_axis=params.integer(seq_axis, "rope: seq_axis"),
            inverse=params.flag(inverse, "rope: inverse"),
            start=int(start),
        )

    def infer_shape(self, shape):
        if shape is None:
            return None
        in_range = -len(shape) <= self.seq_axis < len(shape)
        if len(shape) < 2 or not in_range or self.seq_axis % len(shape) == len(shape) - 1:
            raise ValueError(
                f"rope needs a position axis (seq_axis={self.seq_axis}) before the last "
                f"(head) axis; got shape {shape}"
            )
        if shape[-1] is not None and shape[-1] % 2:
            raise ValueError(f"rope rotates pairs: the last axis must be even, got {shape[-1]}")
        return shape

    def infer_dtype(self, dtype):
        if dtype is not None and dtype.kind != "f":  # the tables cast to integers: 0s and 1s
            raise ValueError(f"rope rotates floating-point x, got {dtype}; cast it first")
        return dtype

    def compute(self, xp, x):
        self.infer_shape(x.shape)  # a shape unknown when built: seq_axis % ndim may be wrong
        self.infer_dtype(x.dtype)  # a dtype unknown when built
        axis = self.seq_axis % x.ndim
        half = x.shape[-1] // 2
        cos, sin = _tables(xp, self.start, self.start + x.shape[axis], x.shape[-1], self.theta,
                           x.dtype, self.inverse)  # fmt: skip
        out = run_on_gpu(self, xp, x, cos, sin)  # rope.cu on a GPU
        if out is not None:
            return out
        if on_host(xp) and cpu_kernels.worth_it(x):  # float32: the tables are too
            return cpu_kernels.rope(x, cos, sin, axis)  # one pass, NumPy's bits
        table_shape = (x.shape[axis],) + (1,) * (x.ndim - axis - 2) + (half,)
        cos, sin = cos.reshape(table_shape), sin.reshape(table_shape)
        first, second = x[..., :half], x[..., half:]
        out = xp.empty_like(x)
        xp.multiply(first, cos, out=out[..., :half])
        out[..., :half] -= second * sin
        xp.multiply(second, cos, out=out[..., half:])
        out[..., half:] += first * sin
        return out

    def gradient(self, node, g, needs):
        return [apply(Rope(self.theta, self.seq_axis, not self.inverse, self.start), g)]


def rope(x, theta: float = 10000.0, seq_axis: int = -2, start: int = 0) -> Node:
    """Rotary embedding of floating-point ``x`` (..., positions, ..., head_dim): positions
    ``start``, ``start + 1``, ... run along ``seq_axis``, pairs ``(i, i + d/2)`` of the last
    axis rotate; the cos/sin tables are float64 for float64 x, float32 otherwise."""
    return apply(Rope(theta, seq_axis, start=start), x)
