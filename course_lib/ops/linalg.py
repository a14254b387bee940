"""Matrix multiplication (batched, NumPy ``matmul`` semantics)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..backend import on_host
from ..errors import GraphError
from ..graph import Node, Op, apply, as_node, is_static
from ..kernels import blas
from ..kernels.dispatch import run_on_gpu
from .broadcast import broadcast_shapes, sum_to
from .elementwise import tangent_sum
from .shape import Permute, SwapLastAxes, getitem, matrix_transpose, reshape


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
        _check_ranks(x, y)
        if x[-1] is not None and y[-2] is not None and x[-1] != y[-2]:
            raise ValueError(f"inner dimensions differ: {x[-1]} vs {y[-2]}")
        return broadcast_shapes(x[:-2], y[:-2]) + (x[-2], y[-1])

    def compute(self, xp, x, y):
        _check_ranks(x.shape, y.shape)  # ranks unknown when built: its gradient needs 2+
        out = run_on_gpu(self, xp, x, y)  # off by default: cuBLAS via xp.matmul
        return xp.matmul(x, y) if out is None else out

    def gradient(self, node, g, needs):
        return _product_adjoints(*node.inputs, g, needs)

    def jvp(self, node, dx, dy):
        return _product_tangent(*node.inputs, dx, dy)

    def flops(self, out_shape, x_shape, y_shape):
        """``2·m·n·p`` per matrix product (the lecture's m·p·(2n − 1), rounded up)."""
        return 2 * math.prod(out_shape) * x_shape[-1]


def _check_ranks(x, y):
    if len(x) < 2 or len(y) < 2:
        raise ValueError(
            f"matmul inputs need 2+ dimensions here, got {x} and {y}: matmul() promotes a 1-D "
            "operand only where the graph knows it is 1-D (give its variable a shape)"
        )


def _product_adjoints(x: Node, y: Node, g: Node, needs) -> list[Node | None]:
    """x̄ = g·yᵀ and ȳ = xᵀ·g, each summed over the batch axes broadcasting added."""
    return [
        _unbatch(matmul(g, matrix_transpose(y)), x, y) if needs[0] else None,
        _right_adjoint(x, y, g) if needs[1] else None,
    ]


def _product_tangent(x: Node, y: Node, dx: Node | None, dy: Node | None) -> Node | None:
    """d(x·y) = dx·y + x·dy (None stands for zero)."""
    return tangent_sum(
        None if dx is None else matmul(dx, y),
        None if dy is None else matmul(x, dy),
    )


class MatMulSum(Op):
    """``t₀ + t₁ + …`` in that order, each term a matrix product ``x·y`` or a matrix of the
    same shape: a BLAS product computes ``C ← A·B + β·C``, and with β = 1 each product after
    the first is added into the result where it stands (``kernels/blas.py``), with no output,
    zero-fill and addition pass of its own. :func:`course_lib.passes.accumulate_products`
    makes it from the sums a backward pass builds (the adjoint of the x that Q, K and V read
    is ``q̄·W_q + k̄·W_k + v̄·W_v``). Its terms' inputs in order, two for a product, one for a
    matrix; the values are the sum's (a product added by BLAS rounds its partial sums into C
    as they come, so the last bits may differ)."""

    name = "matmul_sum"
    family = "products"
    attributes = ("terms",)
    KINDS = ("product", "matrix")

    def __init__(self, terms):
        terms = tuple(terms)
        if not terms or any(t not in self.KINDS for t in terms):
            raise GraphError(f"matmul_sum: terms must be a non-empty sequence of {self.KINDS}, "
                             f"got {terms!r}")  # fmt: skip
        super().__init__(terms=terms)

    def split(self, items: Sequence) -> list[tuple]:
        """``items`` (inputs, their shapes, ...) grouped by term: pairs for products."""
        groups, at = [], 0
        for term in self.terms:
            size = 2 if term == "product" else 1
            groups.append(tuple(items[at : at + size]))
            at += size
        return groups

    def infer_shape(self, *shapes):
        arity = sum(2 if term == "product" else 1 for term in self.terms)
        if len(shapes) != arity:
            raise ValueError(f"matmul_sum: its terms {self.terms} take {arity} inputs (two for "
                             f"a product, one for a matrix), got {len(shapes)}")  # fmt: skip
        known = None
        for term, parts in zip(self.terms, self.split(shapes)):
            if any(s is not None and len(s) != 2 for s in parts):
                raise ValueError(f"matmul_sum: every term and factor is a matrix (2-D), got "
                                 f"shapes {parts} for a {term}")  # fmt: skip
            shape = _MATMUL.infer_shape(*parts) if term == "product" else parts[0]
            if shape is None:
                continue
            if known is not None and any(
                    a is not None and b is not None and a != b for a, b in zip(known, shape)):
                raise ValueError(f"matmul_sum: the terms' shapes differ ({known} and {shape}); "
                                 "every term is a matrix of the result's shape")  # fmt: skip
            known = shape if known is None else tuple(a if a is not None else b
                                                      for a, b in zip(known, shape))  # fmt: skip
        return known

    def compute(self, xp, *inputs):
        groups = list(zip(self.terms, self.split(inputs)))
        values = [v for _, parts in groups for v in parts]
        if len({v.dtype for v in values}) > 1:  # mixed dtypes: the plain sum, as promoted
            return _plain_sum(xp, groups)
        (first, parts), rest = groups[0], groups[1:]
        if first == "product":
            out = _MATMUL.compute(xp, *parts)
        else:  # a copy to add into: the input itself stays as it was
            out = xp.array(parts[0], copy=True, order="C")
        for term, parts in rest:
            if term == "matrix":
                out += parts[0]
            elif not (on_host(xp) and blas.add_product(out, *parts)):
                out += _MATMUL.compute(xp, *parts)  # on a GPU: the kernel matmul's switch picks
        return out

    def gradient(self, node, g, needs):
        adjoints = []
        for term, parts, wanted in zip(self.terms, self.split(node.inputs), self.split(needs)):
            if term == "product":
                adjoints += _product_adjoints(*parts, g, wanted)
            else:
                adjoints.append(g if wanted[0] else None)
        return adjoints

    def jvp(self, node, *tangents):
        pieces = []
        for term, parts, dots in zip(self.terms, self.split(node.inputs), self.split(tangents)):
            pieces.append(_product_tangent(*parts, *dots) if term == "product" else dots[0])
        return tangent_sum(*pieces)

    def flops(self, out_shape, *in_shapes):
        """``2·m·n·p`` per product and ``m·n`` per addition: the products and the sum's."""
        size = math.prod(out_shape)
        products = sum(2 * size * parts[0][-1]
                       for term, parts in zip(self.terms, self.split(in_shapes))
                       if term == "product")  # fmt: skip
        return products + (len(self.terms) - 1) * size


def _plain_sum(xp, groups):
    total = None
    for term, parts in groups:
        value = _MATMUL.compute(xp, *parts) if term == "product" else parts[0]
        total = value if total is None else total + value
    return total


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


def _length(vector: Node) -> int:
    """A vector's length as a reshape target: -1 where it is unknown when the graph is built."""
    return -1 if vector.shape[0] is None else vector.shape[0]


def matmul(x, y) -> Node:
    """Matrix product ``x @ y``; 1-D operands (nodes, arrays or lists) are promoted like
    ``numpy.matmul``: to a row on the left, a column on the right, dropped from the result."""
    x, y = as_node(x), as_node(y)
    x_vec, y_vec = x.ndim == 1, y.ndim == 1
    if not (x_vec or y_vec):
        return apply(_MATMUL, x, y)
    out = apply(
        _MATMUL,
        reshape(x, (1, _length(x))) if x_vec else x,
        reshape(y, (_length(y), 1)) if y_vec else y,
    )
    if not is_static(out.shape):  # a size unknown when built: drop the added axes by indexing
        index = (0 if x_vec else slice(None), 0) if y_vec else (0, slice(None))
        return getitem(out, (..., *index))
    shape = out.shape[:-2] + (() if x_vec else out.shape[-2:-1]) + (() if y_vec else out.shape[-1:])
    return reshape(out, shape)
