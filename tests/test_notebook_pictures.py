"""The pictures notebooks 07 and 09 draw next to their tables (``viz.access``): drawn from the
package's own numbers, described in their alt text, and refusing what they cannot draw."""

import numpy as np
import pytest
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.colors import to_rgba

from course_lib.errors import ParameterError, ShapeError
from course_lib.kernels.analysis import SECTOR_BYTES, sectors_touched, warp_addresses
from course_lib.models import LlamaConfig
from course_lib.models.inference import decode_crossover_batch, decode_step
from course_lib.viz import plot_decode_steps, plot_warp_sectors
from course_lib.viz.alt import figure_description

LLAMA2_7B = LlamaConfig.llama2_7b()


def _rows(fig):
    """Per row of a warp-sectors figure: (shaded sectors, marked byte positions, written count)."""
    ax = fig.axes[0]
    strips = [c for c in ax.collections if isinstance(c, PolyCollection)]
    marks = [c for c in ax.collections if isinstance(c, PathCollection)]
    rows = []
    for strip, mark, text in zip(strips, marks, ax.texts):
        white = np.all(strip.get_facecolors() == to_rgba("white"), axis=1)
        starts = [path.vertices[:, 0].min() for path in strip.get_paths()]
        shaded = [int(x) // SECTOR_BYTES for x, w in zip(starts, white) if not w]
        rows.append((shaded, mark.get_offsets()[:, 0].tolist(), text.get_text()))
    return rows


@pytest.mark.parametrize("strides, itemsize", [((1, 2, 8), 4), ((1, 3), 12), ((1, 4), 16)])
def test_warp_sectors_shade_and_count_what_the_analysis_counts(strides, itemsize):
    rows = _rows(plot_warp_sectors(strides, itemsize))
    assert len(rows) == len(strides)
    for stride, (shaded, marks, text) in zip(strides, rows):
        reads = warp_addresses(stride, itemsize)
        assert len(shaded) == sectors_touched(reads, itemsize)
        assert text == f"{sectors_touched(reads, itemsize)} sectors\nper request"
        assert marks == (reads + itemsize / 2).tolist()  # one mark per thread, at its item


def test_warp_sectors_shade_the_sectors_read_and_only_those():
    (one, _, _), (eight, _, _) = _rows(plot_warp_sectors((1, 8)))
    assert one == [0, 1, 2, 3] and eight == list(range(32))
    ((straddling, _, _),) = _rows(plot_warp_sectors((3,), itemsize=12))  # 216..227: 6 and 7
    every_byte = {b // SECTOR_BYTES for a in warp_addresses(3, 12) for b in range(a, a + 12)}
    assert straddling == sorted(every_byte) and {6, 7} <= every_byte


def test_warp_sectors_alt_text_gives_the_counts():
    text = figure_description(plot_warp_sectors())
    assert "sectors per request: stride 1: 4, stride 2: 8, stride 8: 32" in text
    assert "categories stride 1, stride 2, stride 8" in text and "96 marked points" in text


@pytest.mark.parametrize(
    "strides, itemsize, error, message",
    [
        ((), 4, ParameterError, "at least one stride"),
        ((1, 0), 4, ShapeError, "plot_warp_sectors: stride must be a positive integer"),
        ((2.5,), 4, ShapeError, "stride must be a positive integer"),
        ((1,), 0, ShapeError, "itemsize must be a positive integer"),
        ((64,), 4, ParameterError, "at most 128 sectors, but stride 64 .* spans 249"),
    ],
)
def test_warp_sectors_refuse_what_they_cannot_draw(strides, itemsize, error, message):
    with pytest.raises(error, match=message):
        plot_warp_sectors(strides, itemsize)


def test_decode_steps_draw_the_roofline_bound_and_mark_the_crossover():
    fig = plot_decode_steps(LLAMA2_7B, "A100", contexts=(0, 4096), batches=(1, 16, 64, 256))
    ax = fig.axes[0]
    turn = decode_crossover_batch(LLAMA2_7B, 0, "A100")
    assert turn == 203 and decode_crossover_batch(LLAMA2_7B, 4096, "A100") is None
    short, long, marker = ax.get_lines()
    assert short.get_xdata().tolist() == [1, 16, 64, 203, 256]  # the knee is drawn
    for line, context in ((short, 0), (long, 4096)):
        assert line.get_ydata().tolist() == [
            decode_step(LLAMA2_7B, b, context, "A100").tokens_per_second for b in line.get_xdata()
        ]
    assert list(marker.get_xdata()) == [turn, turn]
    assert to_rgba(marker.get_color()) == to_rgba(short.get_color())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "context 0: compute-bound from batch 203",
        "context 4096: memory-bound at every batch",
    ]
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_decode_steps_alt_text_and_one_context():
    text = figure_description(plot_decode_steps(LLAMA2_7B, "H100", contexts=(4096,)))
    assert "Decoding on the H100" in text
    assert "legend: context 4096: memory-bound at every batch" in text


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"contexts": ()}, ParameterError, "needs contexts and increasing batches"),
        ({"batches": (4, 2)}, ParameterError, r"batches \[4, 2\]"),
        ({"batches": ()}, ParameterError, "increasing batches"),
        ({"batches": (0, 1)}, ShapeError, "decode_step: batch must be a positive integer"),
        ({"contexts": (-1,)}, ParameterError, "context must be >= 0"),
        ({"gpu": "B200"}, ParameterError, "unknown GPU 'B200'"),
    ],
)
def test_decode_steps_refuse_bad_input(kwargs, error, message):
    with pytest.raises(error, match=message):
        plot_decode_steps(LLAMA2_7B, **kwargs)
