"""The ``StepThrough`` player: every step of the backward algorithm in one HTML output.

Each step is a picture of the graph (as :func:`~course_lib.viz.steps.draw_step` draws it)
beside the step's ``node_to_grad`` and pseudo-code, written as HTML. The pictures share one
layout, made once on the graph of the last step, so the nodes stay where they are while the
backward graph grows. Graphviz runs three times whatever the number of steps: once for the
size of every look of every node (a label and a style it has at some step), once for the
layout, once to draw every look in its place; each step's picture is then the drawings of
the looks it shows. The work is the size of the pictures, where a layout per step cost a
super-linear ``dot`` run each (161 steps took 216 s).
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import graphviz

from .. import params
from ..autodiff.trace import StepKind, Trace
from ..errors import GraphError
from ..graph import Node
from ..tables import counted
from .alt import svg_with_alt
from .figure import MISSING_DOT, svg_titled
from .graphs import GRAPH_ATTRS, NODE_ATTRS
from .steps import (
    LINES_OF_KIND,
    PSEUDO_CODE,
    StepState,
    checked_trace,
    state_entries,
    trace_values,
)

PLAYER_SCRIPT = Path(__file__).with_name("player.js")
# Up to this many nodes dot searches for its best coordinates; beyond, it keeps its first
# feasible ones (nslimit=0): the search grows with the square of the long edges' virtual
# nodes times their number (6 s for the 169 nodes of 60 ops, 15 s for 150 ops' layout)
SEARCHED_LAYOUT = 100
MARGIN = 0.01  # inches added to the largest look of a node: the drawing rounds sizes
CELL = "border:1px solid #94a3b8;padding:2px 6px"
_FRAGMENT = re.compile(r'<g id="([ne]\d+)" class="(?:node|edge)">.*?</g>\n', re.S)
_COMMENT = re.compile(r"<!--.*?-->\n?", re.S)
_ID = re.compile(r' id="[^"]*"')


@dataclass
class Looks:
    """Every look (label and style) a node or an edge takes during the steps, each once."""

    nodes: list[tuple[Node, str, dict]] = field(default_factory=list)
    edges: list[tuple[Node, Node, int, dict]] = field(default_factory=list)
    _numbered: dict[tuple, int] = field(default_factory=dict)

    def node(self, node: Node, text: str, style: dict) -> int:
        """The number of this look of ``node`` (the looks of nodes are n0, n1, ...)."""
        return self._number(("n", node, text, *style.items()), self.nodes, (node, text, style))

    def edge(self, inp: Node, node: Node, k: int, style: dict) -> int:
        """The number of this look of the edge from input ``k`` of ``node`` (e0, e1, ...)."""
        return self._number(("e", inp, node, k, *style.items()), self.edges, (inp, node, k, style))

    def _number(self, key: tuple, looks: list, look: tuple) -> int:
        if key not in self._numbered:
            self._numbered[key] = len(looks)
            looks.append(look)
        return self._numbered[key]


@dataclass(frozen=True)
class Frame:
    """One step: what it did, the looks it shows, and its panels as HTML."""

    caption: str
    nodes: list[int]
    edges: list[int]
    panels: str


def frames(trace: Trace, values: Mapping, looks: Looks) -> list[Frame]:
    """Every step of ``trace`` as a :class:`Frame`, the looks it shows added to ``looks``."""
    state, found = StepState(trace, values), []
    for _ in trace.steps:
        state.advance()
        nodes = [looks.node(*look) for look in state.nodes()]
        edges = [looks.edge(*look) for look in state.edges()]
        found.append(Frame(state.caption, nodes, edges, _panels(state)))
    return found


def pictures(looks: Looks, steps: list[Frame]) -> list[str] | None:
    """The SVG picture of each step, or None when graphviz's ``dot`` is not installed."""
    try:
        sizes = _measured(looks)
        layout = _laid_out(looks, sizes)
        drawing = Drawing(_drawn(looks, sizes, layout))
    except graphviz.ExecutableNotFound:
        return None
    return [drawing.picture(step, _title(i, len(steps))) for i, step in enumerate(steps)]


def _title(step: int, steps: int) -> str:
    """The name of step ``step``'s picture (its SVG ``<title>``, which a browser shows as the
    picture's tooltip), as :func:`~course_lib.viz.steps.draw_step` names it."""
    return f"gradient(out), step {step + 1} of {steps}"


