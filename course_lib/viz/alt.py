"""Alt text: what each picture shows, in words, made from the data the picture is drawn from.

A picture output carries its alt text in the output's metadata, ``{"image/png": {"alt":
"..."}}`` (what nbconvert's HTML export writes into ``<img alt>``, and what the course site
uses); a picture inside an HTML output (a step of the player) is an ``<svg role="img"
aria-label="...">``. ``tests/test_alt_text.py`` checks every stored picture of the notebooks.
"""

from __future__ import annotations

import re

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle, Wedge

from ..tables import counted
from .figure import visible


def figure_description(fig: Figure) -> str:
    """What a matplotlib figure shows: per plot, its title, its series (by their legend
    labels), bars, wedges and images, and each axis's label, scale and range."""
    title = fig.get_suptitle() if hasattr(fig, "get_suptitle") else ""
    summary = getattr(fig, "summary", None)  # a figure's own text form (the roofline's)
    notes = [_one_line(summary)] if isinstance(summary, str) and summary.strip() else []
    plots = [_axes_description(ax) for ax in fig.axes
             if ax.has_data() and getattr(ax, "_colorbar", None) is None]  # a colour scale
    text = "; ".join([*notes, *plots]) or "an empty figure"
    return f"Figure “{title}”: {text}." if title else f"Figure: {text}."


def _one_line(text: str) -> str:
    """A text form in one line: its heading, then its items (a roofline's kernels, each
    memory- or compute-bound) separated by semicolons."""
    heading, *items = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join([heading, "; ".join(items)]) if items else heading


def _axes_description(ax: Axes) -> str:
    parts = [f"a plot titled “{ax.get_title()}”" if ax.get_title() else "a plot"]
    legend = ax.get_legend()
    if legend is not None:
        parts.append("legend: " + ", ".join(t.get_text() for t in legend.get_texts()))
    # a Line2D without a line style is marked points (a kernel on a roofline, ``"o"``)
    marks = [line for line in ax.get_lines() if line.get_linestyle() in ("None", "", " ")]
    lines = len(ax.get_lines()) - len(marks)
    if lines:
        parts.append(counted(lines, "line"))
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if bars:
        parts.append(counted(len(bars), "bar"))
    if wedges:
        texts = [t.get_text() for t in ax.texts if t.get_text()]
        pie = f"a pie of {counted(len(wedges), 'wedge')}"
        parts.append(pie + (f" ({', '.join(texts)})" if texts else ""))
    for image in ax.images:
        rows, cols = image.get_array().shape[:2]
        parts.append(f"a {rows}×{cols} colour map")
    points = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    points += sum(np.size(line.get_xdata()) for line in marks)
    if points and not ax.images:
        parts.append(counted(points, "marked point"))
    return ", ".join(parts + [a for a in (_axis(ax, "x"), _axis(ax, "y")) if a])


def _axis(ax: Axes, name: str) -> str:
    """An axis: its label, and its categories (text tick labels) or its scale and range."""
    label = (ax.get_xlabel if name == "x" else ax.get_ylabel)()
    ticks = [t.get_text() for t in (ax.get_xticklabels if name == "x" else ax.get_yticklabels)()]
    what = f"{name} axis “{label}”" if label else f"{name} axis"
    words = [t for t in ticks if t and not _numeric(t)]
    if words:
        return f"{what} with the categories {', '.join(words)}"
    if not label:
        return ""
    low, high = (ax.get_xlim if name == "x" else ax.get_ylim)()
    scale = (ax.get_xscale if name == "x" else ax.get_yscale)()
    return f"{what} ({scale} scale, {low:.3g} to {high:.3g})"


def _numeric(text: str) -> bool:
    """Whether a tick label is a number (as matplotlib writes them: −, 10^{k} in mathtext)."""
    plain = re.sub(r"\\mathdefault|[${}^×\s]", "", text).replace("−", "-")
    return bool(re.fullmatch(r"[-+]?[\d.,]+(?:[eE]?[-+]?\d+)?%?", plain))


def svg_with_alt(svg: str, alt: str) -> str:
    """``svg`` (an ``<svg ...>`` element) marked as an image described by ``alt``."""
    escaped = visible(alt).replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return svg.replace("<svg", f'<svg role="img" aria-label="{escaped}"', 1)
