"""The backward algorithm, one step at a time: ``draw_step`` (and ``StepState``, what the
picture after a step shows, which the ``StepThrough`` player of ``player.py`` shares).

Each picture shows the forward graph with the current node i highlighted, the edge
(k → i) being processed, the backward nodes built so far (the node the step just built in
yellow), the nodes already finished greyed out, the ``node_to_grad`` dictionary, and the
lecture's pseudo-code with the line being executed highlighted. Its caption says the step
(``Trace.describe``): the rule an op built, worked out with the values when there are some,
``v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3 = 1.000 × 2.649 = 2.649``.

A step can build nothing: a sum of one partial adjoint *is* that node (v̄3 ≡ v̄(3→4)), and an
identity rule returns the adjoint it was given (``v3 = v2 + 1``: v̄(2→3) is v̄3). Such a step
draws the node it reuses with a thick dotted amber outline, not in yellow, and its caption
says so: ``… — reused: no new node (v̄3 is the node v̄(3→4))`` (:attr:`StepState.caption`,
which the alt text and the player's captions, slider and status line say too).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Mapping
from numbers import Integral
from operator import attrgetter

from ..autodiff.trace import Replay, Step, StepKind, Trace
from ..errors import GraphError, OutOfRangeError
from ..graph import Node
from ..runtime import Executor
from ..tables import counted
from .figure import GraphFigure, dot_text, format_value, html_text
from .graphs import EDGE_STYLES, GRAPH_ATTRS, NODE_ATTRS, STAGE_STYLES, VARIABLE_STYLE, fed_values
from .labels import is_inline_constant, lecture_names, node_text

PSEUDO_CODE = [
    "gradient(out):",
    "    node_to_grad = {out: [1]}",
    "    for i in reverse_topo_order(out):",
    "        v̄i = sum(node_to_grad[i])",
    "        for k in inputs(i):",
    "            v̄(k→i) = v̄i · ∂vi/∂vk",
    "            append v̄(k→i) to node_to_grad[k]",
    "    return adjoints of the inputs",
]
LINES_OF_KIND = {StepKind.ADJOINT: (2, 3), StepKind.PARTIAL: (4, 5, 6)}

CURRENT = {"color": "#dc2626", "penwidth": "3"}
INPUT_K = {"color": "#2563eb", "penwidth": "3"}
CREATED = {"fillcolor": "#fde047", "penwidth": "2.5"}
# a node the step reuses (it built none): its own fill, a thick dotted outline (a pattern, not
# only a colour, tells it from a node built) in the amber of the entry just appended: 5.0:1
# on white, 4.4:1 on the backward fill (WCAG's 3:1 for a border)
REUSED = {"style": "rounded,filled,dotted", "color": "#b45309", "penwidth": "3"}
REUSED_NOTE = "reused: no new node"
# grey, yet its text keeps WCAG AA's 4.5:1 on its fill (#6b7280 had 3.9:1), its border 3:1
DONE = {"fillcolor": "#e5e7eb", "fontcolor": "#4b5563", "color": "#6b7280"}


class StepState:
    """What the picture after a step shows, brought up to date one step at a time: the
    algorithm's bookkeeping (:class:`~course_lib.autodiff.trace.Replay`: names, roles,
    ``node_to_grad``), the backward nodes built so far and the forward nodes finished.
    ``values`` (:func:`trace_values`) puts numbers in the labels and the descriptions.

    Advancing reads each step once; a label is written once for all the steps that show it
    unchanged, so drawing every step costs the size of the pictures, not more.
    """

    def __init__(self, trace: Trace, values: Mapping | None = None):
        self.trace = trace
        self.values = values or {}
        self.replay = Replay(trace)
        self.step: Step | None = None  # the step replayed last
        self.said = ""  # what it did (Trace.describe)
        self.reused: str | None = None  # the earlier name of the node it reused, if it did
        self.backward: list[Node] = []  # backward nodes built so far, in creation order
        self.done: set[Node] = set()  # forward nodes whose adjoint work is finished
        self._drawn: set[Node] = set()  # the backward nodes, as a set
        self._numbers = {n: trace.number(n) for n in trace.forward}
        self._labels: dict[tuple, str] = {}

    def advance(self) -> Step:
        """Replay the next step."""
        self.said = self.replay.describe_next(self.values)
        # the step built no node when the node it gives has a name already (an earlier
        # step's, or a forward node's): the trace's own test of a new node (describe_next)
        self.reused = self.replay.names.get(self.trace.steps[self.replay.count].created)
        s = self.replay.advance()
        if self.step is not None and self.step.node is not s.node:
            self.done.add(self.step.node)  # the steps of one node i come one after another
        self.step = s
        self._add_backward(s.created)
        return s

    @property
    def caption(self) -> str:
        """What the step did (:attr:`said`), and, when it built no node, which node it
        reused: ``i = 3: v̄3 = v̄(3→4) = 1.649 — reused: no new node (v̄3 is the node
        v̄(3→4))``."""
        if self.reused is None:
            return self.said
        role = self.trace.role(self.step)
        what = f"{role} is the node {self.reused}" if role != self.reused else f"{role} again"
        return f"{self.said} — {REUSED_NOTE} ({what})"

    def _add_backward(self, created: Node) -> None:
        """Add ``created`` and what it is built from (not drawn yet, not forward)."""
        new, stack = [], [created]
        while stack:
            node = stack.pop()
            if node in self._drawn or self.trace.is_forward(node) or is_inline_constant(node):
                continue
            self._drawn.add(node)
            new.append(node)
            stack.extend(node.inputs)
        for node in new:  # nearly always the newest, so inserting it is cheap (sorting was not)
            insort(self.backward, node, key=attrgetter("seq"))

    def nodes(self) -> list[tuple[Node, str, dict]]:
        """(node, label, style) of every node of the picture: forward, then backward."""
        roles = {n: self.replay.roles(n) for n in self.backward}
        names = lecture_names(self.trace.forward + self.backward, self._numbers, roles)
        forward = [
            (n, self._label(n, names, ()), _forward_style(n, self.step, self.done))
            for n in self.trace.forward
        ]
        return forward + [
            (n, self._label(n, names, roles[n]), _backward_style(n, self.step, self.reused))
            for n in self.backward
        ]

    def _label(self, node: Node, names: dict, roles: list[str]) -> str:
        """:func:`node_text`, written once per look: it reads only the names of the node
        and its inputs, and the node's roles."""
        key = (node, *(names.get(n) for n in (node, *node.inputs)), *roles)
        if key not in self._labels:
            self._labels[key] = node_text(node, names, self.values, roles)
        return self._labels[key]

    def edges(self) -> list[tuple[Node, Node, int, dict]]:
        """(input, node, input position, style) of every edge of the picture."""
        drawn = self._drawn.union(self.trace.forward)
        return [
            (inp, node, k, _edge_style(node, inp, self.step, self.trace.is_forward(node)))
            for node in self.trace.forward + self.backward
            for k, inp in enumerate(node.inputs)
            if inp in drawn
        ]


