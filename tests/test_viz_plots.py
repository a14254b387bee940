"""Matplotlib helpers: what they draw, and their refusal of bad input."""

import pytest

from course_lib.viz import plot_breakdown, plot_curve, plot_stacked_bars


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


def test_plot_stacked_bars_stacks_the_parts_of_each_bar_under_a_line():
    fig = plot_stacked_bars({"a": {"x": 1.0, "y": 2.0}, "b": {"x": 3.0, "y": 0.5}}, "t", "GiB",
                            line=4.0)
    ax = fig.axes[0]
    tops = sorted((p.get_x(), p.get_y() + p.get_height()) for p in ax.patches)
    assert [top for _, top in tops] == [1.0, 3.0, 3.0, 3.5]  # a: 1 then 1+2; b: 3 then 3+0.5
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    assert ax.lines[0].get_ydata()[0] == 4.0


@pytest.mark.parametrize("bars", [{}, {"a": {"x": 1.0}, "b": {"y": 1.0}}])
def test_plot_stacked_bars_refuses_bars_with_other_parts(bars):
    with pytest.raises(ValueError, match="the same parts"):
        plot_stacked_bars(bars, "bad", "GiB")
