"""Two rewrites of matrix products.

Merging matmuls that share an input: Q, K, V = x @ Wq, x @ Wk, x @ Wv as one matmul.
``x @ concat(Wq, Wk, Wv)`` reads x once and launches one larger (higher-intensity) matmul;
slices of its result (views, no copies) replace the three products. The same works for a
shared right operand: ``Wq @ h, Wk @ h`` becomes ``concat(Wq, Wk) @ h``, split by rows.

Accumulating products into a sum: the backward pass adds the adjoints of an input that
several products read (``x̄ = q̄·W_q + k̄·W_k + v̄·W_v``); as one ``matmul_sum`` node, BLAS adds
each product after the first term into the result (GEMM's β = 1, on the host) instead of
writing it alone and adding it after.
"""

from __future__ import annotations

from collections import Counter

from ..graph import Node, apply, is_static, same_kind, topological_order
from ..ops.elementwise import Add, AddN
from ..ops.linalg import MatMul, MatMulSum
from ..ops.shape import GetItem, concat
from .rewrite import Graph, copy_with, output_list, transform


def merge_matmuls(outputs: Graph) -> Graph:
    """Merge matmuls whose left (or right) operand is the same node into one matmul.

    The other operands must be 2-D with static shapes and one dtype, and must not depend
    on any of the matmuls being merged; a shared right operand must be of known rank (one
    of unknown shape may be a vector at run time, whose product has no rows to cut). Each
    original product becomes a slice of the merged result, so values and gradients are
    unchanged up to rounding (BLAS may block the larger product differently: the last bits
    of some elements can differ).
    """
    outs = output_list(outputs, "merge_matmuls")
    groups = _groups(topological_order(outs))
    if not groups:
        return outputs
    member = {m: (shared, side, ms) for (shared, side), ms in groups.items() for m in ms}
    parts: dict[Node, Node] = {}

    def visit(node: Node, inputs: tuple) -> Node:
        if node not in member:
            return copy_with(node, inputs)
        if node not in parts:
            shared, side, members = member[node]
            new_shared = inputs[0] if side == "left" else inputs[1]
            parts.update(zip(members, _merged(new_shared, side, members)))
        return parts[node]

    return same_kind(outputs, transform(outs, visit))


def _groups(order: list[Node]) -> dict[tuple, list[Node]]:
    """Matmuls sharing an operand, keyed by (shared node, side), two or more each."""
    matmuls = [n for n in order if isinstance(n.op, MatMul)]
    candidates: dict[tuple, list[Node]] = {}
    for side, shared_at, other_at in (("left", 0, 1), ("right", 1, 0)):
        for m in matmuls:
            other = m.inputs[other_at]
            if side == "right" and m.inputs[shared_at].shape is None:
                continue
            if is_static(other.shape) and len(other.shape) == 2:
                candidates.setdefault((m.inputs[shared_at], side), []).append(m)
    groups, taken = {}, set()
    for key, ms in candidates.items():
        ms = [m for m in ms if m not in taken]
        ms = _one_dtype(ms, 1 if key[1] == "left" else 0)
        if len(ms) > 1:
            groups[key] = ms
            taken.update(ms)
    after = _computed_from(order, taken)
    for key, ms in list(groups.items()):  # an operand computed from a merged matmul: skip it
        other_at = 1 if key[1] == "left" else 0
        keep = [m for m in ms if m.inputs[other_at] not in after]
        if len(keep) > 1:
            groups[key] = keep
        else:
            del groups[key]
    return groups


def _computed_from(order: list[Node], nodes: set[Node]) -> set[Node]:
    """``nodes`` and every node of ``order`` computed from one of them (one pass: linear, where
    listing each operand's ancestors was quadratic in a deep graph)."""
    after = set()
    for node in order:
        if node in nodes or any(i in after for i in node.inputs):
            after.add(node)
    return after


def _one_dtype(ms: list[Node], other_at: int) -> list[Node]:
    """The products whose other operands have the first one's dtype, known: concatenated
    operands of unknown dtypes could promote each other (float32 with float64)."""
    dtype = ms[0].inputs[other_at].dtype if ms else None
    # ``is not None`` first: NumPy takes ``dtype == None`` as ``dtype == float64``
    return [m for m in ms if dtype is not None and m.inputs[other_at].dtype is not None
            and m.inputs[other_at].dtype == dtype]  # fmt: skip


def _merged(shared: Node, side: str, members: list[Node]) -> list[Node]:
    """The merged product and one slice of it per original matmul (named like it)."""
    if side == "left":
        weights = [m.inputs[1] for m in members]
        product = apply(MatMul(), shared, concat(weights, axis=1))
        sizes = [w.shape[1] for w in weights]
    else:
        weights = [m.inputs[0] for m in members]
        product = apply(MatMul(), concat(weights, axis=0), shared)
        sizes = [w.shape[0] for w in weights]
    slices, start = [], 0
    for m, size in zip(members, sizes):
        cut = slice(start, start + size)
        index = (Ellipsis, cut) if side == "left" else (Ellipsis, cut, slice(None))
        slices.append(apply(GetItem(index), product, name=m.name))
        start += size
    return slices


def accumulate_products(outputs: Graph) -> Graph:
    """Each sum (``add``, ``sum_n``) with matrix products among its terms as one
    ``matmul_sum`` of the same terms in the same order.

    A sum qualifies when it is a matrix of known shape and every term has exactly its shape
    and the same float dtype where dtypes are known (nothing broadcast or promoted; a
    ``matmul_sum`` of mixed dtypes adds its terms as they come); a term is taken as a product
    when it is a matmul of two matrices that nothing else reads (not the graph's output, not
    another node, not the sum twice), and one such term is needed.
    """
    outs = output_list(outputs, "accumulate_products")
    readers = Counter(i for node in topological_order(outs) for i in node.inputs)
    readers.update(outs)

    def visit(node: Node, inputs: tuple) -> Node:
        terms = _terms(node, readers)
        if terms is None:
            return copy_with(node, inputs)
        operands = []
        for term, new in zip(terms, inputs):
            operands += new.inputs if term == "product" else [new]
        return apply(MatMulSum(terms), *operands, name=node.name)

    return same_kind(outputs, transform(outs, visit))


def _terms(node: Node, readers: Counter) -> tuple[str, ...] | None:
    """The kinds of ``node``'s terms if it is a sum to accumulate, else None."""
    if not isinstance(node.op, (Add, AddN)) or not is_static(node.shape) or node.ndim != 2:
        return None
    dtypes = {i.dtype for i in (node, *node.inputs)} - {None}  # unknown: checked at run time
    if len(dtypes) > 1 or any(d.kind != "f" for d in dtypes):
        return None
    if any(i.shape != node.shape for i in node.inputs):
        return None
    terms = tuple("product" if _lone_product(i, readers) else "matrix" for i in node.inputs)
    return terms if "product" in terms else None


def _lone_product(node: Node, readers: Counter) -> bool:
    return isinstance(node.op, MatMul) and readers[node] == 1 and all(
        i.ndim == 2 for i in node.inputs
    )
