"""Traces as tables: the forward evaluation trace, the tangent trace and the adjoint trace."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..autodiff import StepKind, Trace, jvp
from ..graph import Node
from ..runtime import Executor
from ..tables import Table
from .figure import format_value
from .labels import expression
from .steps import trace_values


def evaluation_trace(
    nodes: Sequence[Node], feed: Mapping, tangents: Mapping | None = None
) -> Table:
    """The forward evaluation trace of ``nodes`` (named v1, v2, ... in the order given).

    With ``tangents`` ({variable: direction}), a v̇ column shows the forward-mode tangent
    of every node for that direction.
    """
    names = {n: f"v{i + 1}" for i, n in enumerate(nodes)}
    targets = list(nodes)
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
    return Table(headers, rows, "forward trace" + (" with tangents" if tangents else ""))


def adjoint_trace(trace: Trace, feed: Mapping) -> Table:
    """The reverse-mode trace: each adjoint v̄i as the sum of its partial adjoints, with values."""
    values = trace_values(trace, feed)
    rows = []
    for s in trace.steps:
        if s.kind is not StepKind.ADJOINT:
            continue
        i = trace.number(s.node)
        entries = dict(trace.entries(trace.steps.index(s)))[s.node]
        terms = " + ".join(label for label, _ in entries)
        rule = "1 (seed)" if s.node is trace.out else terms
        rows.append([f"v̄{i}", rule, format_value(values[s.created])])
    return Table(["adjoint", "sum of partial adjoints", "value"], rows, "adjoint trace")
