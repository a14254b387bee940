"""Pictures use the lecture's names: v1…vn for forward values (inputs included, constants
not counted), v̄i and v̄(k→i) for adjoints, v̇i for tangents, t1, t2, … for the intermediates
of derivative and update rules."""

import re

import numpy as np
import pytest

import course_lib as cl
from course_lib.viz import draw_graph, draw_step
from course_lib.viz.graphs import STAGE_STYLES

# The lecture's evaluation trace of y = ln x1 + x1·x2 − sin x2: sin v2 comes before the sum.
LECTURE_TRACE = ["v1 = x1", "v2 = x2", "v3 = ln(v1)", "v4 = v1 × v2", "v5 = sin(v2)",
                 "v6 = v3 + v4", "v7 = v6 − v5"]  # fmt: skip


def _lines(fig) -> list[str]:
    """The node lines of a picture's text summary."""
    return [line.strip() for line in repr(fig).splitlines()[1:]]


def _labels(fig) -> dict[str, str]:
    """Each DOT node's label, its first line (the definition) mapped to its whole DOT line."""
    found = re.findall(r'^\t+(n\d+) \[label="([^"]*)"(.*)\]$', fig.source, re.M)
    return {label.split("\n")[0]: attrs for _, label, attrs in found}


def test_worked_example_forward_and_backward_in_the_lectures_names(worked_example):
    v1, v4, dv1, trace = worked_example
    fig = draw_graph(v4, {v1: 0.5}, backward=dv1, trace=trace)
    assert repr(fig).splitlines()[0] == "graph with 9 nodes (4 forward, 5 backward)"
    assert _lines(fig) == [
        "v1",
        "v2 = exp(v1)",
        "v3 = v2 + 1",
        "v4 = v2 × v3",
        "v̄4 = 1",
        "v̄(2→4) = v̄4 × v3",
        "v̄3 = v̄4 × v2 ≡ v̄(3→4) ≡ v̄(2→3)",  # ∂v3/∂v2 = 1: one node, three names
        "v̄2 = v̄(2→4) + v̄3",
        "v̄1 = v̄2 × v2 ≡ v̄(1→2)",
    ]
    labels = _labels(fig)
    assert 'v̄1 = v̄2 × v2\n= 7.085\n≡ v̄(1→2)"' in fig.source  # f'(0.5) = 2e + e^0.5
    assert "dashed" in labels["v̄2 = v̄(2→4) + v̄3"] and "dashed" not in labels["v4 = v2 × v3"]


def test_lecture_graph_adjoints_are_the_lectures(lecture_graph):
    v1, v2, *_, v7 = lecture_graph
    grads, trace = cl.gradient_trace(v7, [v1, v2])
    fig = draw_graph(v7, {v1: 2.0, v2: 5.0}, backward=grads, trace=trace)
    assert _lines(fig) == [
        *LECTURE_TRACE,
        "v̄7 = 1 ≡ v̄6 ≡ v̄4 ≡ v̄3 ≡ v̄(6→7) ≡ v̄(3→6) ≡ v̄(4→6)",  # + and − pass v̄ on
        "v̄5 = −v̄7 ≡ v̄(5→7)",
        "t1 = cos(v2)",  # an intermediate of sin's rule, not a value of the lecture
        "v̄(2→5) = v̄5 × t1",
        "v̄(1→4) = v̄7 × v2",
        "v̄(2→4) = v̄7 × v1",
        "v̄(1→3) = v̄7 / v1",
        "v̄2 = v̄(2→5) + v̄(2→4)",
        "v̄1 = v̄(1→4) + v̄(1→3)",
    ]
    assert "v̄2 = v̄(2→5) + v̄(2→4)\n= 1.716" in fig.source
    assert "v̄1 = v̄(1→4) + v̄(1→3)\n= 5.500" in fig.source