def replayed(trace: Trace, steps: int, values: Mapping | None = None) -> StepState:
    """The :class:`StepState` after the first ``steps`` steps of ``trace``."""
    state = StepState(trace, values)
    for _ in range(steps):
        state.advance()
    return state


def trace_values(trace: Trace, feed: Mapping) -> dict:
    """Values of every forward and backward node of ``trace`` for ``feed`` (one run)."""
    backward = replayed(trace, len(trace.steps)).backward
    nodes = [n for n in trace.forward + backward if not n.is_variable]
    run = Executor(nodes)
    values = dict(zip(nodes, run.run(feed, allow_unused=True)))
    values.update(fed_values(trace.forward, feed))
    return values


def draw_step(
    trace: Trace, step: int, feed: Mapping | None = None, values: dict | None = None
) -> GraphFigure:
    """The state of ``gradient(out)`` after ``trace.steps[step]``.

    ``feed`` (or precomputed ``values`` from :func:`trace_values`) adds numbers to
    every node and to the ``node_to_grad`` panel.
    """
    checked_trace(trace, "draw_step")
    count = len(trace.steps)
    if isinstance(step, bool) or not isinstance(step, Integral) or not 0 <= step < count:
        raise OutOfRangeError(
            f"draw_step: step must be an integer from 0 to {count - 1}, got {step!r}: this "
            f"trace has {counted(count, 'step')}"
        )
    step = int(step)
    if values is None and feed is not None:
        values = trace_values(trace, feed)
    values = values or {}
    state = replayed(trace, step + 1, values)
    fig = GraphFigure(
        f"gradient(out) step {step + 1}/{len(trace.steps)}: {state.caption}\n"
        f"node_to_grad = {state.replay.state_text()}",
        title=f"gradient(out), step {step + 1} of {len(trace.steps)}",
        graph_attr={
            **GRAPH_ATTRS,
            "label": dot_text(state.caption),
            "labelloc": "b",
            "fontsize": "13",
        },
        node_attr=NODE_ATTRS,
    )
    ids = {n: f"f{i}" for i, n in enumerate(trace.forward)}
    ids.update({n: f"b{i}" for i, n in enumerate(state.backward)})
    for node, text, style in state.nodes():
        fig.node(ids[node], text, **style)
    for inp, node, _, style in state.edges():
        fig.edge(ids[inp], ids[node], **style)
    with fig.subgraph(name="cluster_panels") as panel:
        panel.attr(style="invis", rank="sink")
        panel.node("node_to_grad", _state_table(state), shape="plaintext")
        panel.node("code", _code_table(state.step.kind), shape="plaintext")
    return fig


