"""Matplotlib figures used by the notebooks (returned, not shown, so a cell displays one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from ..backend import to_host
from ..tables import counted
from .alt import figure_description


class CourseFigure(Figure):
    """A matplotlib figure of the notebooks: shown as PNG with its alt text. (Its own class,
    so that a later ``%matplotlib inline``, which registers how every ``Figure`` is shown,
    does not take the alt text away.)"""

    def __repr__(self) -> str:  # as matplotlib writes a Figure's
        width, height = self.bbox.size
        return f"<Figure size {width:g}x{height:g} with {len(self.axes)} Axes>"


def _register_figure_display() -> None:
    """In IPython, show returned figures as PNG (without ``%matplotlib inline``), each with
    its alt text (``alt.figure_description``)."""
    try:
        from IPython import get_ipython  # noqa: PLC0415
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        formatter = shell.display_formatter.formatters["image/png"]
        formatter.for_type(CourseFigure, _png_with_alt)


def _png_with_alt(fig: Figure) -> tuple[bytes, dict]:
    """The figure as PNG, with its alt text in the output's metadata."""
    from IPython.core.pylabtools import print_figure  # noqa: PLC0415

    return print_figure(fig, "png", bbox_inches="tight"), {"alt": figure_description(fig)}


_register_figure_display()


def host_numbers(values) -> np.ndarray:
    """``values`` as a NumPy array on the host, for matplotlib: a device array (a GPU's, the
    strict stand-in's) is copied there, and so is every element of a list or tuple (losses
    recorded step by step, say)."""
    return np.asarray(to_host(values))


def plot_difference_errors(eps_values: Sequence[float], errors: Mapping[str, np.ndarray]) -> Figure:
    """Error of each difference quotient against ε on log-log axes, with slope guides.

    ``errors`` maps "forward" and "central" (in that order) to their absolute errors. The
    alt text says the shape of each curve: its error at the smallest ε, its least error and
    the ε of it, and its error at the largest ε (the V: round-off left, truncation right).
    """
    eps = host_numbers(eps_values)
    errors = {name: host_numbers(err) for name, err in errors.items()}
    if eps.ndim != 1 or not eps.size or any(err.shape != eps.shape for err in errors.values()):
        raise ValueError(
            f"plot_difference_errors needs step sizes and one error per step size, got "
            f"{counted(eps.size, 'step size')} and errors of shapes "
            f"{[err.shape for err in errors.values()]}"
        )
    fig = CourseFigure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for name, err in errors.items():
        ax.loglog(eps, np.maximum(err, 1e-18), "o-", markersize=3, label=f"{name} difference")
    largest = np.argmax(eps)  # the guides start from the largest ε, in whatever order they come
    for err, order, style in zip(errors.values(), (1, 2), (":", "--")):
        right = eps >= 10.0 ** (-7 / order)  # where truncation error dominates
        guide = 3 * err[largest] * (eps[right] / eps[largest]) ** order
        ax.loglog(eps[right], guide, style, color="grey", linewidth=1, label=f"slope {order}")
    ax.set_xlabel("step size ε")
    ax.set_ylabel("absolute error of ∂y/∂x₁")
    ax.set_title("Truncation error (right) vs round-off error (left)")
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    lines = ["absolute error against ε, from the smallest ε to the largest:"]
    lines += [f"  {name} difference: {_v_shape(eps, err)}" for name, err in errors.items()]
    fig.summary = "\n".join(lines)
    return fig


def _v_shape(eps: np.ndarray, err: np.ndarray) -> str:
    """One curve of :func:`plot_difference_errors` in words: its error at the smallest ε, its
    least error and where, and its error at the largest ε (the points matplotlib draws:
    those with a finite error)."""
    drawn = np.isfinite(err) & np.isfinite(eps)
    if not drawn.any():
        return "no finite error"
    order = np.argsort(eps[drawn], kind="stable")
    eps, err = eps[drawn][order], err[drawn][order]
    least = int(np.argmin(err))

    def at(k: int) -> str:
        return f"{err[k]:.3g} at ε = {eps[k]:.3g}"

    if eps.size == 1:
        return f"{at(0)} (one ε)"
    if least == 0:
        return f"least at the smallest ε, {at(0)}, then rises to {at(-1)}"
    if least == eps.size - 1:
        return f"falls from {at(0)} to its least at the largest ε, {at(-1)}"
    return f"falls from {at(0)} to its least, {at(least)}, then rises to {at(-1)}"


