"""``draw_graph``: a computational graph (forward, tangent, backward and update stages) as a
picture, in the lecture's names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import params
from ..autodiff import Trace, tangent_map
from ..autodiff.trace import LectureNames, names_of
from ..errors import GraphError, ParameterError
from ..graph import Node, constant, node_list, topological_order
from ..runtime import Executor
from ..tables import counted
from .figure import GraphFigure, dot_text
from .labels import (
    aliases,
    definition,
    is_inline_constant,
    lecture_names,
    node_text,
    reference,
    v_numbers,
)


def _style(shape: str, style: str, fill: str, color: str | None = None) -> dict:
    """Graphviz node attributes (in this order, so the DOT text never changes)."""
    return {"shape": shape, "style": style, "fillcolor": fill} | ({"color": color} if color else {})


STAGES = ("forward", "tangent", "backward", "second backward", "update")
STAGE_STYLES = {
    "forward": _style("box", "rounded,filled", "#f8fafc"),
    "tangent": _style("box", "rounded,filled", "#ede9fe", "#6d28d9"),
    "backward": _style("box", "rounded,filled,dashed", "#ffedd5", "#c2410c"),
    "second backward": _style("box", "rounded,filled,dashed", "#fce7f3", "#be185d"),
    "update": _style("box", "rounded,filled", "#dcfce7", "#15803d"),
}
VARIABLE_STYLE = _style("ellipse", "filled", "#dbeafe", "#1d4ed8")
FUSED_STYLE = _style("box", "rounded,filled", "#fef9c3", "#a16207")
CONSTANT_STYLE = _style("note", "filled", "#f1f5f9", "#64748b")
EDGE_STYLES = {
    "forward": {},
    "tangent": {"color": "#6d28d9", "style": "dotted"},
    "backward": {"color": "#c2410c", "style": "dashed"},
    "second backward": {"color": "#be185d", "style": "dashed"},
    "update": {"color": "#15803d"},
}
GRAPH_ATTRS = {"rankdir": "LR", "fontname": "Helvetica", "nodesep": "0.25", "ranksep": "0.35"}
# Beyond draw_graph's default max_nodes, dot keeps its first feasible coordinates
# (nslimit=0) instead of searching for the best: the search took over 300 s at 900 nodes
SEARCHED_NODES = 200
RANKDIRS = ("LR", "TB", "RL", "BT")
CLUSTER_ATTRS = {"style": "rounded,dashed", "color": "#94a3b8", "labeljust": "l", "fontsize": "12"}
NODE_ATTRS = {"fontname": "Helvetica", "fontsize": "11"}


def draw_graph(
    outputs: Node | Sequence[Node],
    feed: Mapping | None = None,
    *,
    tangents: Mapping[Node, object] | None = None,
    backward: Node | Sequence[Node] = (),
    second_backward: Node | Sequence[Node] = (),
    update: Node | Sequence[Node] = (),
    trace: Trace | None = None,
    numbering: Sequence[Node] | None = None,
    labels: Mapping[Node, str] | None = None,
    title: str | None = None,
    rankdir: str = "LR",
    clusters: bool = False,
    max_nodes: int = 200,
) -> GraphFigure:
    """Draw the graph of ``outputs`` (forward), and its tangent, backward, second backward
    and update stages.

    Names are the lecture's. Forward values are v1, v2, … in topological order, inputs
    included (``v1 = x1``), constants not counted; each node is written as its definition
    (``v4 = v2 × v3``, scalar constants inline). Variables are blue ellipses, tangent nodes
    violet, backward nodes dashed orange (a second backward pass dashed pink), update nodes
    green; with ``feed`` every node also shows its value. The DOT text is identical on every
    run.

    Parameters
    ----------
    outputs : Node or list of Node
        The forward graph: these nodes and everything they depend on.
    feed : mapping, optional
        Values of the variables ({node or name: array}); adds each node's value.
    tangents : mapping, optional
        Forward-mode seeds {variable: direction}, as for :func:`course_lib.jvp`: draws the
        tangent graph, each tangent named after its node (v̇1 = 1, v̇4 = t1 + t2).
    backward, update : Node or list of Node
        Nodes of a backward graph (gradients) and of an update (new parameters). A backward
        graph built by ``grad`` or ``gradient_trace`` has the lecture's names without a
        ``trace``: the run kept them (v̄4, v̄(2→4), v̄2 = v̄(2→4) + v̄3).
    second_backward : Node or list of Node
        Nodes of a second backward pass (``grad`` of a gradient: second derivatives); its
        new nodes are drawn in a style and box of their own.
    trace : Trace, optional
        The :class:`~course_lib.Trace` of the ``gradient_trace`` run that built
        ``backward`` (by default, the run that built it): adjoints get their names (v̄4,
        v̄(2→4)), and a node with several (v̄(3→4) ≡ v̄3) shows them all. Other
        intermediates of derivative and update rules are t1, t2, ….
    numbering : list of Node, optional
        The lecture's forward nodes in order, named v1, v2, … (to draw part of a larger
        example with its numbers, or to number a graph built in one expression in the
        lecture's order); drawn forward nodes not in it count on. A ``trace``
        numbers the nodes as it did, so give one or the other (a ``numbering`` that numbers
        them another way leaves the backward nodes the run built without its names).
    labels : mapping, optional
        Names that replace the lecture's for chosen nodes (e.g. ``{dw: "∂L/∂w"}``).
    title : str, optional
        A heading.
    rankdir : {"LR", "TB", "RL", "BT"}
        The layout direction: "LR" draws data flowing left to right, "TB" top to bottom
        (narrower: the picture fits a notebook's width).
    clusters : bool
        Draw each stage's nodes inside a box labelled with the stage's name (forward,
        tangent, backward, second backward, update).
    max_nodes : int
        The size above which drawing is refused. Past :data:`SEARCHED_NODES` (200) nodes,
        dot keeps its first feasible layout (``nslimit=0``) instead of searching for a
        better one.
    """
    if rankdir not in RANKDIRS:
        raise ParameterError(f"draw_graph: rankdir must be one of {RANKDIRS}, not {rankdir!r}")
    max_nodes = params.count(max_nodes, "draw_graph: max_nodes")
    clusters = params.flag(clusters, "draw_graph: clusters")
    if title is not None and not isinstance(title, str):
        raise GraphError(f"draw_graph: title must be a string, got a {type(title).__name__}")
    if trace is not None and not isinstance(trace, Trace):
        raise GraphError(
            f"draw_graph: trace must be the Trace of a gradient_trace run, got a "
            f"{type(trace).__name__}"
        )
    forward = node_list(outputs, "draw_graph: outputs")
    backward = node_list(backward, "draw_graph: backward")
    run = _run_names(trace, numbering, backward)
    numbers = _numbers(forward, run.forward if run is not None and numbering is None else numbering)
    tangent_roots, roles = _tangents(forward, numbers, tangents)
    stages = [
        ("forward", forward),
        ("tangent", tangent_roots),
        ("backward", backward),
        ("second backward", node_list(second_backward, "draw_graph: second_backward")),
        ("update", node_list(update, "draw_graph: update")),
    ]
    everything = _in_numbers_order(
        topological_order([r for _, roots in stages for r in roots]), numbers
    )
    if run is not None:
        roles.update((n, r) for n in everything if (r := run.roles.get(n)))
    roots = {r for _, nodes in stages for r in nodes}  # drawn even as a scalar constant
    order = [n for n in everything if n in roles or n in roots or not is_inline_constant(n)]
    if len(order) > max_nodes:
        raise GraphError(
            f"draw_graph: {counted(len(order), 'node')} is too many to read (max_nodes="
            f"{max_nodes}); draw a smaller graph or pass a larger max_nodes"
        )
    labels = _checked_labels(labels)
    names = lecture_names([n for n in order if n not in labels], numbers, roles) | labels
    stage_of = _stages(stages)
    values = _values(order, feed)
    fig = GraphFigure(
        _summary(order, names, roles, stage_of),
        title=title or _graph_name(forward, names),
        graph_attr={
            **GRAPH_ATTRS,
            "rankdir": rankdir,
            **({"label": dot_text(title), "labelloc": "t"} if title else {}),
            **({"nslimit": "0"} if len(order) > SEARCHED_NODES else {}),
        },
        node_attr=NODE_ATTRS,
    )
    ids = {n: f"n{i}" for i, n in enumerate(order)}
    texts = {n: node_text(n, names, values, roles.get(n, ())) for n in order}
    _add_nodes(fig, order, ids, texts, stage_of, clusters)
    for node in order:
        for inp in node.inputs:
            if inp in ids:
                fig.edge(ids[inp], ids[node], **EDGE_STYLES[stage_of[node]])
    return fig


def _checked_labels(labels: Mapping | None) -> dict[Node, str]:
    """``labels`` as a dict, checked: graph nodes (not names) mapped to non-empty strings."""
    labels = dict(labels or {})
    for node, label in labels.items():
        if not isinstance(node, Node):
            raise GraphError(
                f"draw_graph: labels must be keyed by graph nodes, got the "
                f"{type(node).__name__} {node!r}"
            )
        if not isinstance(label, str) or not label:
            raise GraphError(
                f"draw_graph: the label of {node.name} must be a non-empty string, got {label!r}"
            )
    return labels


def _add_nodes(graph, nodes: list[Node], ids: dict, texts: dict, stage_of: dict, clusters: bool):
    """Add ``nodes`` to ``graph``; with ``clusters``, each stage's nodes in a labelled box."""
    if not clusters:
        for node in nodes:
            graph.node(ids[node], texts[node], **_node_style(node, stage_of[node]))
        return
    for stage in STAGES:
        if members := [n for n in nodes if stage_of[n] == stage]:
            with graph.subgraph(name=f"cluster_{stage.replace(' ', '_')}") as box:
                box.attr(label=stage, **CLUSTER_ATTRS)
                _add_nodes(box, members, ids, texts, stage_of, clusters=False)


def _run_names(trace: Trace | None, numbering, backward: list[Node]) -> LectureNames | None:
    """The names the run of ``gradient(out)`` that built ``backward`` gave: ``trace``'s, else
    those ``grad``/``gradient_trace`` kept (:func:`~course_lib.autodiff.trace.names_of`), unless
    a ``numbering`` numbers the forward nodes another way."""
    if trace is not None and numbering is not None:
        raise GraphError(
            "draw_graph: give a trace or a numbering, not both (the trace numbers the "
            "forward nodes as gradient_trace did)"
        )
    if trace is not None:
        return trace.lecture_names()
    run = names_of(backward)
    if run is None or numbering is None:
        return run
    same = node_list(numbering, "draw_graph: numbering")[: len(run.forward)] == run.forward
    return run if same else None


def _numbers(forward: list[Node], numbering) -> dict[Node, int]:
    """The v-number of each forward node: its place in ``numbering`` (the run's or the
    caller's), else counting on after it in topological order (constants get none)."""
    given = node_list(numbering or [], "draw_graph: numbering")
    numbers = v_numbers(given, "draw_graph: numbering")
    count = len(given)
    for node in topological_order(forward):
        if node not in numbers and not node.is_constant:
            count += 1
            numbers[node] = count
    return numbers


def _in_numbers_order(nodes: list[Node], numbers: dict) -> list[Node]:
    """``nodes`` with the numbered ones in the order of their numbers (the lecture's order may
    differ from the order Python created them in) and every other node in its place."""
    numbered = iter(sorted((n for n in nodes if n in numbers), key=numbers.__getitem__))
    return [next(numbered) if n in numbers else n for n in nodes]


def _tangents(forward: list[Node], numbers: dict, tangents: Mapping | None):
    """The tangent nodes v̇i of the numbered forward nodes for the seeds ``tangents``, and
    their roles ({tangent node: ["v̇3", "v̇6"]} when v̇6 is the node v̇3)."""
    if tangents is None:
        return [], {}
    if not isinstance(tangents, Mapping):
        raise GraphError(
            f"draw_graph: tangents must be a mapping {{variable: direction}}, got a "
            f"{type(tangents).__name__}"
        )
    of = tangent_map(forward, {var: _own_constant(v) for var, v in tangents.items()})
    roles: dict[Node, list[str]] = {}
    for node in sorted((n for n in of if n in numbers), key=numbers.__getitem__):
        roles.setdefault(of[node], []).append(f"v̇{numbers[node]}")
    return list(roles), roles


def _own_constant(value):
    """A seed as a node of its own: the constant 1.0 is shared by every use of the number,
    and a seed is drawn with its own name (v̇1 = 1)."""
    if isinstance(value, Node) and not is_inline_constant(value):
        return value
    value = value.op.value if isinstance(value, Node) else value
    return constant(value, name=constant(value).name)


def _stages(stages: list[tuple[str, list[Node]]]) -> dict[Node, str]:
    """Each node's stage: the first of ``STAGES`` (in order) that reaches it."""
    stage_of: dict[Node, str] = {}
    for stage, roots in stages:
        for node in topological_order(roots):
            stage_of.setdefault(node, stage)
    return stage_of


def _node_style(node: Node, stage: str) -> dict:
    if node.is_variable:
        return VARIABLE_STYLE
    if node.is_constant and not is_inline_constant(node):  # a drawn scalar is a named seed
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


def _graph_name(outputs: list[Node], names: dict) -> str:
    """The picture's name (its SVG ``<title>``, a browser's tooltip over it): the graph of
    its outputs, in the names drawn (``computational graph of v4``)."""
    shown = [reference(n, names) for n in outputs[:3]]
    more = f" and {len(outputs) - 3} more" if len(outputs) > 3 else ""
    return f"computational graph of {', '.join(shown)}{more}"


def _summary(order: list[Node], names: dict, roles: dict, stage_of: dict) -> str:
    counts = {s: sum(1 for n in order if stage_of[n] == s) for s in STAGES}
    head = ", ".join(f"{c} {s}" for s, c in counts.items() if c)
    lines = [f"graph with {counted(len(order), 'node')} ({head})"]
    for node in order[:40]:
        others = aliases(node, names, roles.get(node, ()))
        lines.append(f"  {definition(node, names)}" + "".join(f" ≡ {a}" for a in others))
    if len(order) > 40:
        lines.append(f"  … and {len(order) - 40} more")
    return "\n".join(lines)