def checked_trace(trace: Trace, caller: str, steps: bool = True) -> Trace:
    """``trace`` if it is a :class:`Trace` (with steps to show, unless ``steps`` is False),
    else a clear error naming ``caller``."""
    if not isinstance(trace, Trace):
        raise GraphError(
            f"{caller}: expected the Trace of a gradient_trace run (grads, trace = "
            f"cl.gradient_trace(out, wrt)), got a {type(trace).__name__}"
        )
    if steps and not trace.steps:
        name = getattr(trace.out, "name", trace.out)
        raise GraphError(
            f"{caller}: this trace of gradient({name}) has 0 steps: {name} does not depend "
            "on the nodes its gradient was asked for, so the algorithm visited no node"
        )
    return trace


def _forward_style(node: Node, s: Step, done: set) -> dict:
    """A forward node's look: finished (grey), then current node i (red) or input k (blue)."""
    style = dict(VARIABLE_STYLE if node.is_variable else STAGE_STYLES["forward"])
    if node in done:
        style.update(DONE)
    if node is s.node:
        style.update(CURRENT)
    elif node is s.input:
        style.update(INPUT_K)
    return style


def _backward_style(node: Node, s: Step, reused: str | None = None) -> dict:
    """A backward node's look: the node the step built in yellow, the node it reused
    (``reused``: its earlier name) outlined in dotted amber."""
    if node is not s.created:
        return dict(STAGE_STYLES["backward"])
    return {**STAGE_STYLES["backward"], **(CREATED if reused is None else REUSED)}


def _edge_style(node: Node, inp: Node, s: Step, is_forward: bool) -> dict:
    """The edge ``inp → node``; the edge k → i of a partial-adjoint step is highlighted."""
    style = dict(EDGE_STYLES["forward" if is_forward else "backward"])
    if s.kind is StepKind.PARTIAL and inp is s.input and node is s.node:
        style.update(CURRENT)
    return style


def state_entries(state: StepState):
    """``node_to_grad`` as the panels show it: for each owner (highest number first), its
    number, whether it is node i, and its entries (text with the value when known, whether
    it is the entry the step just appended)."""
    s = state.step
    for owner, parts in state.replay.entries():
        entries = []
        for j, (label, part) in enumerate(parts):
            if part in state.values:
                label += f" = {format_value(state.values[part])}"
            new = s.kind is StepKind.PARTIAL and owner is s.input and j == len(parts) - 1
            entries.append((label, new))
        yield state.trace.number(owner), owner is s.node, entries


def _state_table(state: StepState) -> str:
    rows = ['<tr><td colspan="2" bgcolor="#e2e8f0"><b>node_to_grad</b></td></tr>']
    for number, current, entries in state_entries(state):
        cells = [
            f'<font color="#b45309"><b>{html_text(label)}</b></font>' if new else html_text(label)
            for label, new in entries
        ]
        bg = ' bgcolor="#fee2e2"' if current else ""
        rows.append(
            f'<tr><td align="right"{bg}>v{number}:</td>'
            f'<td align="left">&#91;{", ".join(cells)}&#93;</td></tr>'
        )
    return _table(rows, cellborder=1, cellpadding=4)


def _code_table(kind: StepKind) -> str:
    rows = []
    for i, line in enumerate(PSEUDO_CODE):
        bg = ' bgcolor="#fde047"' if i in LINES_OF_KIND[kind] else ""
        text = html_text(line).replace(" ", "&#160;")
        rows.append(f'<tr><td align="left"{bg}><font face="Courier">{text}</font></td></tr>')
    return _table(rows, cellborder=0, cellpadding=2)


def _table(rows: list[str], cellborder: int, cellpadding: int) -> str:
    attrs = f'border="0" cellborder="{cellborder}" cellspacing="0" cellpadding="{cellpadding}"'
    return f"<<table {attrs}>{''.join(rows)}</table>>"
