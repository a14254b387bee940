"""Matrix multiplication (batched, NumPy ``matmul`` semantics)."""

from __future__ import annotations

import math

from ..graph import Node, Op, apply
from ..kernels.dispatch import run_on_gpu
from .broadcast import broadcast_shapes, sum_to
from .elementwise import tangent_sum
from .shape import Permute, SwapLastAxes, matrix_transpose, reshape


class MatMul(Op):
    """``x @ y`` for inputs with at least two dimensions; batch dims broadcast."""

    name, symbol = "matmul", "@"
    family = "products"
    flop_rows = ("XW_Q, XW_K, XW_V", "AW_O", "XW_gate, XW_up", "XW_down", "LM head")

    def gpu_kernel(self, launch, x, y):
        """``matmul_tiled.cu``: 2-D matrices only (batched products keep ``xp.matmul``)."""
        return launch.matmul_tiled(x, y) if x.ndim == y.ndim == 2 else None

    def infer_shape(self, x, y):
        if x is None or y is None:
            return None
        if len(x) < 2 or len(y) < 2:
            raise ValueError("matmul inputs need 2+ dimensions here (1-D is promoted by matmul())")
        if x[-1] is not None and y[-2] is not None and x[-1] != y[-2]:
            raise ValueError(f"inner dimensions differ: {x[-1]} vs {y[-2]}")
        return broadcast_shapes(x[:-2], y[:-2]) + (x[-2], y[-1])

    def compute(self, xp, x, y):
        out = run_on_gpu(self, xp, x, y)  # off by default: cuBLAS via xp.matmul
        return xp.matmul(x, y) if out is None else out

    def gradient(self, node, g, needs):
        x, y = node.inputs
        return [
            _unbatch(matmul(g, matrix_transpose(y)), x, y) if needs[0] else None,
            _right_adjoint(x, y, g) if needs[1] else None,
        ]

    def jvp(self, node, dx, dy):
        x, y = node.inputs
        return tangent_sum(
            None if dx is None else matmul(dx, y),
            None if dy is None else matmul(x, dy),
        )

    def flops(self, out_shape, x_shape, y_shape):
        """``2·m·n·p`` per matrix product (the lecture's m·p·(2n − 1), rounded up)."""
        return 2 * math.prod(out_shape) * x_shape[-1]


def _right_adjoint(x: Node, y: Node, g: Node) -> Node:
    """ȳ = xᵀ·g. For a linear layer, ``x @ Wᵀ`` with x and W matrices, the same product is
    taken as ``(gᵀ·x)ᵀ``: transposed back by Wᵀ's own rule, W's gradient is then ``gᵀ·x``,
    row-major like W (as PyTorch's linear computes it), not a transposed view of ``xᵀ·g``
    that every reader of it (the optimiser's kernels) would copy first."""
    if x.ndim == 2 and _is_transposed_matrix(y):
        return matrix_transpose(matmul(matrix_transpose(g), x))
    return _unbatch(matmul(matrix_transpose(x), g), y, x)


def _is_transposed_matrix(y: Node) -> bool:
    """Is ``y`` a matrix that a transpose op made (``W.T``, ``transpose(W)``)?"""
    if y.ndim != 2:
        return False
    if isinstance(y.op, SwapLastAxes):
        return True
    return isinstance(y.op, Permute) and (y.op.axes is None or [a % 2 for a in y.op.axes] == [1, 0])


def _unbatch(partial: Node, x: Node, other: Node) -> Node:
    """The partial adjoint of ``x`` summed over the batch axes broadcasting added to it; when
    the other operand is a single matrix (no batch axes), x's batch axes are the output's."""
    return partial if other.ndim == 2 else sum_to(partial, x)


_MATMUL = MatMul()


def matmul(x, y) -> Node:
    """Matrix product ``x @ y``; 1-D operands are promoted like ``numpy.matmul``."""
    x_vec = isinstance(x, Node) and x.ndim == 1
    y_vec = isinstance(y, Node) and y.ndim == 1
    if not (x_vec or y_vec):
        return apply(_MATMUL, x, y)
    out = apply(
        _MATMUL,
        reshape(x, (1, x.shape[0])) if x_vec else x,
        reshape(y, (y.shape[0], 1)) if y_vec else y,
    )
    shape = out.shape[:-2] + (() if x_vec else out.shape[-2:-1]) + (() if y_vec else out.shape[-1:])
    return reshape(out, shape)