def plot_curve(
    xs,
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logy: bool = False,
    logx: bool = False,
    points: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> Figure:
    """Lines of ``ys`` (label -> values) against ``xs``, over the scattered ``points``
    (label -> (x values, y values)), e.g. the data a model was fitted to."""
    fig = CourseFigure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    xs = host_numbers(xs)
    for label, (px, py) in (points or {}).items():
        ax.scatter(host_numbers(px), host_numbers(py), s=8, alpha=0.5, color="grey", label=label)
    for label, values in ys.items():
        ax.plot(xs, host_numbers(values), label=label)
    if logy:
        ax.set_yscale("log")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if len(ys) + len(points or {}) > 1:
        ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return fig


def plot_breakdown(parts: Mapping[str, float], title: str, unit: str = "%") -> Figure:
    """A pie of the shares beside horizontal bars labelled with each part's value.

    ``parts`` maps a label to a non-negative amount; the pie shows shares of their sum (parts
    below 5 % go unlabelled there; the bars share its colours), the bars the amounts in ``unit``.
    """
    labels, values = list(parts), host_numbers(list(parts.values())).astype(float)
    if values.size == 0 or not np.isfinite(values).all() or (values < 0).any() or values.sum() <= 0:
        raise ValueError(
            f"plot_breakdown needs finite, non-negative parts with a positive sum: {parts}"
        )
    fig = CourseFigure(figsize=(9.6, 3.6))
    pie, bars = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    colours = [f"C{k}" for k in range(len(labels))]
    shares = values / values.sum()
    pie.pie(values, colors=colours, startangle=90, counterclock=False, labeldistance=0.55,
            labels=[lab if share >= 0.05 else "" for lab, share in zip(labels, shares)],
            textprops={"color": "white", "fontsize": 9, "ha": "center"})
    pie.set_aspect("equal")
    rows = np.arange(len(labels))[::-1]
    bars.barh(rows, values, color=colours)
    bars.set_yticks(rows, labels)
    for row, value in zip(rows, values):
        bars.annotate(f" {value:.3g} {unit}", (value, row), va="center", fontsize=8)
    bars.set_xlim(0, values.max() * 1.3)
    bars.set_xlabel(unit)
    fig.suptitle(title)
    return fig


def plot_grouped_bars(
    series: Mapping[str, Mapping[str, float]], title: str, ylabel: str
) -> Figure:
    """Bars side by side: one group per key of the inner mappings (the same keys, in the same
    order, in each), one bar colour per key of ``series`` (a GPU, say)."""
    names = list(series)
    groups = list(next(iter(series.values()), {}))
    if not names or any(list(bars) != groups for bars in series.values()):
        raise ValueError(f"plot_grouped_bars needs series with the same groups: {series}")
    fig = CourseFigure(figsize=(7.0, 3.5))
    ax = fig.add_subplot()
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        heights = host_numbers([series[name][group] for group in groups]).astype(float)
        offsets = np.arange(len(groups)) + (j - (len(names) - 1) / 2) * width
        ax.bar(offsets, heights, width, label=name)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_stacked_bars(
    bars: Mapping[str, Mapping[str, float]], title: str, unit: str, line: float | None = None
) -> Figure:
    """One bar per key of ``bars``, stacked from its parts (label -> amount in ``unit``; every
    bar has the same labels, in the same order), with an optional dashed horizontal ``line``
    (a GPU's memory, say)."""
    names = list(bars)
    labels = list(next(iter(bars.values()), {}))
    if not names or any(list(parts) != labels for parts in bars.values()):
        raise ValueError(f"plot_stacked_bars needs bars with the same parts: {bars}")
    fig = CourseFigure(figsize=(9.6, 3.8))
    ax = fig.add_subplot()
    x, bottom = np.arange(len(names)), np.zeros(len(names))
    for k, label in enumerate(labels):
        heights = host_numbers([bars[name][label] for name in names]).astype(float)
        ax.bar(x, heights, bottom=bottom, color=f"C{k}", label=label)
        bottom += heights
    if line is not None:
        ax.axhline(line, color="black", linestyle="--", linewidth=1)
    ax.set_xticks(x, names, fontsize=8, rotation=30, ha="right")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def plot_attention(
    maps: Sequence[np.ndarray], labels: Sequence[str], titles: Sequence[str]
) -> Figure:
    """Attention probabilities (queries down, keys across) side by side, one panel per map.

    ``labels`` name the tokens (shown on both axes); ``titles`` name the panels.
    """
    maps = [host_numbers(probs) for probs in maps]
    square = (len(labels), len(labels))
    if not maps or len(titles) != len(maps) or any(probs.shape != square for probs in maps):
        raise ValueError(
            f"plot_attention needs one title per map and maps of shape {square} (one row and "
            f"column per label), got {counted(len(titles), 'title')} for maps of shapes "
            f"{[probs.shape for probs in maps]}"
        )
    fig = CourseFigure(figsize=(3.2 * len(maps), 3.4))
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    ticks = np.arange(len(labels))
    for ax, probs, title in zip(axes, maps, titles):
        ax.imshow(probs, cmap="viridis", vmin=0.0, vmax=1.0)
        # tokens are drawn as written: "$x$" is no formula, and "$$" no error
        ax.set_xticks(ticks, labels, fontsize=7, rotation=90, parse_math=False)
        ax.set_yticks(ticks, labels, fontsize=7, parse_math=False)
        ax.set_title(title, fontsize=9)
    axes[0].set_xlabel("key (attended to)")
    axes[0].set_ylabel("query (attending)")
    return fig
