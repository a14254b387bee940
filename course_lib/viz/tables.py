"""Traces as tables: the forward evaluation trace, the tangent trace and the adjoint trace."""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Mapping, Sequence

from ..autodiff import Trace, jvp
from ..graph import Node
from ..runtime import Executor
from .figure import format_value
from .labels import definition
from .steps import trace_values


class Table:
    """Rows of text with a header; shown as HTML in Jupyter and as aligned text elsewhere."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = ""):
        self.headers, self.rows, self.title = (
            list(headers),
            [list(map(str, r)) for r in rows],
            title,
        )

    def column(self, header: str) -> list[str]:
        """The cells of one column."""
        index = self.headers.index(header)
        return [row[index] for row in self.rows]

    def __repr__(self) -> str:
        widths = [
            max(_width(h), *(_width(r[i]) for r in self.rows)) for i, h in enumerate(self.headers)
        ]
        lines = [self.title] if self.title else []
        lines.append("  ".join(_pad(h, w) for h, w in zip(self.headers, widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(_pad(c, w) for c, w in zip(r, widths)).rstrip() for r in self.rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class ShownAsTable:
    """Mixin: an object with a ``table()`` method prints and renders as that table."""

    def table(self) -> Table:
        raise NotImplementedError

    def __repr__(self) -> str:
        return repr(self.table())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def _width(text: str) -> int:
    """Printed width: combining marks (the bar of v̄) take no column."""
    return sum(1 for ch in text if not unicodedata.combining(ch))


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


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
        row = [names[node], definition(node, names).split(" = ", 1)[-1], format_value(values[i])]
        if tangents is not None:
            row.append(format_value(values[len(nodes) + i]))
        rows.append(row)
    return Table(headers, rows, "forward trace" + (" with tangents" if tangents else ""))


def adjoint_trace(trace: Trace, feed: Mapping) -> Table:
    """The reverse-mode trace: each adjoint v̄i as the sum of its partial adjoints, with values."""
    values = trace_values(trace, feed)
    rows = []
    for s in trace.steps:
        if s.kind != "adjoint":
            continue
        i = trace.number(s.node)
        entries = dict(trace.entries(trace.steps.index(s)))[s.node]
        terms = " + ".join(label for label, _ in entries)
        rule = "1 (seed)" if s.node is trace.out else terms
        rows.append([f"v̄{i}", rule, format_value(values[s.created])])
    return Table(["adjoint", "sum of partial adjoints", "value"], rows, "adjoint trace")
