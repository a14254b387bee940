"""The backward algorithm, one step at a time: ``draw_step`` and the ``StepThrough`` player.

Each picture shows the forward graph with the current node i highlighted, the edge
(k → i) being processed, the backward nodes built so far (the partial adjoint just created
in yellow), the nodes already finished greyed out, the ``node_to_grad`` dictionary, and the
lecture's pseudo-code with the line being executed highlighted. Its caption says the step
(``Trace.describe``): the rule an op built, worked out with the values when there are some,
``v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3 = 1.000 × 2.649 = 2.649``.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path

from ..autodiff.reverse import Step, Trace
from ..graph import Node
from ..runtime import Executor
from .figure import GraphFigure, format_value, html_text
from .graphs import EDGE_STYLES, GRAPH_ATTRS, NODE_ATTRS, STAGE_STYLES, VARIABLE_STYLE, fed_values
from .labels import is_inline_constant, lecture_names, node_text

PLAYER_SCRIPT = Path(__file__).with_name("player.js")
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
LINES_OF_KIND = {"adjoint": (2, 3), "partial": (4, 5, 6)}

CURRENT = {"color": "#dc2626", "penwidth": "3"}
INPUT_K = {"color": "#2563eb", "penwidth": "3"}
CREATED = {"fillcolor": "#fde047", "penwidth": "2.5"}
DONE = {"fillcolor": "#e5e7eb", "fontcolor": "#6b7280", "color": "#9ca3af"}


def _backward_nodes(trace: Trace, upto: int, forward: set) -> list[Node]:
    """Backward-graph nodes built by steps 0..upto, in the order they were built."""
    found: dict[Node, None] = {}
    for step in trace.steps[: upto + 1]:
        stack = [step.created]
        while stack:
            node = stack.pop()
            if node in found or node in forward or is_inline_constant(node):
                continue
            found[node] = None
            stack.extend(node.inputs)
    return sorted(found, key=lambda n: n.seq)


def trace_values(trace: Trace, feed: Mapping) -> dict:
    """Values of every forward and backward node of ``trace`` for ``feed`` (one run)."""
    backward = _backward_nodes(trace, len(trace.steps) - 1, set(trace.forward))
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
    if not 0 <= step < len(trace.steps):
        raise IndexError(f"step {step} is out of range: this trace has {len(trace.steps)} steps")
    if values is None and feed is not None:
        values = trace_values(trace, feed)
    values = values or {}
    s = trace.steps[step]
    forward = set(trace.forward)
    backward = _backward_nodes(trace, step, forward)
    roles = {n: trace.roles(n, upto=step) for n in backward}
    numbers = {n: trace.number(n) for n in trace.forward}
    names = lecture_names(trace.forward + backward, numbers, roles)
    done = _finished_before(trace, step)
    said = trace.describe(step, values)  # with values: worked out with the numbers
    fig = GraphFigure(
        f"gradient(out) step {step + 1}/{len(trace.steps)}: {said}\n"
        f"node_to_grad = {trace.state_text(step)}",
        graph_attr={
            **GRAPH_ATTRS,
            "label": said,
            "labelloc": "b",
            "fontsize": "13",
        },
        node_attr=NODE_ATTRS,
    )
    ids = {n: f"f{i}" for i, n in enumerate(trace.forward)}
    ids.update({n: f"b{i}" for i, n in enumerate(backward)})
    for node in trace.forward:
        fig.node(ids[node], node_text(node, names, values), **_forward_style(node, s, done))
    for node in backward:
        style = {**STAGE_STYLES["backward"], **(CREATED if node is s.created else {})}
        fig.node(ids[node], node_text(node, names, values, roles[node]), **style)
    for node in trace.forward + backward:
        for inp in (i for i in node.inputs if i in ids):
            fig.edge(ids[inp], ids[node], **_edge_style(node, inp, s, node in forward))
    with fig.subgraph(name="cluster_panels") as panel:
        panel.attr(style="invis", rank="sink")
        panel.node("node_to_grad", _state_table(trace, step, values), shape="plaintext")
        panel.node("code", _code_table(s.kind), shape="plaintext")
    return fig


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


def _edge_style(node: Node, inp: Node, s: Step, is_forward: bool) -> dict:
    """The edge ``inp → node``; the edge k → i of a partial-adjoint step is highlighted."""
    style = dict(EDGE_STYLES["forward" if is_forward else "backward"])
    if s.kind == "partial" and inp is s.input and node is s.node:
        style.update(CURRENT)
    return style


def _finished_before(trace: Trace, step: int) -> set:
    """Forward nodes whose adjoint and partial adjoints were all done before ``step``."""
    current = trace.steps[step].node
    done, seen_current = set(), False
    for s in trace.steps[: step + 1]:
        if s.node is current:
            seen_current = True
        elif not seen_current:
            done.add(s.node)
    return done


def _state_table(trace: Trace, step: int, values: dict) -> str:
    s = trace.steps[step]
    rows = ['<tr><td colspan="2" bgcolor="#e2e8f0"><b>node_to_grad</b></td></tr>']
    for owner, parts in trace.entries(step):
        cells = []
        for j, (label, part) in enumerate(parts):
            if part in values:
                label += f" = {format_value(values[part])}"
            new = s.kind == "partial" and owner is s.input and j == len(parts) - 1
            cells.append(
                f'<font color="#b45309"><b>{html_text(label)}</b></font>'
                if new
                else html_text(label)
            )
        bg = ' bgcolor="#fee2e2"' if owner is s.node else ""
        rows.append(
            f'<tr><td align="right"{bg}>v{trace.number(owner)}:</td>'
            f'<td align="left">&#91;{", ".join(cells)}&#93;</td></tr>'
        )
    return _table(rows, cellborder=1, cellpadding=4)


def _code_table(kind: str) -> str:
    rows = []
    for i, line in enumerate(PSEUDO_CODE):
        bg = ' bgcolor="#fde047"' if i in LINES_OF_KIND[kind] else ""
        text = html_text(line).replace(" ", "&#160;")
        rows.append(f'<tr><td align="left"{bg}><font face="Courier">{text}</font></td></tr>')
    return _table(rows, cellborder=0, cellpadding=2)


def _table(rows: list[str], cellborder: int, cellpadding: int) -> str:
    attrs = f'border="0" cellborder="{cellborder}" cellspacing="0" cellpadding="{cellpadding}"'
    return f"<<table {attrs}>{''.join(rows)}</table>>"


class StepThrough:
    """A player for a :class:`~course_lib.Trace`: play, previous, a slider and next.

    Every step is drawn once, up front, into one self-contained HTML output: all the
    pictures, and a small script (``player.js``, no library, nothing fetched) that adds the
    controls and shows one picture at a time. It needs no kernel, so it works the same in
    JupyterLab and in a notebook exported to HTML; where scripts do not run (an untrusted
    notebook, GitHub) the steps are shown one after another.
    """

    def __init__(self, trace: Trace, feed: Mapping | None = None, interval_ms: int = 1500):
        self.trace = trace
        self.interval_ms = interval_ms
        values = trace_values(trace, feed) if feed is not None else None
        self.figures = [draw_step(trace, i, values=values) for i in range(len(trace.steps))]
        self.pages = [fig.html() for fig in self.figures]
        self.captions = [trace.describe(i, values) for i in range(len(trace.steps))]

    def __len__(self) -> int:
        return len(self.pages)

    def __repr__(self) -> str:
        lines = [f"StepThrough: {len(self)} steps of gradient(out)"]
        lines += [f"  {i + 1}. {caption}" for i, caption in enumerate(self.captions)]
        return "\n".join(lines)

    def html(self) -> str:
        """The player: one ``<figure class="cl-step">`` per step (caption and picture),
        then the script that turns them into a player."""
        frames = "".join(
            f'<figure class="cl-step" style="margin:0"><figcaption><b>step {i + 1} / '
            f"{len(self)}</b> &#160; <code>{html.escape(caption)}</code>"
            f"</figcaption>{page}</figure>"
            for i, (caption, page) in enumerate(zip(self.captions, self.pages))
        )
        script = PLAYER_SCRIPT.read_text(encoding="utf-8")
        return (
            f'<div class="cl-player" data-interval="{int(self.interval_ms)}">'
            f"{frames}<script>{script}</script></div>"
        )

    def _repr_html_(self) -> str:
        return self.html()