def test_lecture_graph_tangents_are_the_lectures_and_styled_as_tangents(lecture_graph):
    v1, v2, *_, v7 = lecture_graph
    fig = draw_graph(v7, {v1: 2.0, v2: 5.0}, tangents={v1: 1.0})
    assert repr(fig).splitlines()[0] == "graph with 11 nodes (7 forward, 4 tangent)"
    assert _lines(fig)[7:] == [
        "v̇1 = 1",
        "v̇3 = v̇1 / v1",
        "v̇4 = v̇1 × v2",
        "v̇6 = v̇3 + v̇4 ≡ v̇7",  # v̇5 = v̇2·cos v2 = 0, so v̇7 = v̇6 − 0 is the node v̇6
    ]
    labels = _labels(fig)
    tangent = STAGE_STYLES["tangent"]
    for name, value in [("v̇1 = 1", "1.000"), ("v̇3 = v̇1 / v1", "0.500"),
                        ("v̇4 = v̇1 × v2", "5.000"), ("v̇6 = v̇3 + v̇4", "5.500")]:  # fmt: skip
        assert f"{name}\n= {value}" in fig.source
        assert f'color="{tangent["color"]}" fillcolor="{tangent["fillcolor"]}"' in labels[name]
    backward = STAGE_STYLES["backward"]
    assert backward["color"] not in fig.source and "dashed" not in fig.source


def test_part_of_an_example_keeps_the_lectures_numbers(lecture_graph):
    v1, v2, v3, v4 = lecture_graph[:4]
    fig = draw_graph(v4, tangents={v1: 1.0, v2: 0.0}, numbering=[v1, v2, v3, v4])
    assert _lines(fig) == [
        "v1 = x1",
        "v2 = x2",
        "v4 = v1 × v2",  # not v3: the lecture's v3 = ln v1 is not drawn
        "v̇1 = 1",
        "v̇2 = 0",
        "t1 = v̇1 × v2",
        "t2 = v1 × v̇2",
        "v̇4 = t1 + t2",  # v̇4 = v̇1·v2 + v1·v̇2
    ]
    later = cl.sin(v4)  # not in the numbering: counts on after it
    assert _lines(draw_graph(later, numbering=[v1, v2, v3, v4]))[-1] == "v5 = sin(v4)"


def test_a_seed_is_a_node_of_its_own(lecture_graph):
    """The number 1.0 is one shared constant node: seeding with it must not rename its
    other uses, nor make two seeds of the same value one node."""
    x1, x2 = lecture_graph[:2]
    y = x1 * x2 + 1.0
    lines = _lines(draw_graph(y, tangents={x1: 1.0, x2: 1.0}))
    assert "v4 = v3 + 1" in lines
    assert "v̇1 = 1" in lines and "v̇2 = 1" in lines
    assert "v̇3 = t1 + t2 ≡ v̇4" in lines and "t2 = v1 × v̇2" in lines
    as_nodes = _lines(draw_graph(y, tangents={x1: cl.constant(1.0), x2: cl.constant(1.0)}))
    assert as_nodes == lines


def test_array_seeds_and_constants():
    v = cl.variable("v", shape=(3,))
    w = cl.constant(np.arange(3.0))
    bias = cl.constant(np.ones(3), name="b")
    y = cl.sum((v * w + bias) * v)
    lines = _lines(draw_graph(y, tangents={v: np.array([1.0, 0.0, 0.0])}))
    assert lines[:6] == [
        "v1 = v",
        "const[3]",  # constants are written as what they are, not numbered
        "b = const[3]",
        "v2 = v1 × const[3]",
        "v3 = v2 + b",
        "v4 = v3 × v1",
    ]
    assert lines[7] == "v̇1 = const[3]"
    assert lines[-1] == "v̇5 = sum(v̇4)"
    scalar_seed = _lines(draw_graph(cl.sum(v * v), tangents={v: 1.0}))
    assert "v̇1 = broadcast_to(1, shape=(3,))" in scalar_seed


