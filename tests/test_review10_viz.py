"""Review 10 of the pictures (course_lib/viz): slope guides that depended on the order of the
step sizes, tokens read as formulas, characters that broke the SVG, and alt texts that left
out or miscounted what a figure draws."""

import io
import xml.dom.minidom

import numpy as np
import pytest

import course_lib as cl
from course_lib.gradcheck import difference_errors
from course_lib.perf import KernelPoint, Roofline
from course_lib.viz import (
    StepThrough,
    draw_graph,
    draw_step,
    evaluation_trace,
    plot_attention,
    plot_difference_errors,
    plot_roofline,
)
from course_lib.viz.alt import figure_description


def _guides_at_largest_step(fig) -> dict[str, float]:
    found = {}
    for line in fig.axes[0].get_lines():
        x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
        found[line.get_label()] = float(y[np.argmax(x)])
    return found


def test_slope_guides_do_not_depend_on_the_order_of_the_step_sizes():
    """The guides were anchored at the last ε given: with ε decreasing (as difference_errors'
    own example, [1e-1, 1e-2]) that is the round-off end, and the slope-1 guide stood at 4e12
    where the error is 0.04."""
    eps = np.logspace(-15, -1, 57)
    errors = difference_errors(np.sin, np.cos(1.0), 1.0, eps)
    rising = _guides_at_largest_step(plot_difference_errors(eps, errors))
    falling = _guides_at_largest_step(
        plot_difference_errors(eps[::-1], {k: v[::-1] for k, v in errors.items()})
    )
    assert falling == pytest.approx(rising)
    forward = rising["forward difference"]
    assert rising["slope 1"] == pytest.approx(3 * forward)  # beside the curve it guides


@pytest.mark.parametrize(
    "eps, errors",
    [([], {"forward": [], "central": []}), ([0.1, 0.01], {"forward": [0.1], "central": [0.1]})],
)
def test_difference_errors_without_one_error_per_step_are_a_clear_error(eps, errors):
    """No step size was an IndexError; a missing error, matplotlib's "x and y must have same
    first dimension"."""
    with pytest.raises(ValueError, match="plot_difference_errors needs step sizes and one error"):
        plot_difference_errors(eps, errors)


def test_attention_tokens_are_drawn_as_written_not_as_formulas():
    """A token "$$" or "$x^$" stopped the figure from being drawn (mathtext's ParseSyntax
    error, when the notebook showed it); "$x$" was drawn as an italic x."""
    labels = ["$$", "$x^$", "$x$"]
    fig = plot_attention([np.eye(3)], labels, ["head 0"])
    fig.savefig(io.BytesIO(), format="png")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    assert not any(t.get_parse_math() for t in ax.get_xticklabels() + ax.get_yticklabels())


@pytest.mark.parametrize("char", ["\ufffe", "\uffff", "\ud800"])
def test_names_with_non_characters_or_surrogates_are_drawn_written_out(char):
    """U+FFFE and U+FFFF made every SVG invalid XML; a lone surrogate raised
    UnicodeEncodeError in graphviz (draw_graph, draw_step and StepThrough alike)."""
    x = cl.variable(f"a{char}b", shape=())
    y = cl.exp(x)
    grads, trace = cl.gradient_trace(y, x)
    written = ascii(char)[1:-1]
    page = StepThrough(trace).pages[0]
    pictures = [draw_graph(y, backward=grads).svg(), draw_step(trace, 0).svg(),
                page[page.index("<svg") : page.rindex("</svg>") + len("</svg>")]]  # fmt: skip
    for svg in pictures:
        xml.dom.minidom.parseString(svg.encode())
        assert f"v1 = a{written}b" in svg


def test_a_rooflines_alt_text_says_which_kernels_are_memory_or_compute_bound():
    """The alt text kept only the heading of the roofline's text form ("... (ridge between
    memory and compute):", a dangling colon) and counted each kernel's marker as a line."""
    points = [KernelPoint("add", 1e6, 1.2e7, 3e-4), KernelPoint("matmul", 2e9, 1e7, 1e-2)]
    text = figure_description(plot_roofline(points, Roofline(5e10, 2e11)))
    assert "compute): add: AI 0.0833 FLOPs/byte, memory-bound; matmul: AI 200" in text
    assert "compute-bound" in text
    assert "3 lines, 2 marked points" in text  # two ceilings and the ridge; two kernels


def test_an_empty_tangent_seed_is_titled_as_the_column_it_adds():
    """tangents={} added the v̇ column (all zeros) under the title "forward trace"."""
    x = cl.variable("x", shape=())
    table = str(evaluation_trace([x, cl.exp(x)], {x: 1.0}, tangents={}))
    assert table.splitlines()[0] == "forward trace with tangents" and "v̇ (tangent)" in table
