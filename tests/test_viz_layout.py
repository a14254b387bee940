"""plot_layout draws the logical array over the memory strip, linked by colour."""

import numpy as np
import pytest

from course_lib.errors import ShapeError
from course_lib.strides import StridedView, col_major_strides
from course_lib.viz import plot_layout


def cells(fig, kind: str) -> dict[str, tuple]:
    """gid -> (facecolor, text) for the logical or memory cells of a layout figure."""
    found = {}
    for ax in fig.axes:
        texts = [t.get_text() for t in ax.texts]
        patches = [p for p in ax.patches if (p.get_gid() or "").startswith(kind)]
        for patch, text in zip(patches, texts):
            found[patch.get_gid().split(":")[1]] = (tuple(patch.get_facecolor()), text)
    return found


def test_logical_cells_show_memory_offsets_and_share_colour_with_memory():
    view = StridedView(np.arange(6.0), (2, 3), col_major_strides((2, 3)))
    fig = plot_layout(view)
    assert len(fig.axes) == 2
    logical, memory = cells(fig, "logical"), cells(fig, "memory")
    for i in range(2):
        for j in range(3):
            colour, text = logical[f"{i},{j}"]
            assert text == str(view.index_to_offset((i, j))) == str(j * 2 + i)
            assert memory[text] == (colour, f"{i},{j}")


def test_slices_leave_unused_cells_and_broadcasts_share_cells():
    sliced = StridedView(np.arange(12.0), (3, 4))[::2, 1::2]
    memory = cells(plot_layout(sliced), "memory")
    unused = [gid for gid, (_, text) in memory.items() if text == ""]
    assert sorted(map(int, unused)) == sorted(set(range(12)) - {1, 3, 9, 11})
    broadcast = StridedView(np.arange(3.0), (1, 3)).broadcast_to((4, 3))
    assert [text for _, text in cells(plot_layout(broadcast), "memory").values()] == ["×4"] * 3


@pytest.mark.parametrize("shape", [(), (5,), (2, 3, 4)])
def test_any_number_of_axes_is_drawn(shape):
    view = StridedView(np.arange(24.0), shape)
    logical = cells(plot_layout(view, title=f"shape {shape}"), "logical")
    assert sorted(int(text) for _, text in logical.values()) == list(range(view.size))


def test_figure_size_is_deterministic():
    view = StridedView(np.arange(12.0), (3, 4)).T
    assert str(plot_layout(view)) == str(plot_layout(view))


def test_large_views_are_refused():
    with pytest.raises(ShapeError, match="at most 256 cells"):
        plot_layout(StridedView(np.zeros(1000), (10,)))