# The slide's backward graph of f = (exp(v1) + 1)·exp(v1), adjoints first among a node's names.
LECTURE_BACKWARD = ["v̄4 = 1", "v̄(2→4) = v̄4 × v3", "v̄3 = v̄4 × v2 ≡ v̄(3→4) ≡ v̄(2→3)",
                    "v̄2 = v̄(2→4) + v̄3", "v̄1 = v̄2 × v2 ≡ v̄(1→2)"]  # fmt: skip


def _names(fig) -> list[str]:
    """The name each node is drawn with (the first word of its label)."""
    return [line.split(" ")[0] for line in _lines(fig)]


def _lecture_example():
    v1 = cl.variable("v1", shape=())
    v2 = cl.exp(v1)
    v3 = v2 + 1
    return v1, v2 * v3


def test_a_backward_graph_from_grad_is_drawn_in_the_lectures_names():
    v1, v4 = _lecture_example()
    fig = draw_graph(v4, backward=[cl.grad(v4, v1)])
    assert _names(fig)[4:] == ["v̄4", "v̄(2→4)", "v̄3", "v̄2", "v̄1"]
    assert _lines(fig) == ["v1", "v2 = exp(v1)", "v3 = v2 + 1", "v4 = v2 × v3", *LECTURE_BACKWARD]
    assert not any(re.fullmatch(r"t\d+", name) for name in _names(fig))


def test_gradient_trace_needs_no_trace_argument_to_draw_its_names(worked_example):
    v1, v4, dv1, trace = worked_example
    without = draw_graph(v4, {v1: 0.5}, backward=dv1)
    assert _lines(without)[4:] == LECTURE_BACKWARD
    assert without.source == draw_graph(v4, {v1: 0.5}, backward=dv1, trace=trace).source


def test_nodes_no_run_named_are_intermediates(worked_example):
    v1, v4, dv1, _ = worked_example
    fig = draw_graph(v4, backward=dv1, update=v1 - 0.1 * dv1)
    assert _names(fig)[4:] == ["v̄4", "v̄(2→4)", "v̄3", "v̄2", "v̄1", "t1", "t2"]
    assert _lines(fig)[-2:] == ["t1 = 0.1 × v̄1", "t2 = v1 − t1"]  # update nodes: no lecture name
    v2, v3 = v4.inputs
    by_hand = v4.op.gradient(v4, cl.ones_like(v4), [True, True])  # a rule called directly
    assert _names(draw_graph(v4, backward=by_hand)) == ["v1", "v2", "v3", "v4", "t1", "t2", "t3"]
    same_numbers = draw_graph(v4, backward=dv1, numbering=[v1, v2, v3, v4])
    assert _lines(same_numbers)[4:] == LECTURE_BACKWARD
    other_numbers = draw_graph(v4, backward=dv1, numbering=[v1, v3, v2, v4])
    assert _names(other_numbers)[4:] == ["t1", "t2", "t3", "t4", "t5"]  # v̄3 would be wrong


def test_the_names_a_run_keeps_go_with_its_nodes():
    import gc
    import weakref

    from course_lib.autodiff.trace import names_of

    v1, v4 = _lecture_example()
    g = cl.grad(v4, v1)
    assert names_of([g]).roles[g] == ["v̄1", "v̄(1→2)"]
    gone = weakref.ref(g)
    del g
    gc.collect()
    assert gone() is None  # the kept names hold no backward node


def test_labels_rename_and_the_lectures_names_stay_as_aliases(worked_example):
    v1, v4, dv1, trace = worked_example
    lines = _lines(draw_graph(v4, backward=dv1, trace=trace, labels={dv1: "df/dv1"}))
    assert lines[-1] == "df/dv1 = v̄2 × v2 ≡ v̄1 ≡ v̄(1→2)"
    new_v1, new_v1_again = v1 - 0.1 * dv1, v1 - 0.2 * dv1
    labels = {new_v1: "v1'"}  # a labelled node takes no intermediate's number
    lines = _lines(draw_graph(v4, update=[new_v1, new_v1_again], trace=trace, labels=labels))
    assert lines[-4:] == ["t1 = 0.1 × v̄1", "v1' = v1 − t1", "t2 = 0.2 × v̄1", "t3 = v1 − t2"]


