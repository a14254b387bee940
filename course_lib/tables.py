"""Tables of text: aligned text in a terminal or a saved notebook, HTML in Jupyter.

Plain Python, no plotting: the FLOP and memory calculators show themselves with these, and
``course_lib.viz`` builds the autodiff trace tables on them. :func:`number` writes a value as
every table, picture and step caption shows it; :func:`counted` a count with its noun.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Sequence
from decimal import Decimal

from .errors import ParameterError, ShapeError


class Table:
    """Rows of text with a header; shown as HTML in Jupyter and as aligned text elsewhere."""

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = ""):
        rows = list(rows)  # a generator would be used up by the checks, leaving no rows
        for what, cells in (("headers", headers), *((f"row {k}", r) for k, r in enumerate(rows))):
            if isinstance(cells, (str, bytes)):  # would be split into one cell per character
                raise ShapeError(f"Table: {what} is the text {cells!r}; give a list of cells")
        self.headers, self.rows, self.title = (
            list(map(str, headers)),
            [list(map(str, r)) for r in rows],
            title,
        )
        for k, row in enumerate(self.rows):
            if len(row) != len(self.headers):
                raise ShapeError(
                    f"Table: row {k} has {counted(len(row), 'cell')} {row} but there are "
                    f"{counted(len(self.headers), 'header')} {self.headers}; give one cell per "
                    "column"
                )

    def column(self, header: str) -> list[str]:
        """The cells of one column."""
        if header not in self.headers:
            raise ParameterError(f"Table: no column {header!r}; the headers are {self.headers}")
        index = self.headers.index(header)
        return [row[index] for row in self.rows]

    def __repr__(self) -> str:
        headers = list(map(_shown, self.headers))
        rows = [list(map(_shown, r)) for r in self.rows]
        widths = [max([_width(h)] + [_width(r[i]) for r in rows]) for i, h in enumerate(headers)]
        lines = [self.title] if self.title else []
        lines.append("  ".join(_pad(h, w) for h, w in zip(headers, widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(_pad(c, w) for c, w in zip(r, widths)).rstrip() for r in rows]
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


def number(value) -> str:
    """``value`` (a real number, or a 0-d array) with 3 decimals, or 3 digits after a power
    of ten from 10⁶ on, as rounded (3 decimals would write 1e300 with 300 digits, and
    999999.9996 as 1000000.000); negative with the minus sign the ops write (U+2212:
    ``v2 − v3 = −0.500``). An integer beyond float's range is written exactly rounded too."""
    if isinstance(value, int) and abs(value) >= 10**300:  # near float's limit: exactly
        return f"{Decimal(value):.3e}".replace("-", "−")
    value = float(value)
    text = f"{value:.3f}"
    if abs(float(text)) >= 1e6:
        text = f"{value:.3e}"
    return text.replace("-", "−")


def counted(n: int, noun: str, plural: str = "") -> str:
    """``n`` with its noun, singular for one: ``1 step``, ``3 steps``, ``2 axes``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _shown(cell: str) -> str:
    """``cell`` on one line: a control character (a newline, a tab, an escape) is written as
    Python writes it in a string (``\\n``), so it cannot start a row or move the columns."""
    return "".join(repr(ch)[1:-1] if unicodedata.category(ch) == "Cc" else ch for ch in cell)


def _width(text: str) -> int:
    """Printed width: marks (the bar of v̄) and invisible format characters take no column,
    East Asian wide characters and emoji take two."""
    return sum(_char_width(ch) for ch in text)


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))
