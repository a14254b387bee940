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
from dataclasses import dataclass, field

from ..errors import GraphError
from ..graph import Node, topological_order
from ..ops import ones_like, sum_n, zeros_like


@dataclass(frozen=True)
class Step:
    """One step of the algorithm.

    ``kind == "adjoint"``: line ``v̄i = sum(node_to_grad[i])`` ran for ``node``; ``created``
    is v̄i. ``kind == "partial"``: the partial adjoint ``created`` = v̄(k→i) was appended
    for ``input`` k of ``node`` i. ``node_to_grad`` is the state after the step.
    """

    kind: str
    node: Node
    input: Node | None
    created: Node
    node_to_grad: dict


@dataclass
class Trace:
    """Every step of one run of ``gradient(out)``, with the lecture's labels."""

    out: Node
    forward: list  # forward nodes (no constants) in creation order: v1, v2, ...
    steps: list = field(default_factory=list)
    adjoint_of: dict = field(default_factory=dict)  # forward node -> v̄ node
    partial_of: dict = field(default_factory=dict)  # partial node -> (k, i)

    def number(self, node: Node) -> int:
        """The lecture number i of a forward node (``v_i``)."""
        return self._numbers[node]

    def __post_init__(self):
        self._numbers = {n: i + 1 for i, n in enumerate(self.forward)}

    def label(self, node: Node) -> str:
        """``v3`` for forward nodes, ``v̄(2→4)`` for partial adjoints, ``v̄2`` for sums."""
        if node in self._numbers:
            return f"v{self._numbers[node]}"
        if node in self.partial_of:
            k, i = self.partial_of[node]
            return f"v̄({self._numbers[k]}→{self._numbers[i]})"
        for fwd, adj in self.adjoint_of.items():
            if adj is node:
                return f"v̄{self._numbers[fwd]}"
        return node.name

    def state_text(self, step: int) -> str:
        """``node_to_grad`` after ``step`` as text, e.g. ``{4: [v̄4], 2: [v̄(2→4)]}``.

        Entries are listed from the highest node number down, as the lecture draws them.
        """
        state = self.steps[step].node_to_grad
        items = (
            f"{self._numbers[n]}: [{', '.join(self._entry_label(n, p) for p in parts)}]"
            for n, parts in sorted(state.items(), key=lambda item: -self._numbers[item[0]])
        )
        return "{" + ", ".join(items) + "}"

    def _entry_label(self, owner: Node, part: Node) -> str:
        if part in self.partial_of:
            return self.label(part)
        return f"v̄{self._numbers[owner]}"  # the seed [1] of the output

    def describe(self, step: int) -> str:
        """What line of the algorithm did at ``step``, in the lecture's notation."""
        s = self.steps[step]
        i = self._numbers[s.node]
        if s.kind == "adjoint":
            parts = s.node_to_grad[s.node]
            if s.node is self.out and len(parts) == 1 and parts[0] not in self.partial_of:
                return f"i = {i}: v̄{i} = sum([1]) = 1"
            terms = " + ".join(self.label(p) for p in parts)
            return f"i = {i}: v̄{i} = {terms}"
        k = self._numbers[s.input]
        return f"i = {i}, k = {k}: append v̄({k}→{i}) = v̄{i}·∂v{i}/∂v{k} to node_to_grad[{k}]"


def grad(out: Node, wrt: Node | Sequence[Node], seed: Node | None = None) -> list[Node] | Node:
    """Gradient nodes of ``out`` with respect to each node of ``wrt``.

    Returns a list (one node per ``wrt`` entry), or a single node when ``wrt`` is a node.
    A ``wrt`` node that ``out`` does not depend on gets ``zeros_like`` of itself.
    ``seed`` is v̄_out, the adjoint of ``out`` (ones by default: d out / d out).
    """
    grads, _ = reverse_mode(out, wrt, record=False, seed=seed)
    return grads


def gradient_trace(out: Node, wrt: Node | Sequence[Node]):
    """Like :func:`grad`, and also return the :class:`Trace` of every step."""
    return reverse_mode(out, wrt, record=True)


def reverse_mode(out: Node, wrt, record: bool, seed: Node | None = None, order=None):
    if not isinstance(out, Node):
        raise GraphError(f"grad needs a node as its output, got {type(out).__name__}")
    single = isinstance(wrt, Node)
    targets = [wrt] if single else list(wrt)
    for t in targets:
        if not isinstance(t, Node):
            raise GraphError(f"grad: wrt must hold nodes, got {type(t).__name__}")
        if t.is_constant:
            raise GraphError(
                f"grad: {t.name} is a constant, and constants are not differentiated; "
                "make it a variable to get its gradient"
            )
    if order is None:
        order = topological_order([out])
    depends = _depends_on(order, targets)
    trace = Trace(out, [n for n in order if not n.is_constant]) if record else None

    if seed is None:
        seed = ones_like(out)
    node_to_grad: dict[Node, list[Node]] = {out: [seed]}
    adjoints: dict[Node, Node] = {}
    for node in reversed(order):
        partials = node_to_grad.get(node)
        if partials is None or node not in depends:
            continue
        adjoint = partials[0] if len(partials) == 1 else sum_n(*partials)
        adjoints[node] = adjoint
        if record:
            trace.adjoint_of[node] = adjoint
            trace.steps.append(Step("adjoint", node, None, adjoint, _snapshot(node_to_grad)))
        for inp in node.inputs:
            if inp in depends:
                break
        else:
            continue  # a leaf, or no input leads to wrt: nothing to propagate
        for inp, part in zip(node.inputs, node.op.gradient(node, adjoint)):
            if part is None or inp not in depends:
                continue
            existing = node_to_grad.get(inp)
            if existing is None:
                node_to_grad[inp] = [part]
            else:
                existing.append(part)
            if record:
                trace.partial_of[part] = (inp, node)
                trace.steps.append(Step("partial", node, inp, part, _snapshot(node_to_grad)))
    grads = [adjoints.get(t) if t in adjoints else zeros_like(t) for t in targets]
    result = grads[0] if single else grads
    return (result, trace) if record else (result, None)


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


def _snapshot(node_to_grad: dict) -> dict:
    return {n: list(parts) for n, parts in node_to_grad.items()}
