"""Traces as tables: the forward evaluation trace, the tangent trace and the adjoint trace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..autodiff import StepKind, Trace, jvp
from ..autodiff.trace import Replay
from ..errors import GraphError
from ..graph import Node, node_list
from ..runtime import Executor
from ..tables import Table
from .figure import format_value
from .labels import expression, v_numbers
from .steps import checked_trace, trace_values


def evaluation_trace(
    nodes: Sequence[Node], feed: Mapping, tangents: Mapping | None = None
) -> Table:
    """The forward evaluation trace of ``nodes`` (named v1, v2, ... in the order given).

    With ``tangents`` ({variable: direction}), a v̇ column shows the forward-mode tangent
    of every node for that direction.
    """
    nodes = node_list(nodes, "evaluation_trace: nodes")
    names = {node: f"v{i}" for node, i in v_numbers(nodes, "evaluation_trace: nodes").items()}
    targets = list(nodes)
    if tangents is not None and not isinstance(tangents, Mapping):
        raise GraphError(
            f"evaluation_trace: tangents must be a mapping {{variable: direction}}, got a "
            f"{type(tangents).__name__}"
        )
    if tangents is not None:
        targets += jvp(list(nodes), dict(tangents))
    values = Executor(targets).run(feed, allow_unused=True)
    headers = ["node", "definition", "value"] + (["v̇ (tangent)"] if tangents is not None else [])
    rows = []
    for i, node in enumerate(nodes):
        row = [names[node], expression(node, names), format_value(values[i])]
        if tangents is not None:
            row.append(format_value(values[len(nodes) + i]))
        rows.append(row)
    return Table(headers, rows, "forward trace" + (" with tangents" * (tangents is not None)))


def adjoint_trace(trace: Trace, feed: Mapping) -> Table:
    """The reverse-mode trace: each adjoint v̄i as the sum of its partial adjoints, with values."""
    values = trace_values(checked_trace(trace, "adjoint_trace", steps=False), feed)
    rows, replay = [], Replay(trace)  # one replay: the table of a long chain is linear
    for _ in trace.steps:
        s = replay.advance()
        if s.kind is not StepKind.ADJOINT:
            continue
        i = trace.number(s.node)
        terms = " + ".join(trace.entry(s.node, source) for source in replay.sources[s.node])
        rule = "1 (seed)" if s.node is trace.out else terms
        rows.append([f"v̄{i}", rule, format_value(values[s.created])])
    return Table(["adjoint", "sum of partial adjoints", "value"], rows, "adjoint trace")
