"""The trace of one run of ``gradient(out)``: every step it took, in the lecture's names.

``grad`` and ``gradient_trace`` hand ``gradient`` a :class:`Trace` as its observer; it records a
:class:`Step` for each adjoint summed (:attr:`StepKind.ADJOINT`) and each partial adjoint
appended (:attr:`StepKind.PARTIAL`). :class:`Replay` replays the bookkeeping from the steps
(``node_to_grad``, the names v̄i and v̄(k→i)), one step at a time, for the step-through
pictures. The names a run gave its backward nodes stay behind (:func:`remember`), so a
picture of the backward graph uses them (:func:`names_of`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from numbers import Integral

from .. import tables
from ..errors import GraphError, OutOfRangeError, ParameterError
from ..graph import Node, formula


class StepKind(str, Enum):  # noqa: UP042  (str() is "StepKind.X"; a StrEnum's is the value)
    """Which line of ``gradient(out)`` a step ran."""

    ADJOINT = "adjoint"  # v̄i = sum(node_to_grad[i])
    PARTIAL = "partial"  # append v̄(k→i) to node_to_grad[k]


@dataclass(frozen=True)
class Step:
    """One step of the algorithm, and only what it changed.

    ``StepKind.ADJOINT``: line ``v̄i = sum(node_to_grad[i])`` ran for ``node``; ``created``
    is v̄i. ``StepKind.PARTIAL``: the partial adjoint ``created`` = v̄(k→i) was appended
    to ``node_to_grad[k]`` for ``input`` k of ``node`` i. The whole ``node_to_grad`` after a
    step is replayed from the steps by :meth:`Trace.state` (storing it in every step would
    make a trace grow with the square of the graph).
    """

    kind: StepKind
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
        self.steps.append(Step(StepKind.ADJOINT, node, None, created))

    def on_partial(self, node: Node, input: Node, created: Node) -> None:
        """``v̄(k→i)`` (``created``) was appended to ``node_to_grad[input]``. Not for a
        constant k: constants are not differentiated, so nothing reads a partial a rule
        gave one (``Switch`` does), and the lecture has no name for it."""
        if self.is_forward(input):
            self.steps.append(Step(StepKind.PARTIAL, node, input, created))

    def number(self, node: Node) -> int:
        """The lecture number i of a forward node (``v_i``)."""
        try:
            return self._numbers[node]
        except KeyError:
            raise GraphError(
                f"Trace.number: {getattr(node, 'name', node)} is not one of the forward nodes "
                f"v1 to v{len(self.forward)} of this trace of gradient({self.out.name})"
            ) from None

    def adjoint(self, node: Node) -> Node | None:
        """The node v̄i built for the forward node ``node`` (None if not reached)."""
        for s in self.steps:
            if s.kind is StepKind.ADJOINT and s.node is node:
                return s.created
        return None

    def lecture_names(self) -> LectureNames:
        """The names the finished run gave: the forward nodes in order, and every node it
        built (or reused) with all its roles (:meth:`roles`)."""
        replay = self.replayed(len(self.steps))
        built = dict.fromkeys(s.created for s in self.steps)  # each once: one can have many roles
        return LectureNames(self.forward, {node: replay.roles(node) for node in built})

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
        count = len(self.steps) if upto is None else self._checked(upto, what="upto") + 1
        return self.replayed(count).roles(node)

    def role(self, s: Step) -> str:
        """The name step ``s`` gives the node it built: ``v̄i`` or ``v̄(k→i)``."""
        i = self._numbers[s.node]
        return f"v̄{i}" if s.kind is StepKind.ADJOINT else f"v̄({self._numbers[s.input]}→{i})"

    def entry(self, owner: Node, source: Node | None) -> str:
        """The name of an entry of ``node_to_grad[owner]`` that node ``source`` appended
        (``v̄k`` for the seed, whose source is None)."""
        k = self._numbers[owner]
        return f"v̄{k}" if source is None else f"v̄({k}→{self._numbers[source]})"

    def _checked(self, step, last: int | None = None, what: str = "step") -> int:
        """``step`` if it is an integer from 0 to ``last`` (the last step's number unless
        given), else a clear error that calls it ``what``."""
        last = len(self.steps) - 1 if last is None else last
        if isinstance(step, bool) or not isinstance(step, Integral) or not 0 <= step <= last:
            raise OutOfRangeError(
                f"Trace: {what} must be an integer from 0 to {last} (this trace has "
                f"{tables.counted(len(self.steps), 'step')}), got {step!r}"
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
        return self.replayed(self._checked(upto, len(self.steps), "upto")).names

    def rule(self, step: int) -> str:
        """The partial adjoint of a ``StepKind.PARTIAL`` step as the op's rule built it, over the
        names known before the step: ``v̄4 × v3`` for v̄(2→4) (Mul's rule), ``v̄5 × cos(v2)``
        for a sine, or just ``v̄3`` when the rule built no new node (``v3 = v2 + 1``)."""
        s = self.steps[self._checked(step)]
        if s.kind is not StepKind.PARTIAL:
            raise ParameterError(
                f"Trace.rule: step {step} sums node_to_grad[{self._numbers[s.node]}]: no rule "
                "(only a partial-adjoint step has one)"
            )
        return _written(s.created, self.names(step))

    def describe(self, step: int, values: Mapping | None = None) -> str:
        """What line of the algorithm did at ``step``, in the lecture's notation.

        A partial-adjoint step shows the rule, e.g. ``v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3``.
        With ``values`` ({node: array} for the trace's nodes, e.g.
        ``course_lib.viz.steps.trace_values``), the step is also worked out with the
        forward values plugged in: ``… = v̄4 × v3 = 1.000 × 2.649 = 2.649``.
        """
        return self.replayed(self._checked(step)).describe_next(values)


@dataclass(frozen=True, eq=False)
class LectureNames:
    """What a picture needs of a finished run: ``forward``, the nodes v1, v2, … in order,
    and each node's ``roles`` (``["v̄3", "v̄(3→4)", "v̄(2→3)"]``: :meth:`Trace.roles`)."""

    forward: list[Node]
    roles: Mapping[Node, list[str]]


_NAMES_OF_RUN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # node -> LectureNames


def remember(trace: Trace) -> None:
    """Keep the names ``trace``'s run gave the backward nodes it built, for as long as those
    nodes live: the table holds them weakly, and the forward nodes it holds are older than
    the backward nodes (a node only refers to older ones), so nothing keeps them alive.
    Constants (a rule may return a shared one) are not keys: they live on."""
    names = trace.lecture_names()
    kept = LectureNames(names.forward, weakref.WeakKeyDictionary(names.roles))
    for node in names.roles:
        if not (trace.is_forward(node) or node.is_constant):
            _NAMES_OF_RUN[node] = kept


def names_of(nodes: Iterable[Node]) -> LectureNames | None:
    """The names of the run of ``grad`` or ``gradient_trace`` that built the first of
    ``nodes`` that a run built (None when none did)."""
    return next((_NAMES_OF_RUN[n] for n in nodes if n in _NAMES_OF_RUN), None)


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
        (adjoints if s.kind is StepKind.ADJOINT else partials).append(role)
        if s.kind is StepKind.PARTIAL:
            self.node_to_grad.setdefault(s.input, []).append(s.created)
            self.sources.setdefault(s.input, []).append(s.node)
        forward = self.trace.is_forward(s.created)  # a rule that returned a forward value
        if not forward and (s.kind is StepKind.ADJOINT or s.created not in self.names):
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
        if s.kind is StepKind.ADJOINT:  # node_to_grad[i] is complete: the step only sums it
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
    """A value as one number (``tables.number``), or None if it is not one number."""
    if value is None or getattr(value, "size", 1) != 1:
        return None
    return tables.number(value.reshape(()) if hasattr(value, "reshape") else value)


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
