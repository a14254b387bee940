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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral

from ..errors import GraphError, OutOfRangeError, ShapeError
from ..graph import Node, as_node, formula, node_list, same_kind, topological_order
from ..ops import ones_like, sum_n, zeros_like


@dataclass(frozen=True)
class Step:
    """One step of the algorithm, and only what it changed.

    ``kind == "adjoint"``: line ``v̄i = sum(node_to_grad[i])`` ran for ``node``; ``created``
    is v̄i. ``kind == "partial"``: the partial adjoint ``created`` = v̄(k→i) was appended
    to ``node_to_grad[k]`` for ``input`` k of ``node`` i. The whole ``node_to_grad`` after a
    step is replayed from the steps by :meth:`Trace.state` (storing it in every step would
    make a trace grow with the square of the graph).
    """

    kind: str
    node: Node
    input: Node | None
    created: Node


@dataclass
class Trace:
    """Every step of one run of ``gradient(out)``, with the lecture's labels.

    One backward node can play several roles: for ``v3 = v2 + 1`` the partial adjoint
    v̄(2→3) = v̄3 · 1 *is* the node v̄3, so no new node is built. :meth:`roles` lists them.
    """

    out: Node
    seed: Node  # v̄_out: node_to_grad starts as {out: [seed]}
    forward: list  # forward nodes (no constants) in creation order: v1, v2, ...
    steps: list = field(default_factory=list)

    def __post_init__(self):
        self._numbers = {n: i + 1 for i, n in enumerate(self.forward)}

    def is_forward(self, node: Node) -> bool:
        """Whether ``node`` is one of the forward nodes v1, v2, ..."""
        return node in self._numbers

    # -- the observer of gradient(): one Step per line that built a node -----------------
    def on_adjoint(self, node: Node, created: Node) -> None:
        """``v̄i = sum(node_to_grad[i])`` ran for ``node``."""
        self.steps.append(Step("adjoint", node, None, created))

    def on_partial(self, node: Node, input: Node, created: Node) -> None:
        """``v̄(k→i)`` (``created``) was appended to ``node_to_grad[input]``."""
        self.steps.append(Step("partial", node, input, created))

    def number(self, node: Node) -> int:
        """The lecture number i of a forward node (``v_i``)."""
        return self._numbers[node]

    def adjoint(self, node: Node) -> Node | None:
        """The node v̄i built for the forward node ``node`` (None if not reached)."""
        for s in self.steps:
            if s.kind == "adjoint" and s.node is node:
                return s.created
        return None

    def replayed(self, count: int) -> Replay:
        """The algorithm's bookkeeping after its first ``count`` steps (a :class:`Replay`,
        which goes on one step at a time)."""
        replay = Replay(self)
        for _ in range(count):
            replay.advance()
        return replay

    def roles(self, node: Node, upto: int | None = None) -> list[str]:
        """Every name ``node`` has in the algorithm up to step ``upto``: the adjoints first,
        then the partial adjoints in the order they were built. The partial v̄(1→2) that is
        all of ``node_to_grad[1]`` *is* v̄1, so its roles are ``["v̄1", "v̄(1→2)"]``."""
        count = len(self.steps if upto is None else self.steps[: upto + 1])
        return self.replayed(count).roles(node)

    def role(self, s: Step) -> str:
        """The name step ``s`` gives the node it built: ``v̄i`` or ``v̄(k→i)``."""
        i = self._numbers[s.node]
        return f"v̄{i}" if s.kind == "adjoint" else f"v̄({self._numbers[s.input]}→{i})"

    def entry(self, owner: Node, source: Node | None) -> str:
        """The name of an entry of ``node_to_grad[owner]`` that node ``source`` appended
        (``v̄k`` for the seed, whose source is None)."""
        k = self._numbers[owner]
        return f"v̄{k}" if source is None else f"v̄({k}→{self._numbers[source]})"

    def _checked(self, step) -> int:
        """``step`` if it numbers one of the steps (0 to len(steps) − 1), else a clear error."""
        last = len(self.steps) - 1
        if isinstance(step, bool) or not isinstance(step, Integral) or not 0 <= step <= last:
            raise OutOfRangeError(
                f"Trace: step must be an integer from 0 to {last} (this trace has "
                f"{len(self.steps)} steps), got {step!r}"
            )
        return int(step)

    def state(self, step: int) -> tuple[dict, dict]:
        """``node_to_grad`` after ``step``, and for each of its entries the node i it came
        from (``None`` for the seed), replayed from the steps."""
        replay = self.replayed(self._checked(step) + 1)
        return replay.node_to_grad, replay.sources

    def entries(self, step: int) -> list[tuple[Node, list[tuple[str, Node]]]]:
        """``node_to_grad`` after ``step``: (owner, [(entry label, partial node), ...]),
        owners from the highest node number down, as the lecture draws them."""
        return self.replayed(self._checked(step) + 1).entries()

    def state_text(self, step: int) -> str:
        """``node_to_grad`` after ``step`` as text, e.g. ``{4: [v̄4], 2: [v̄(2→4)]}``."""
        return self.replayed(self._checked(step) + 1).state_text()

    def names(self, upto: int) -> dict[Node, str]:
        """The lecture's names known after steps ``0..upto - 1``: vi for the forward nodes,
        and for each backward node built so far its first role (:meth:`roles`)."""
        return self.replayed(len(self.steps[:upto])).names

    def rule(self, step: int) -> str:
        """The partial adjoint of a ``"partial"`` step as the op's rule built it, over the
        names known before the step: ``v̄4 × v3`` for v̄(2→4) (Mul's rule), ``v̄5 × cos(v2)``
        for a sine, or just ``v̄3`` when the rule built no new node (``v3 = v2 + 1``)."""
        s = self.steps[self._checked(step)]
        if s.kind != "partial":
            raise ValueError(f"step {step} sums node_to_grad[{self._numbers[s.node]}]: no rule")
        return _written(s.created, self.names(step))

    def describe(self, step: int, values: Mapping | None = None) -> str:
        """What line of the algorithm did at ``step``, in the lecture's notation.

        A partial-adjoint step shows the rule, e.g. ``v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3``.
        With ``values`` ({node: array} for the trace's nodes, e.g.
        ``course_lib.viz.steps.trace_values``), the step is also worked out with the
        forward values plugged in: ``… = v̄4 × v3 = 1.000 × 2.649 = 2.649``.
        """
        return self.replayed(self._checked(step)).describe_next(values)