def _measured(looks: Looks) -> dict[Node, tuple[float, float]]:
    """Each node's width and height in inches: those of its largest look."""
    graph = graphviz.Digraph(node_attr=NODE_ATTRS)
    for i, (_, text, style) in enumerate(looks.nodes):
        graph.node(f"n{i}", text, pos="0,0", **style)
    sizes: dict[Node, tuple[float, float]] = {}
    measured = json.loads(graph.pipe(engine="neato", format="json0", neato_no_op=2))
    for found in _objects(measured):
        node = looks.nodes[int(found["name"][1:])][0]
        width, height = sizes.get(node, (0.0, 0.0))
        sizes[node] = (max(width, float(found["width"])), max(height, float(found["height"])))
    return {node: (w + MARGIN, h + MARGIN) for node, (w, h) in sizes.items()}


@dataclass(frozen=True)
class Layout:
    """Where dot put each node (its centre) and each edge (its spline), in points."""

    box: str
    positions: dict[Node, str]
    splines: dict[tuple[Node, Node, int], str]


def _laid_out(looks: Looks, sizes: dict) -> Layout:
    """One layout of every node and edge that any step shows, each at its largest size."""
    searched = len(sizes) <= SEARCHED_LAYOUT
    graph = graphviz.Digraph(graph_attr={**GRAPH_ATTRS, **({} if searched else {"nslimit": "0"})})
    names: dict[Node, str] = {}
    for node, _, style in looks.nodes:
        if node not in names:
            names[node] = f"v{len(names)}"
            shape = style.get("shape", "box")
            graph.node(names[node], "", shape=shape, **_fixed_size(*sizes[node]))
    edges = list(dict.fromkeys((inp, node, k) for inp, node, k, _ in looks.edges))
    for j, (inp, node, _) in enumerate(edges):
        graph.edge(names[inp], names[node], id=f"L{j}")
    laid_out = json.loads(graph.pipe(engine="dot", format="json0"))
    by_name = {node_name: node for node, node_name in names.items()}
    positions = {by_name[o["name"]]: o["pos"] for o in _objects(laid_out)}
    splines = {edges[int(e["id"][1:])]: e["pos"] for e in laid_out.get("edges", [])}
    return Layout(laid_out["bb"], positions, splines)


def _drawn(looks: Looks, sizes: dict, layout: Layout) -> str:
    """Every look drawn in its node's (or edge's) place, as one SVG (``neato -n2`` draws
    what it is given and lays out nothing)."""
    graph = graphviz.Digraph(graph_attr={"bb": layout.box}, node_attr=NODE_ATTRS)
    first_look: dict[Node, str] = {}
    for i, (node, text, style) in enumerate(looks.nodes):
        place = {"pos": layout.positions[node], **_fixed_size(*sizes[node])}
        graph.node(f"n{i}", text, id=f"n{i}", **place, **style)
        first_look.setdefault(node, f"n{i}")
    for j, (inp, node, k, style) in enumerate(looks.edges):
        spline = layout.splines[(inp, node, k)]
        graph.edge(first_look[inp], first_look[node], id=f"e{j}", pos=spline, **style)
    return graph.pipe(engine="neato", format="svg", neato_no_op=2, encoding="utf-8")


def _fixed_size(width: float, height: float) -> dict:
    return {"width": f"{width:.4f}", "height": f"{height:.4f}", "fixedsize": "true"}


def _objects(laid_out: dict) -> list[dict]:
    """The nodes of graphviz's JSON output (its subgraphs have no position)."""
    return [o for o in laid_out.get("objects", []) if "pos" in o]


class Drawing:
    """The SVG of every look, cut into one fragment per look, and put together again
    into one step's picture."""

    def __init__(self, svg: str):
        found = list(_FRAGMENT.finditer(svg))
        # the ids only cut the drawing: a page shows many pictures, and ids must be unique
        self.fragments = {m.group(1): _ID.sub("", m.group(0)) for m in found}
        head = _ID.sub("", _COMMENT.sub("", svg[svg.index("<svg") : found[0].start()]))
        self.head = head.replace("<svg", '<svg style="max-width: 100%; height: auto"', 1)
        self.tail = _COMMENT.sub("", svg[found[-1].end() :])

    def picture(self, step: Frame, title: str) -> str:
        """The picture of ``step``, named ``title`` (not graphviz's ``%3``): its looks of
        nodes, then of edges, as dot draws them."""
        looks = [f"n{i}" for i in step.nodes] + [f"e{j}" for j in step.edges]
        head = svg_titled(self.head, title)
        return head + "".join(self.fragments[look] for look in looks) + self.tail


