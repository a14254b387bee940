"""A graphviz figure with a deterministic text form and a graceful fallback without ``dot``."""

from __future__ import annotations

import html
import re

import graphviz

from ..backend import to_numpy
from ..tables import number

MISSING_DOT = (
    "Graphviz's 'dot' program is not installed, so this graph cannot be drawn.\n"
    "Install it with one of:\n"
    "  conda install -c conda-forge graphviz\n"
    "  sudo apt-get install graphviz\n"
    "  brew install graphviz\n"
    "then restart the kernel. The graph's DOT source follows."
)


class GraphFigure(graphviz.Digraph):
    """A ``graphviz.Digraph`` whose text repr is a stable summary (no memory address).

    In Jupyter it renders as SVG; when the ``dot`` binary is missing it shows an install
    hint and the DOT source instead of raising.
    """

    def __init__(self, summary: str = "graph", title: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.summary = summary
        # the SVG's name, which browsers show as its tooltip (graphviz's is "%3"); not the
        # DOT graph's name, so the DOT text stays ``digraph {``
        self.title = title or summary.strip().split("\n")[0] or "graph"

    def __repr__(self) -> str:
        return self.summary

    def svg(self) -> str | None:
        """The rendered SVG text, or ``None`` when ``dot`` is not installed."""
        try:
            svg = self.pipe(format="svg", encoding="utf-8")
        except graphviz.ExecutableNotFound:
            return None
        return svg_titled(svg, self.title)

    def fallback_text(self) -> str:
        """What is shown instead of a picture when ``dot`` is missing."""
        return f"{MISSING_DOT}\n\n{self.source}"

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        svg = self.svg()
        if svg is None:
            return {"text/plain": self.fallback_text()}
        return {"image/svg+xml": svg, "text/plain": self.summary}, {
            "image/svg+xml": {"alt": self.alt_text()}
        }

    def alt_text(self) -> str:
        """What the picture shows, in words: its summary (the nodes and how each is made)."""
        return "; ".join(line.strip() for line in self.summary.splitlines() if line.strip())

    def html(self) -> str:
        """An HTML fragment: the SVG scaled to the page width, or the fallback text."""
        svg = self.svg()
        if svg is None:
            return f"<pre>{html.escape(self.fallback_text())}</pre>"
        start = svg.index("<svg")
        return svg[start:].replace("<svg", '<svg style="max-width: 100%; height: auto"', 1)


# the name graphviz writes for the whole graph: a comment, and the top-level group's <title>
# (an anonymous graph's is "%3", "%0", ... by graphviz version)
_GRAPH_TITLE = re.compile(r'(<g\b[^>]*\bclass="graph"[^>]*>\s*<title>)[^<]*(</title>)')
_TITLE_COMMENT = re.compile(r"<!-- Title: .*? Pages: (\d+) -->")


def svg_titled(svg: str, title: str) -> str:
    """``svg`` (as graphviz draws it) named ``title``: its top-level ``<title>``, the
    tooltip browsers show over the picture, instead of graphviz's ``%3``."""
    text = html.escape(visible(title), quote=False)
    comment = re.sub("-(?=-)", "- ", text)  # "--" may not stand in an XML comment
    svg = _TITLE_COMMENT.sub(lambda m: f"<!-- Title: {comment} Pages: {m.group(1)} -->", svg, 1)
    return _GRAPH_TITLE.sub(lambda m: m.group(1) + text + m.group(2), svg, 1)


def format_value(value) -> str:
    """A short text for a computed value (of any device: it is copied to the host first):
    scalars and up to 4 numbers as ``tables.number`` writes them (as the step captions do),
    the shape for big or empty arrays."""
    value = to_numpy(value)
    if value.size == 1:
        return number(value.reshape(()))
    if 0 < value.size <= 4:
        return "[" + ", ".join(map(number, value.reshape(-1))) + "]"
    return "shape " + "×".join(map(str, value.shape))


# characters dot cannot read (NUL ends its input, a lone surrogate is no UTF-8) or that make
# the SVG it writes invalid XML (the other controls, the non-characters U+FFFE and U+FFFF)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def visible(text: str) -> str:
    """``text`` with its control characters other than tabs and line ends, lone surrogates
    and non-characters written out as Python does (``\\x1b``, ``\\ufffe``): ``dot`` stops
    at a NUL, cannot encode a surrogate, and the others make an SVG invalid XML."""
    return _CONTROL.sub(lambda found: ascii(found.group())[1:-1], text)


def dot_text(text: str) -> str:
    """Text for a graphviz label, drawn as written: backslashes stay backslashes (``dot``
    reads ``\\N`` as the node's id, ``\\l`` as a line end), ``&`` stays ``&`` (``dot``
    reads ``&lt;`` as ``<``), control characters are written out (:func:`visible`)."""
    return graphviz.escape(visible(text).replace("&", "&amp;"))


def html_text(text: str) -> str:
    """Escape text for a graphviz HTML-like label (brackets too: dot 2.43 trips on them)."""
    return html.escape(text, quote=True).replace("[", "&#91;").replace("]", "&#93;")