class Replay:
    """The bookkeeping of ``gradient(out)`` replayed from a :class:`Trace`, one step at a
    time: ``node_to_grad`` (with the node i each entry came from), the lecture's names and
    every backward node's roles. Each step is read once, so replaying a whole trace, and
    describing or drawing every step on the way (``StepThrough``), is linear in its steps.
    """

    def __init__(self, trace: Trace):
        self.trace = trace
        self.count = 0  # steps replayed
        self.node_to_grad: dict[Node, list[Node]] = {trace.out: [trace.seed]}
        self.sources: dict[Node, list[Node | None]] = {trace.out: [None]}
        self.names = {n: f"v{trace.number(n)}" for n in trace.forward}
        self._roles: dict[Node, tuple[list[str], list[str]]] = {}  # adjoint, partial roles

    def advance(self) -> Step:
        """Replay the next step; return it."""
        s = self.trace.steps[self.count]
        self.count += 1
        role = self.trace.role(s)
        adjoints, partials = self._roles.setdefault(s.created, ([], []))
        (adjoints if s.kind == "adjoint" else partials).append(role)
        if s.kind == "partial":
            self.node_to_grad.setdefault(s.input, []).append(s.created)
            self.sources.setdefault(s.input, []).append(s.node)
        forward = self.trace.is_forward(s.created)  # a rule that returned a forward value
        if not forward and (s.kind == "adjoint" or s.created not in self.names):
            self.names[s.created] = role  # an adjoint's name comes first
        return s

    def roles(self, node: Node) -> list[str]:
        """Every name ``node`` has had so far, adjoints first (:meth:`Trace.roles`)."""
        adjoints, partials = self._roles.get(node, ((), ()))
        return list(dict.fromkeys([*adjoints, *partials]))

    def entries(self) -> list[tuple[Node, list[tuple[str, Node]]]]:
        """``node_to_grad`` now, as :meth:`Trace.entries` gives it."""
        owners = sorted(self.node_to_grad, key=lambda n: -self.trace.number(n))
        return [(owner, self._labelled(owner)) for owner in owners]

    def _labelled(self, owner: Node) -> list[tuple[str, Node]]:
        pairs = zip(self.sources[owner], self.node_to_grad[owner])
        return [(self.trace.entry(owner, source), part) for source, part in pairs]

    def state_text(self) -> str:
        """``node_to_grad`` now as text, e.g. ``{4: [v̄4], 2: [v̄(2→4)]}``."""
        items = (
            f"{self.trace.number(o)}: [{', '.join(label for label, _ in parts)}]"
            for o, parts in self.entries()
        )
        return "{" + ", ".join(items) + "}"

    def describe_next(self, values: Mapping | None = None) -> str:
        """What the next step does (:meth:`Trace.describe`)."""
        s = self.trace.steps[self.count]
        i = self.trace.number(s.node)
        values = values or {}
        if s.kind == "adjoint":  # node_to_grad[i] is complete: the step only sums it
            sources = self.sources[s.node]
            if sources == [None]:
                return f"i = {i}: v̄{i} = sum([1]) = 1"
            parts = [" + ".join(self.trace.entry(s.node, src) for src in sources)]
            numbers = [_number(values.get(p)) for p in self.node_to_grad[s.node]]
            if len(numbers) > 1 and None not in numbers:
                parts.append(" + ".join(_operand(n) for n in numbers))
            return f"i = {i}: v̄{i} = {_equation(parts, values.get(s.created))}"
        k = self.trace.number(s.input)
        parts = [f"v̄{i}·∂v{i}/∂v{k}", _written(s.created, self.names)]
        if s.created not in self.names:  # a new node: its op over the numbers
            parts.append(_plugged_in(s.created, values))
        equation = _equation(parts, values.get(s.created))
        return f"i = {i}, k = {k}: append v̄({k}→{i}) = {equation} to node_to_grad[{k}]"


