"""Review 8 of the pictures (course_lib/viz): traces without steps, wrong arguments, names that
dot would read as markup, empty strided views, scalar-constant outputs, and an adjoint table
that replayed the trace once per row."""

import html
import re
import xml.dom.minidom

import numpy as np
import pytest

import course_lib as cl
from course_lib.autodiff.trace import Replay
from course_lib.perf import KernelPoint, Roofline
from course_lib.strides import StridedView
from course_lib.viz import (
    StepThrough,
    adjoint_trace,
    draw_graph,
    draw_step,
    evaluation_trace,
    plot_layout,
    plot_roofline,
)


def _texts(svg: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]


def _svg_of(page: str) -> str:
    return page[page.index("<svg") : page.rindex("</svg>") + len("</svg>")]


# -- traces ---------------------------------------------------------------------------------
def test_a_trace_without_steps_is_a_clear_error_not_an_index_error():
    """sin(z) does not depend on x: gradient(out) visits no node. StepThrough crashed with
    "list index out of range" inside the SVG cutting."""
    x, z = cl.variable("x", shape=()), cl.variable("z", shape=())
    _, trace = cl.gradient_trace(cl.sin(z), x)
    assert trace.steps == []
    for show in (StepThrough, lambda t: draw_step(t, 0)):
        with pytest.raises(cl.GraphError, match=r"gradient\(sin\(z\)\) has 0 steps: .* depend"):
            show(trace)
    assert str(adjoint_trace(trace, {z: 1.0})).splitlines()[0] == "adjoint trace"  # no rows


@pytest.mark.parametrize("step", [True, 1.0, -1, None, "1"])
def test_draw_step_refuses_a_step_that_is_not_an_index_of_the_trace(step):
    """True drew step 2; 1.0, None and "1" raised Python's TypeError."""
    x = cl.variable("x", shape=())
    _, trace = cl.gradient_trace(x * x, x)
    with pytest.raises(cl.OutOfRangeError, match=r"draw_step: step must be an integer from 0 to 3"):
        draw_step(trace, step)
    assert repr(draw_step(trace, np.int64(1))).startswith("gradient(out) step 2/4")


@pytest.mark.parametrize(
    "show, caller",
    [
        (lambda t: draw_step(t, 0), "draw_step"),
        (StepThrough, "StepThrough"),
        (lambda t: adjoint_trace(t, {}), "adjoint_trace"),
        (lambda t: draw_graph(cl.variable("x"), trace=t), "draw_graph"),
    ],
)
def test_what_is_not_a_trace_is_named_not_an_attribute_error(show, caller):
    with pytest.raises(cl.GraphError, match=f"{caller}: .*Trace of a gradient_trace run"):
        show(np.ones(3))


def test_adjoint_trace_replays_the_trace_once():
    """It replayed the trace from the start for each adjoint: 18 s for a chain of 2,000 ops."""
    x = cl.variable("x", shape=())
    y = x
    for _ in range(60):
        y = cl.sin(y)
    _, trace = cl.gradient_trace(y, x)
    advanced, advance = [0], Replay.advance

    def counted(self):
        advanced[0] += 1
        return advance(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Replay, "advance", counted)
        table = adjoint_trace(trace, {x: 0.3})
    assert advanced[0] <= 2 * len(trace.steps)  # trace_values, then the table: 121 steps each
    rows = str(table).splitlines()[3:]
    assert len(rows) == 61 and rows[0].split()[:3] == ["v̄61", "1", "(seed)"]
    assert rows[1].split()[:2] == ["v̄60", "v̄(60→61)"] and rows[-1].split()[:2] == ["v̄1", "v̄(1→2)"]


def test_step_through_checks_its_interval_when_built_not_when_shown():
    """A bad interval_ms was accepted, and html() (the notebook's display) raised ValueError."""
    x = cl.variable("x", shape=())
    _, trace = cl.gradient_trace(cl.exp(x), x)
    with pytest.raises(cl.GraphError, match="StepThrough: interval_ms must be a real number"):
        StepThrough(trace, interval_ms="fast")
    with pytest.raises(cl.ParameterError, match="StepThrough: interval_ms must be finite"):
        StepThrough(trace, interval_ms=float("nan"))
    assert 'data-interval="700"' in StepThrough(trace, interval_ms=700).html()


# -- names dot would read ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, drawn",
    [("a&amp;b", "a&amp;b"), ("x&lt;y", "x&lt;y"), ("nul\x00", r"nul\x00"),
     ("esc\x1b", r"esc\x1b")],  # fmt: skip
)
def test_names_with_character_references_or_control_characters_are_drawn_as_written(name, drawn):
    """dot read "&lt;" as "<" (the label lied); a NUL ended dot's input (a syntax error), and
    other control characters made the SVG invalid XML."""
    x = cl.variable(name, shape=())
    c = cl.constant(2.0, name=f"c{name}")
    y = cl.exp(x) * c
    grads, trace = cl.gradient_trace(y, x)
    pictures = [
        draw_graph(y, {x: 0.5}, backward=grads, title=name).svg(),
        draw_step(trace, 1, feed={x: 0.5}).svg(),
        *map(_svg_of, StepThrough(trace, feed={x: 0.5}).pages),
    ]
    for svg in pictures:
        xml.dom.minidom.parseString(svg.encode())  # well-formed XML
        assert f"v1 = {drawn}" in _texts(svg)
    assert drawn in _texts(pictures[0])  # the title
    assert f"v3 = v2 × c{drawn}" in _texts(pictures[0])