def _panels(state: StepState) -> str:
    """``node_to_grad`` and the pseudo-code of a step, as HTML."""
    heading = f"{CELL};text-align:center;background:#e2e8f0"
    rows = [f'<tr><th colspan="2" style="{heading}">node_to_grad</th></tr>']
    for number, current, entries in state_entries(state):
        items = ", ".join(
            f'<b style="color:#b45309">{html.escape(label)}</b>' if new else html.escape(label)
            for label, new in entries
        )
        owner = f"{CELL};text-align:right" + (";background:#fee2e2" if current else "")
        row = '<tr aria-current="true">' if current else "<tr>"  # node i: said, not only red
        rows.append(
            f'{row}<td style="{owner}">v{number}:</td>'
            f'<td style="{CELL};text-align:left">[{items}]</td></tr>'
        )
    table = (
        '<table style="border-collapse:collapse;margin:0 0 10px;'
        f'font:12px Helvetica,Arial,sans-serif">{"".join(rows)}</table>'
    )
    # it shrinks, and scrolls, only alone on a line narrower than itself (a phone's)
    panel = "flex:0 1 auto;min-width:0;overflow-x:auto"
    return f'<div style="{panel}">{table}{_code(state.step.kind)}</div>'


def _code(kind: StepKind) -> str:
    """The pseudo-code, the lines a step of this kind runs highlighted (a ``<mark>``: said
    by screen readers, and still marked where a page's styles are stripped)."""
    lines = "".join(
        f'<mark style="display:block;background:#fde047;color:inherit">{html.escape(line)}</mark>'
        if i in LINES_OF_KIND[kind]
        else f'<span style="display:block">{html.escape(line)}</span>'
        for i, line in enumerate(PSEUDO_CODE)
    )
    return f'<pre style="margin:0;font:12px monospace;line-height:1.4">{lines}</pre>'


def _page(step: Frame, picture: str | None) -> str:
    """A step's panels and picture side by side (the install hint without ``dot``)."""
    if picture is None:
        shown = f"<pre>{html.escape(MISSING_DOT)}</pre>"
    else:
        shown = svg_with_alt(picture, f"the graph after this step: {step.caption}")
    return (
        '<div style="display:flex;flex-wrap:wrap;gap:8px 16px;align-items:flex-start">'
        f'{step.panels}<div style="flex:1 1 360px;min-width:0">{shown}</div></div>'
    )


class StepThrough:
    """A player for a :class:`~course_lib.Trace`: play, previous, a slider and next.

    Every step is drawn once, up front, into one self-contained HTML output: all the
    pictures (one layout for all, see the module's docstring), and a small script
    (``player.js``, no library, nothing fetched) that adds the controls and shows one
    picture at a time. It needs no kernel, so it works the same in JupyterLab and in a
    notebook exported to HTML; where scripts do not run (an untrusted notebook, GitHub)
    the steps are shown one after another. A trace of more than ``max_steps`` steps is
    refused: the output grows with the square of the steps.
    """

    def __init__(
        self,
        trace: Trace,
        feed: Mapping | None = None,
        interval_ms: int = 1500,
        max_steps: int = 100,
    ):
        checked_trace(trace, "StepThrough")
        max_steps = params.count(max_steps, "StepThrough: max_steps", minimum=1)
        params.real(interval_ms, "StepThrough: interval_ms", minimum=1)
        if len(trace.steps) > max_steps:  # 100 steps take 11 MB, 200 take 43 MB
            raise GraphError(
                f"StepThrough: {counted(len(trace.steps), 'step')} is too many to play "
                f"(max_steps={max_steps}): each step is a picture of the whole graph, so the "
                "output grows with the square of the steps; step through a smaller graph, draw "
                "chosen steps with draw_step, or pass a larger max_steps"
            )
        self.trace = trace
        self.interval_ms = interval_ms
        values = trace_values(trace, feed) if feed is not None else {}
        looks = Looks()
        steps = frames(trace, values, looks)
        drawn = pictures(looks, steps) or [None] * len(steps)
        self.captions = [step.caption for step in steps]
        self.pages = [_page(step, picture) for step, picture in zip(steps, drawn)]

    def __len__(self) -> int:
        return len(self.pages)

    def __repr__(self) -> str:
        lines = [f"StepThrough: {counted(len(self), 'step')} of gradient(out)"]
        lines += [f"  {i + 1}. {caption}" for i, caption in enumerate(self.captions)]
        return "\n".join(lines)

    def html(self) -> str:
        """The player: one ``<figure class="cl-step">`` per step (caption and picture),
        then the script that turns them into a player."""
        frames_html = "".join(
            f'<figure class="cl-step" style="margin:0"><figcaption><b>step {i + 1} / '
            f"{len(self)}</b> &#160; <code>{html.escape(caption)}</code>"
            f"</figcaption>{page}</figure>"
            for i, (caption, page) in enumerate(zip(self.captions, self.pages))
        )
        digest = hashlib.blake2b(frames_html.encode(), digest_size=8).hexdigest()
        script = PLAYER_SCRIPT.read_text(encoding="utf-8").replace("__PLAYER__", digest)
        return (
            f'<div class="cl-player" data-player="{digest}" '
            f'data-interval="{int(self.interval_ms)}">{frames_html}<script>{script}</script></div>'
        )

    def _repr_html_(self) -> str:
        return self.html()
