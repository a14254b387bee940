"""``draw_graph``: a computational graph (forward, backward and update stages) as a picture."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import GraphError
from ..graph import Node, node_list, topological_order
from ..runtime import Executor
from .figure import GraphFigure, format_value
from .labels import definition, is_inline_constant


def _style(shape: str, style: str, fill: str, color: str | None = None) -> dict:
    """Graphviz node attributes (in this order, so the DOT text never changes)."""
    return {"shape": shape, "style": style, "fillcolor": fill} | ({"color": color} if color else {})


STAGE_STYLES = {
    "forward": _style("box", "rounded,filled", "#f8fafc"),
    "backward": _style("box", "rounded,filled,dashed", "#ffedd5", "#c2410c"),
    "update": _style("box", "rounded,filled", "#dcfce7", "#15803d"),
}
VARIABLE_STYLE = _style("ellipse", "filled", "#dbeafe", "#1d4ed8")
FUSED_STYLE = _style("box", "rounded,filled", "#fef9c3", "#a16207")
CONSTANT_STYLE = _style("note", "filled", "#f1f5f9", "#64748b")
EDGE_STYLES = {
    "forward": {},
    "backward": {"color": "#c2410c", "style": "dashed"},
    "update": {"color": "#15803d"},
}
GRAPH_ATTRS = {"rankdir": "LR", "fontname": "Helvetica", "nodesep": "0.25", "ranksep": "0.35"}
NODE_ATTRS = {"fontname": "Helvetica", "fontsize": "11"}


def draw_graph(
    outputs: Node | Sequence[Node],
    feed: Mapping | None = None,
    *,
    backward: Node | Sequence[Node] = (),
    update: Node | Sequence[Node] = (),
    labels: Mapping[Node, str] | None = None,
    title: str | None = None,
    rankdir: str = "LR",
    max_nodes: int = 200,
) -> GraphFigure:
    """Draw the graph of ``outputs`` (forward), plus ``backward`` and ``update`` stages.

    Nodes are numbered v1, v2, ... in topological order and labelled with their
    definition (``v4 = v2 × v3``); variables are ellipses, backward nodes dashed orange,
    update nodes green. With ``feed``, each node also shows its value. ``labels`` renames
    chosen nodes (e.g. ``{dw: "∂L/∂w"}``). The DOT text is identical on every run.
    """
    stages = [
        (stage, node_list(() if nodes is None else nodes, f"draw_graph: {stage}"))
        for stage, nodes in (("forward", outputs), ("backward", backward), ("update", update))
    ]
    stage_of = _stages(stages)
    order = [
        n
        for n in topological_order([r for _, roots in stages for r in roots])
        if not is_inline_constant(n)
    ]
    if len(order) > max_nodes:
        raise GraphError(
            f"draw_graph: {len(order)} nodes is too many to read (max_nodes={max_nodes}); "
            "draw a smaller graph or pass a larger max_nodes"
        )
    names = {n: f"v{i + 1}" for i, n in enumerate(order)}
    names.update(labels or {})
    values = _values(order, feed)
    fig = GraphFigure(
        _summary(order, names, stage_of),
        graph_attr={
            **GRAPH_ATTRS,
            "rankdir": rankdir,
            **({"label": title, "labelloc": "t"} if title else {}),
        },
        node_attr=NODE_ATTRS,
    )
    ids = {n: f"n{i}" for i, n in enumerate(order)}
    for node in order:
        text = definition(node, names)
        if node in values:
            text += f"\n= {format_value(values[node])}"
        fig.node(ids[node], text, **_style(node, stage_of[node]))
    for node in order:
        for inp in node.inputs:
            if inp in ids:
                fig.edge(ids[inp], ids[node], **EDGE_STYLES[stage_of[node]])
    return fig


def _stages(stages: list[tuple[str, list[Node]]]) -> dict[Node, str]:
    """Each node's stage: the first of forward, backward, update whose outputs reach it."""
    stage_of: dict[Node, str] = {}
    for stage, roots in stages:
        for node in topological_order(roots):
            stage_of.setdefault(node, stage)
    return stage_of


def _style(node: Node, stage: str) -> dict:
    if node.is_variable:
        return VARIABLE_STYLE
    if node.is_constant:
        return CONSTANT_STYLE
    if hasattr(node.op, "formula") and stage == "forward":
        return FUSED_STYLE
    return STAGE_STYLES[stage]


def _values(order: list[Node], feed: Mapping | None) -> dict:
    if feed is None:
        return {}
    values = fed_values(order, feed)
    computed = [n for n in order if not n.is_variable]
    if computed:
        values.update(zip(computed, Executor(computed).run(feed, allow_unused=True)))
    return values


def fed_values(nodes: Sequence[Node], feed: Mapping) -> dict:
    """The fed value of each variable among ``nodes`` (feed keys: nodes or names)."""
    values = {}
    for node in nodes:
        if node.is_variable:
            if node in feed:
                values[node] = feed[node]
            elif node.name in feed:
                values[node] = feed[node.name]
    return values


def _summary(order: list[Node], names: dict, stage_of: dict) -> str:
    counts = {
        s: sum(1 for n in order if stage_of[n] == s) for s in ("forward", "backward", "update")
    }
    head = ", ".join(f"{c} {s}" for s, c in counts.items() if c)
    lines = [f"graph with {len(order)} nodes ({head})"]
    lines += [f"  {definition(n, names)}" for n in order[:40]]
    if len(order) > 40:
        lines.append(f"  … and {len(order) - 40} more")
    return "\n".join(lines)
