"""``plot_layout``: a strided view drawn as its logical array above its memory buffer.

Top: the logical array, each cell labelled with the memory offset it reads. Bottom: the
buffer, one cell per element, labelled with the logical index stored there (``×k`` when
k elements share it, as in a broadcast; grey when no element uses it, as in a slice).
A cell's colour is its memory cell's, so matching colours link the two pictures.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..errors import GraphError, ShapeError
from ..strides import StridedView
from ..tables import counted
from .plots import CourseFigure

MAX_CELLS = 256
UNUSED = "#e6e6e6"


def plot_layout(view: StridedView, title: str | None = None) -> Figure:
    """Draw ``view``'s logical array (cells: memory offsets) above its memory strip.

    Parameters
    ----------
    view : StridedView
        Any view: row- or column-major, transposed, sliced, broadcast, any number of axes
        (axes before the last are flattened into rows).
    title : str, optional
        A heading for the figure.

    Returns
    -------
    matplotlib.figure.Figure
        A figure with two axes (logical array, memory buffer), closed in pyplot so it is
        shown once, by the notebook.
    """
    if not isinstance(view, StridedView):
        raise GraphError(f"plot_layout draws a StridedView, got a {type(view).__name__}")
    n_memory = len(view.buffer)
    if view.size > MAX_CELLS or n_memory > MAX_CELLS:
        raise ShapeError(
            f"plot_layout draws at most {MAX_CELLS} cells, but this view has "
            f"{counted(view.size, 'element')} over a buffer of {n_memory}; draw a smaller example"
        )
    offsets = view.element_offsets()
    if view.size == 0:  # no element: no cell (reshape(-1, 0) is no shape)
        rows = offsets.reshape(0, 0)
    else:
        rows = offsets.reshape(-1, view.shape[-1] if view.ndim else 1)
    n_rows, n_cols = rows.shape
    cell = min(0.45, 11.0 / max(n_cols, n_memory, 1))
    fig = plt.figure(
        figsize=(max(max(n_cols, n_memory) * cell + 1.6, 6.5), (n_rows + 1) * cell + 2.4),
        layout="constrained",
        FigureClass=CourseFigure,
    )
    plt.close(fig)
    logical, memory = fig.subplots(2, 1, height_ratios=[max(n_rows, 1), 1])
    colours = _memory_colours(n_memory)
    fontsize = max(5.0, min(10.0, 22 * cell))
    _draw_logical(logical, view, rows, colours, fontsize)
    _draw_memory(memory, view, offsets, colours, fontsize)
    if title:
        fig.suptitle(title)
    return fig


def _memory_colours(n_memory: int) -> np.ndarray:
    """One RGBA colour per buffer position, along a perceptually even colour map."""
    return plt.get_cmap("viridis")(np.linspace(0.15, 1.0, max(n_memory, 1)))


def _text_colour(rgba) -> str:
    return "white" if 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.5 else "black"


def _cell(ax, x: float, y: float, colour, text: str, fontsize: float, gid: str, **style) -> None:
    edge = "black" if style.get("linewidth") else "white"
    ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour, edgecolor=edge, gid=gid, **style))
    textcolour = _text_colour(colour) if not isinstance(colour, str) else "black"
    ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=fontsize, color=textcolour)


def _draw_logical(ax, view: StridedView, rows: np.ndarray, colours, fontsize: float) -> None:
    n_rows, n_cols = rows.shape
    for r in range(n_rows):
        for c in range(n_cols):
            position = int(rows[r, c])
            _cell(ax, c, r, colours[position], str(position), fontsize, f"logical:{r},{c}")
    ax.set_xticks(np.arange(n_cols) + 0.5, [str(c) for c in range(n_cols)])
    leading = list(np.ndindex(view.shape[:-1])) if view.ndim > 1 and view.size else [()]
    labels = [_row_label(index) if view.ndim else "" for index in leading]
    ax.set_yticks(np.arange(n_rows) + 0.5, labels[:n_rows])
    _frame(
        ax,
        (n_cols, n_rows),
        f"index along axis {max(view.ndim - 1, 0)}",
        f"logical view: shape {view.shape}, strides {view.strides}, offset {view.offset}\n"
        "number in a cell = the memory offset it reads",
        fontsize,
    )


def _row_label(leading: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in leading) + (", :]" if leading else ":]")


def _draw_memory(ax, view: StridedView, offsets: np.ndarray, colours, fontsize: float) -> None:
    holders: dict[int, list[tuple[int, ...]]] = {}
    for index in np.ndindex(view.shape) if view.size else ():  # ndindex lists each axis
        holders.setdefault(int(offsets[index]), []).append(index)
    n_memory = len(view.buffer)
    for position in range(n_memory):
        held = holders.get(position, [])
        gid = f"memory:{position}"
        if not held:
            _cell(ax, position, 0, UNUSED, "", fontsize, gid, hatch="///")
        elif len(held) == 1:
            text = ",".join(map(str, held[0])) or "()"
            _cell(ax, position, 0, colours[position], text, fontsize, gid)
        else:
            text = f"×{len(held)}"
            _cell(ax, position, 0, colours[position], text, fontsize, gid, linewidth=2.5)
    step = max(1, n_memory // 32)
    ax.set_xticks(np.arange(0, n_memory, step) + 0.5, [str(p) for p in range(0, n_memory, step)])
    ax.set_yticks([])
    _frame(
        ax,
        (n_memory, 1),
        f"memory offset (elements of {counted(view.itemsize, 'byte')}, {view.dtype})",
        f"memory buffer: {counted(n_memory, 'element')}\n"
        "label = logical index stored there, ×k = shared by k elements, grey = unused",
        fontsize,
    )


def _frame(ax, cells: tuple[int, int], xlabel: str, title: str, fontsize: float) -> None:
    """Square cells, row 0 at the top, labels, and no box around the grid."""
    ax.set_xlim(0, max(cells[0], 1))
    ax.set_ylim(max(cells[1], 1), 0)
    ax.set_aspect("equal")
    ax.tick_params(length=0, labelsize=fontsize)
    ax.set_xlabel(xlabel, fontsize=fontsize)
    ax.set_title(title, fontsize=fontsize + 1)
    for side in ax.spines.values():
        side.set_visible(False)