def test_a_trace_and_a_numbering_together_are_refused(worked_example):
    v1, v4, dv1, trace = worked_example
    with pytest.raises(cl.GraphError, match="trace or a numbering, not both"):
        draw_graph(v4, backward=dv1, trace=trace, numbering=[v1])


def test_step_pictures_use_the_names_the_nodes_have_so_far(worked_example):
    *_, trace = worked_example
    third = draw_step(trace, 2).source  # i = 4, k = 3 appended v̄(3→4)
    assert '"v̄(3→4) = v̄4 × v2"' in third
    fourth = draw_step(trace, 3).source  # i = 3: v̄3 = v̄(3→4) is that node
    assert '"v̄3 = v̄4 × v2\n≡ v̄(3→4)"' in fourth
    last = draw_step(trace, 7).source
    assert '"v̄1 = v̄2 × v2\n≡ v̄(1→2)"' in last and '"v̄2 = v̄(2→4) + v̄3"' in last


def test_trace_roles_put_the_adjoint_first(worked_example):
    *_, dv1, trace = worked_example
    assert trace.roles(dv1) == ["v̄1", "v̄(1→2)"]
    assert trace.roles(dv1, upto=6) == ["v̄(1→2)"]  # before line v̄1 = sum(...) ran


def test_seeds_that_reach_nothing_draw_no_tangent(lecture_graph):
    x1, x2, v3 = lecture_graph[:3]
    plain = draw_graph(v3).source
    assert draw_graph(v3, tangents={}).source == plain
    assert draw_graph(v3, tangents={x2: 1.0}).source == plain  # ln(x1) does not use x2
    with pytest.raises(cl.GraphError, match="constant"):
        draw_graph(v3, tangents={cl.constant(2.0): 1.0})


def test_one_expression_numbers_in_creation_order_unless_given_the_lectures():
    """Python builds ``ln x1 + x1·x2 − sin x2`` left to right: the add before the sin, so
    creation order calls the add v5; the lecture's trace computes sin v2 first (v5), and
    ``numbering`` draws it with the lecture's numbers."""
    x1, x2 = cl.variable("x1", shape=()), cl.variable("x2", shape=())
    y = cl.log(x1) + x1 * x2 - cl.sin(x2)
    assert _lines(draw_graph(y))[4:] == ["v5 = v3 + v4", "v6 = sin(v2)", "v7 = v5 − v6"]
    v6, v5 = y.inputs
    fig = draw_graph(y, numbering=[x1, x2, *v6.inputs, v5, v6, y])
    assert _lines(fig) == LECTURE_TRACE


def test_a_second_backward_pass_has_its_own_style_and_box(worked_example):
    v1, v4, dv1, trace = worked_example
    d2 = cl.grad(dv1, v1)
    fig = draw_graph(v4, backward=dv1, second_backward=d2, trace=trace, clusters=True)
    assert (
        repr(fig).splitlines()[0]
        == "graph with 16 nodes (4 forward, 5 backward, 7 second backward)"
    )
    labels = _labels(fig)
    first, second = STAGE_STYLES["backward"], STAGE_STYLES["second backward"]
    assert first["color"] != second["color"]
    assert f'color="{first["color"]}"' in labels["v̄1 = v̄2 × v2"]  # first order keeps its style
    assert f'color="{second["color"]}"' in labels["t6 = t3 + t4 + t5"]
    assert 'label="second backward"' in fig.source and "cluster_second_backward" in fig.source
    alone = draw_graph(v4, backward=[dv1, d2], trace=trace)  # one pass: one style, as before
    assert second["color"] not in alone.source and _lines(alone) == _lines(fig)