# -- draw_graph's arguments -------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_nodes": "5"}, "draw_graph: max_nodes must be an integer"),
        ({"title": 5}, "draw_graph: title must be a string"),
        ({"clusters": "no"}, "draw_graph: clusters must be True or False"),
        ({"labels": {"x": "input"}}, "draw_graph: labels must be keyed by graph nodes"),
        ({"tangents": [1.0]}, "draw_graph: tangents must be a mapping"),
    ],
)
def test_draw_graph_names_a_wrong_argument(kwargs, message):
    """max_nodes="5" and title=5 raised Python's TypeError and AttributeError; labels keyed by
    a name were silently ignored; clusters="no" drew the clusters."""
    x = cl.variable("x", shape=())
    with pytest.raises(cl.GraphError, match=message):
        draw_graph(cl.exp(x), **kwargs)


def test_draw_graph_refuses_labels_and_numberings_that_would_lie():
    """{x: None} drew "None = x"; numbering=[x, x] numbered x twice, leaving no v1."""
    x, w = cl.variable("x", shape=()), cl.variable("w", shape=())
    y = x * w
    with pytest.raises(cl.GraphError, match="the label of x must be a non-empty string, got None"):
        draw_graph(y, labels={x: None})
    with pytest.raises(cl.GraphError, match=r"numbering lists x twice \(as v1 and v2\)"):
        draw_graph(y, numbering=[x, x])
    assert repr(draw_graph(y, numbering=[w, x])).splitlines()[1:] == [
        "  v1 = w", "  v2 = x", "  v3 = v2 × v1"
    ]  # fmt: skip


def test_a_scalar_constant_given_to_draw_is_drawn():
    """Scalar constants are written into their users' labels, so one given to draw (with no
    user) vanished: "graph with 0 nodes"."""
    three = cl.constant(3.0)
    assert repr(draw_graph(three)).splitlines() == ["graph with 1 node (1 forward)", "  3"]
    x = cl.variable("x", shape=())
    fig = draw_graph(x, update=cl.constant(0.5))
    lines = repr(fig).splitlines()
    # in creation order: 0.5 may be a constant made earlier (constants are shared by value)
    assert lines[0] == "graph with 2 nodes (1 forward, 1 update)"
    assert sorted(lines[1:]) == ["  0.5", "  v1 = x"]
    assert "0.5" in _texts(fig.svg())
    assert repr(draw_graph(x * 2.0)).splitlines()[1:] == ["  v1 = x", "  v2 = v1 × 2"]  # inline


# -- evaluation_trace ---------------------------------------------------------------------------
def test_evaluation_trace_refuses_a_node_given_twice():
    """[x, x] named both rows v2 (and wrote x's definition as v2)."""
    x = cl.variable("x", shape=())
    with pytest.raises(cl.GraphError, match=r"nodes lists x twice \(as v1 and v2\)"):
        evaluation_trace([x, x], {x: 1.0})


def test_evaluation_trace_takes_one_node_and_names_what_is_not_one():
    """One node was iterated (its rows: "cannot iterate over node x"); an array failed in
    Executor."""
    x = cl.variable("x", shape=(2,))
    rows = str(evaluation_trace(x, {x: np.ones(2)})).splitlines()[3:]
    assert [row.split()[:2] for row in rows] == [["v1", "x"]]
    with pytest.raises(cl.GraphError, match="evaluation_trace: nodes: expected graph nodes"):
        evaluation_trace(np.ones(3), {x: np.ones(2)})
    with pytest.raises(cl.GraphError, match="evaluation_trace: tangents must be a mapping"):
        evaluation_trace([x], {x: np.ones(2)}, tangents=[1.0])


# -- plots ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 3), (2**40, 0)])
def test_plot_layout_draws_an_empty_view(shape):
    """An empty view failed in NumPy's reshape (and (2**40, 0) listed 2**40 row labels)."""
    view = StridedView(np.zeros(3), shape)
    fig = plot_layout(view)
    logical, memory = fig.axes
    assert len(logical.patches) == 0 and len(memory.patches) == 3  # the buffer, every cell unused
    assert f"shape {shape}" in logical.get_title()


def test_plots_name_an_argument_of_the_wrong_kind():
    with pytest.raises(cl.GraphError, match="plot_layout draws a StridedView, got a ndarray"):
        plot_layout(np.zeros(3))
    points = [KernelPoint("add", 1e6, 1.2e7, 3e-4)]
    with pytest.raises(cl.GraphError, match="plot_roofline: roofline must be a Roofline"):
        plot_roofline(points, None)
    assert plot_roofline(points, Roofline(5e10, 2e11)).axes
