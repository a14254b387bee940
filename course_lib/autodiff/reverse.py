"""Reverse mode: the lecture's ``gradient(out)`` algorithm, building the backward graph.

::

    gradient(out):
        node_to_grad = {out: [1]}
        for i in reverse_topo_order(out):
            v̄i = sum(node_to_grad[i])          # sum the partial adjoints
            for k in inputs(i):
                v̄(k→i) = v̄i · ∂vi/∂vk         # a new node of the backward graph
                append v̄(k→i) to node_to_grad[k]
        return adjoints of the inputs

No numbers are computed: every adjoint is a new node, so the backward graph can be
evaluated for any input values, optimised, and differentiated again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import GraphError, ShapeError
from ..graph import Node, as_node, node_list, same_kind, topological_order
from ..ops import cast, sum_n, zeros_like
from ..ops.broadcast import broadcast_like
from ..ops.elementwise import seed_like
from .trace import Trace, remember


def gradient(out: Node, wrt: list[Node], seed: Node, order: list[Node], observer=None) -> dict:
    """The lecture's ``gradient(out)``, line for line (see the module docstring).

    ``order`` is the topological order of ``out``'s graph; only nodes on a path to a ``wrt``
    node get adjoints, and each rule is told which of its inputs need one (``needs``).
    ``observer`` (a :class:`Trace`) hears of every adjoint and partial adjoint built.
    Returns ``{node: v̄node}`` for every node reached.
    """
    needs_grad = _depends_on(order, wrt)
    node_to_grad = {out: [seed]}
    adjoints = {}
    for i in reversed(order):  # for i in reverse_topo_order(out)
        if i not in node_to_grad or i not in needs_grad:
            continue
        adjoints[i] = vi_bar = sum_n(*node_to_grad[i])  # v̄i = sum(node_to_grad[i])
        if observer is not None:
            observer.on_adjoint(i, vi_bar)
        needs = [k in needs_grad for k in i.inputs]
        if not any(needs):
            continue
        for k, vki_bar in zip(i.inputs, i.op.gradient(i, vi_bar, needs)):  # for k in inputs(i)
            if vki_bar is None:  # v̄(k→i) = v̄i · ∂vi/∂vk, None where k needs no gradient
                continue
            node_to_grad.setdefault(k, []).append(vki_bar)  # append v̄(k→i) to node_to_grad[k]
            if observer is not None:
                observer.on_partial(i, k, vki_bar)
    for k in wrt:  # each gradient in its variable's float dtype, as in PyTorch and JAX
        if k in adjoints and _promoted(adjoints[k], k):
            adjoints[k] = cast(adjoints[k], k.dtype)
    return adjoints


def grad(out: Node, wrt: Node | Sequence[Node], seed: Node | None = None) -> list[Node] | Node:
    """Gradient nodes of ``out`` with respect to each node of ``wrt``.

    Returns a list (one node per ``wrt`` entry), or a single node when ``wrt`` is a node.
    A ``wrt`` node that ``out`` does not depend on gets ``zeros_like`` of itself.
    ``seed`` is v̄_out, the adjoint of ``out`` (ones by default, d out / d out:
    :func:`~course_lib.ops.elementwise.seed_like`, in ``out``'s dtype where that is a float
    and in float64 otherwise).
    """
    targets = _targets(out, wrt)
    seed = seed_like(out) if seed is None else _checked_seed(out, seed)
    adjoints, _ = _traced_gradient(out, targets, seed)
    return same_kind(wrt, _gradients(adjoints, targets))


def gradient_trace(out: Node, wrt: Node | Sequence[Node]):
    """Like :func:`grad`, and also return the :class:`Trace` of every step."""
    targets = _targets(out, wrt)
    adjoints, trace = _traced_gradient(out, targets, seed_like(out))
    return same_kind(wrt, _gradients(adjoints, targets)), trace


def _traced_gradient(out: Node, targets: list[Node], seed: Node) -> tuple[dict, Trace]:
    """:func:`gradient` observed by a :class:`Trace`, whose names of the backward nodes are
    kept for pictures (``draw_graph(backward=...)`` names them as the lecture does)."""
    order = topological_order([out])
    trace = Trace(out, seed, [n for n in order if not n.is_constant])
    adjoints = gradient(out, targets, seed, order, observer=trace)
    remember(trace)
    return adjoints, trace


def saved_for_backward(
    forward: Node | Sequence[Node], backward: Node | Sequence[Node]
) -> list[Node]:
    """The values of the forward graph that the backward graph reads, in creation order.

    A reverse pass must keep each of them from the moment the forward pass computes it until
    the backward pass has used it (PyTorch calls them saved tensors): that is its memory
    cost. ``forward`` are the forward outputs, ``backward`` the gradients built from them.
    Variables count (the caller holds them anyway), constants do not, nor do the inputs of
    ``shape_only`` ops (``seed_like(out)``, the seed, needs no value of ``out``). A ``like``
    input that a rule reads for its shape (``unreduce(v̄, like)``) counts: the executor
    keeps it alive until then.
    """
    forward_nodes = set(topological_order(node_list(forward, "saved_for_backward: forward")))
    backward_nodes = node_list(backward, "saved_for_backward: backward")
    saved = {
        inp
        for node in topological_order(backward_nodes)
        if node not in forward_nodes and not node.op.shape_only
        for inp in node.inputs
        if inp in forward_nodes and not inp.is_constant
    }
    return sorted(saved, key=lambda n: n.seq)


def _checked_seed(out: Node, seed) -> Node:
    """A given v̄_out as a node of ``out``'s shape: the rules take each adjoint to have its
    node's shape, so a seed of another shape would give wrong-shaped gradients. A Python
    number is taken in ``out``'s float dtype, as the default ``seed_like(out)`` is. A seed
    whose static shape is not ``out``'s (``(2,)`` for an output of shape ``(None,)``) is
    broadcast to ``out``'s shape when the graph runs (where it does not broadcast, the run
    fails, naming both)."""
    if type(seed) in (int, float) and out.dtype is not None and out.dtype.kind == "f":
        seed = np.asarray(seed, out.dtype)
    seed = as_node(seed)
    a, b = out.shape, seed.shape
    clash = a is not None and b is not None and len(a) != len(b)
    if clash or any(m != n for m, n in zip(a or (), b or ()) if None not in (m, n)):
        raise ShapeError(
            f"grad: the seed {seed.name} has shape {seed.shape}, but the output {out.name} "
            f"has shape {out.shape}; the seed is the output's adjoint, so the shapes must agree"
        )
    return seed if a == b else broadcast_like(seed, out)


def _targets(out: Node, wrt) -> list[Node]:
    """``wrt`` as a list, checked: nodes, and no constants."""
    if not isinstance(out, Node):
        raise GraphError(f"grad needs a node as its output, got {type(out).__name__}")
    targets = node_list(wrt, "grad: wrt")
    for t in targets:
        if t.is_constant:
            raise GraphError(
                f"grad: {t.name} is a constant, and constants are not differentiated; "
                "make it a variable to get its gradient"
            )
        if t.dtype is not None and t.dtype.kind not in "fc":
            raise GraphError(
                f"grad: {t.name} is {t.dtype}; only floating-point values have gradients "
                "(as in PyTorch): declare it with a float dtype or cast it"
            )
        if t.is_eager and not t.requires_grad:  # the eager ops on it recorded no graph
            raise GraphError(
                f"grad: the tensor {t.name} does not require grad, so the eager ops on it "
                "recorded nothing and its gradient would be zeros; make it with "
                "requires_grad=True (as PyTorch's autograd.grad refuses it)"
            )
    return targets


def _gradients(adjoints: dict, targets: list[Node]) -> list[Node]:
    return [adjoints[t] if t in adjoints else zeros_like(t) for t in targets]


def _promoted(adjoint: Node, variable: Node) -> bool:
    """May ``adjoint`` be in another dtype than its float ``variable``? NumPy promotes
    inside an op (float32 · a float64 constant is float64), and the adjoint follows; the
    gradient goes back to the variable's dtype (a float32 parameter stays float32), also
    from an integer seed. An adjoint's dtype is unknown where a Python number meets it (the
    rules' ``1.0 - y²``), so it is cast then too (a cast to the dtype it has copies nothing)."""
    a, v = adjoint.dtype, variable.dtype  # (``None in`` would ask dtype == None: float64)
    return v is not None and v.kind == "f" and (a is None or a != v)


def _depends_on(order: list[Node], targets: list[Node]) -> set[Node]:
    """The nodes of ``order`` that are a target or (transitively) use one."""
    depends = set(targets)
    for node in order:
        if node not in depends:
            for inp in node.inputs:
                if inp in depends:
                    depends.add(node)
                    break
    return depends