def _written(node: Node, names: Mapping) -> str:
    """``node`` by its name, or written out as a formula over the named nodes."""
    return names.get(node) or formula(node, names)


def _number(value) -> str | None:
    """A value as a number with 3 decimals, or None if it is not one number."""
    if value is None or getattr(value, "size", 1) != 1:
        return None
    number = float(value.reshape(()) if hasattr(value, "reshape") else value)
    return f"{number:.3f}".replace("-", "−")  # the minus sign ops write (Neg, Sub)


def _operand(number: str) -> str:
    return f"({number})" if number.startswith("−") else number


def _plugged_in(node: Node, values: Mapping) -> str | None:
    """``node``'s op written over its inputs' values (``1.000 × 2.649``); scalar constants
    by their value. None when an input has no single number."""
    numbers = []
    for inp in node.inputs:
        if inp in values:
            number = _number(values[inp])
        else:
            number = inp.op.written(()) if inp.is_constant and inp.shape == () else None
        if number is None:
            return None
        numbers.append(_operand(number))
    return node.op.written(numbers)


def _equation(parts: list, value) -> str:
    """``a = b = c`` from the parts that are known, then the value, each said once."""
    said: list[str] = []
    for part in [*parts, _number(value)]:
        if part is not None and part not in said:
            said.append(part)
    return " = ".join(said)


def grad(out: Node, wrt: Node | Sequence[Node], seed: Node | None = None) -> list[Node] | Node:
    """Gradient nodes of ``out`` with respect to each node of ``wrt``.

    Returns a list (one node per ``wrt`` entry), or a single node when ``wrt`` is a node.
    A ``wrt`` node that ``out`` does not depend on gets ``zeros_like`` of itself.
    ``seed`` is v̄_out, the adjoint of ``out`` (ones by default: d out / d out).
    """
    targets = _targets(out, wrt)
    seed = ones_like(out) if seed is None else _checked_seed(out, seed)
    adjoints = gradient(out, targets, seed, topological_order([out]))
    return same_kind(wrt, _gradients(adjoints, targets))


def gradient_trace(out: Node, wrt: Node | Sequence[Node]):
    """Like :func:`grad`, and also return the :class:`Trace` of every step."""
    targets, seed, order = _targets(out, wrt), ones_like(out), topological_order([out])
    trace = Trace(out, seed, [n for n in order if not n.is_constant])
    adjoints = gradient(out, targets, seed, order, observer=trace)
    return same_kind(wrt, _gradients(adjoints, targets)), trace


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
    return adjoints


def saved_for_backward(
    forward: Node | Sequence[Node], backward: Node | Sequence[Node]
) -> list[Node]:
    """The values of the forward graph that the backward graph reads, in creation order.

    A reverse pass must keep each of them from the moment the forward pass computes it until
    the backward pass has used it (PyTorch calls them saved tensors): that is its memory
    cost. ``forward`` are the forward outputs, ``backward`` the gradients built from them.
    Variables count (the caller holds them anyway), constants do not, nor do the inputs of
    ``shape_only`` ops (``ones_like(out)``, the seed, needs no value of ``out``). A ``like``
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
    node's shape, so a seed of another shape would give wrong-shaped gradients."""
    seed = as_node(seed)
    known = [s for s in (out.shape, seed.shape) if s is not None and None not in s]
    if len(known) == 2 and known[0] != known[1]:
        raise ShapeError(
            f"grad: the seed {seed.name} has shape {seed.shape}, but the output {out.name} "
            f"has shape {out.shape}; the seed is the output's adjoint, so the shapes must agree"
        )
    return seed


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
    return targets


def _gradients(adjoints: dict, targets: list[Node]) -> list[Node]:
    return [adjoints[t] if t in adjoints else zeros_like(t) for t in targets]


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
