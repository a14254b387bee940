"""Matplotlib helpers: what they draw, and their refusal of bad input."""

import pytest

from course_lib.viz import plot_breakdown, plot_curve


def test_plot_breakdown_draws_a_pie_and_labelled_bars_in_order():
    fig = plot_breakdown({"attention": 40.0, "MLP": 55.0, "norm": 0.01}, "share", unit="%")
    pie, bars = fig.axes
    assert [t.get_text() for t in pie.texts] == ["attention", "MLP", ""]  # tiny slice unlabelled
    top_down = sorted(zip(bars.get_yticks(), bars.get_yticklabels()), key=lambda t: -t[0])
    assert [label.get_text() for _, label in top_down] == ["attention", "MLP", "norm"]
    assert [t.get_text() for t in bars.texts] == [" 40 %", " 55 %", " 0.01 %"]
    assert repr(fig) == "<Figure size 960x360 with 2 Axes>"


@pytest.mark.parametrize("parts", [{}, {"a": -1.0, "b": 2.0}, {"a": 0.0}])
def test_plot_breakdown_refuses_empty_or_negative_parts(parts):
    with pytest.raises(ValueError, match="non-negative parts with a positive sum"):
        plot_breakdown(parts, "bad")


def test_plot_curve_log_x_axis_base_2():
    fig = plot_curve([512, 1024, 2048], {"a": [1, 2, 3], "b": [3, 2, 1]}, "s", "%", logx=True)
    assert fig.axes[0].get_xscale() == "log" and len(fig.axes[0].lines) == 2


def test_plot_curve_draws_points_under_the_lines_with_a_legend():
    fig = plot_curve([0, 1], {"fit": [0, 1]}, "x", "y", points={"data": ([0, 0.5, 1], [0, 1, 1])})
    ax = fig.axes[0]
    (dots,) = ax.collections
    assert dots.get_offsets().tolist() == [[0, 0], [0.5, 1], [1, 1]]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["data", "fit"]
    assert plot_curve([0, 1], {"fit": [0, 1]}, "x", "y").axes[0].get_legend() is None
