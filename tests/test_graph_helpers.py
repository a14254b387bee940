"""The helpers graph.py shares with every layer: one node or a list, static shapes, weak
scalars, and the reference interpreter (which must agree with the Executor)."""

from contextlib import contextmanager

import numpy as np
import pytest

import course_lib as cl
from course_lib import graph
from course_lib.errors import GraphError
from course_lib.graph import (
    interpret,
    is_static,
    is_weak_scalar,
    node_list,
    numel,
    same_kind,
)


def test_node_list_takes_one_node_or_an_iterable_of_nodes():
    x = cl.variable("x", (3, 2))
    assert node_list(x, "t") == [x]  # the node, not its rows
    assert node_list((n for n in [x, x * 2.0]), "t")[0] is x  # a generator is read once
    assert node_list([], "t") == []
    for bad, kind in [([x, 3.0], "float"), (3, "int"), ("ab", "str"), (None, "NoneType")]:
        with pytest.raises(cl.GraphError, match=rf"^who: expected graph nodes, got a {kind}$"):
            node_list(bad, "who")


def test_same_kind_gives_back_the_form_that_came_in():
    x = cl.variable("x")
    assert same_kind(x, ["one"]) == "one"
    assert same_kind([x], ["one"]) == ["one"]
    assert same_kind((x,), ["one"]) == ["one"]


@pytest.mark.parametrize(
    "shape, static, size",
    [((), True, 1), ((0, 3), True, 0), ((2, 3), True, 6), (None, False, None),
     ((None,), False, None), ((2, None), False, None)],
)  # fmt: skip
def test_is_static_and_numel(shape, static, size):
    assert is_static(shape) is static
    assert numel(shape) == size


def test_weak_scalars_are_python_number_constants_only():
    assert is_weak_scalar(cl.constant(2.0)) and is_weak_scalar(cl.constant(True))
    assert is_weak_scalar(cl.constant(float("nan")))
    assert not is_weak_scalar(cl.constant(np.float32(2.0)))  # a 0-d array has its own dtype
    assert not is_weak_scalar(cl.constant(np.ones(3)))
    assert not is_weak_scalar(cl.variable("x", ()))


def test_interpret_agrees_with_the_executor_and_keeps_every_value():
    x, y = cl.variable("x", (2, 3)), cl.variable("y", (3,))
    out = cl.exp(x * y) / (cl.sum(x) + 1.0) - cl.log(y)
    feed = {x: np.array([[0.0, -np.inf, 1.0], [2.0, np.nan, -1.0]]), y: np.array([1.0, 0.0, 2.0])}
    with np.errstate(all="ignore"):
        values = interpret(out, dict(feed), np)
        expected = cl.Executor(out).run(feed)
    np.testing.assert_array_equal(values[out], expected)  # NaN where NaN, inf where inf
    assert set(values) == set(cl.topological_order(out))  # every node's value is kept


def test_interpret_names_the_node_that_fails():
    x = cl.variable("x", (None,))
    out = cl.reshape(x, (2, 2)) * 3.0
    with pytest.raises(cl.ShapeError, match=r"reshape.*at node reshape\(x\) failed on .*x: \(3,\)"):
        interpret(out, {x: np.ones(3)}, np)
    with pytest.raises(cl.GraphError, match=r"variable at node x failed .*feed it a value"):
        interpret(out, {}, np)  # an unfed variable keeps its GraphError class


def test_jit_refuses_a_function_that_returns_no_nodes():
    f = cl.jit(lambda a: 3.0)
    with pytest.raises(cl.GraphError, match=r"\(what the function returns\): .*got a float"):
        f(np.ones(2))


@pytest.mark.parametrize(
    "shape, shown",
    [(None, "?"), ((), "scalar"), ((None, 4), "?x4"), ((0, 2), "0x2"), ((3,), "3")],
)
def test_repr_writes_an_unknown_shape_or_dimension_as_a_question_mark(shape, shown):
    assert repr(cl.variable("x", shape=shape)) == f"<Node x = variable [{shown}]>"


def test_tree_size_counts_every_use_and_the_graph_shares_them():
    x = cl.variable("x", shape=())
    assert cl.tree_size(x) == 1 and cl.tree_size(x * x) == 3  # x written twice
    y = x
    for depth in range(1, 6):
        y = y * y  # the graph grows by one node, the formula doubles
        assert cl.tree_size(y) == 2 ** (depth + 1) - 1
        assert len(cl.topological_order(y)) == depth + 1
    deep = x
    for _ in range(5000):  # iterative: a long chain needs no recursion
        deep = cl.sin(deep)
    assert cl.tree_size(deep) == 5001


def test_formula_writes_shared_values_out_and_stops_at_names():
    x, z = cl.variable("x", shape=()), cl.variable("z", shape=())
    u = (x - 1) * x
    assert cl.formula(u * u) == "((x − 1) × x) × ((x − 1) × x)"
    assert cl.formula(u * u, {u: "u"}) == "u × u"  # named nodes are leaves
    assert cl.formula(u, {u: "u"}) == "(x − 1) × x"  # ... but the node itself is written
    assert cl.formula(cl.cos(x * z)) == "cos(x × z)"  # a call needs no more parentheses
    assert cl.formula(cl.cos(x) * cl.sin(z)) == "cos(x) × sin(z)"
    assert cl.formula(cl.exp(x) + cl.exp(x)) == "exp(x) + exp(x)"  # one call, not "(…) + (…)"
    assert cl.formula(-(x + z)) == "−(x + z)" and cl.formula(x) == "x"
    assert cl.formula(cl.log(x) / 2.0) == "ln(x) / 2"  # the op's own writing (Log: ln)
    assert cl.formula(cl.sum_n(x, x * z, z)) == "x + (x × z) + z"
    deep = x
    for _ in range(3000):
        deep = cl.exp(deep)
    assert cl.formula(deep).count("exp(") == 3000


def test_formula_refuses_a_text_beyond_its_limit_before_writing_it():
    x = cl.variable("x", shape=())
    squared = x
    for _ in range(40):  # 41 nodes; written out: 2**40 x's, 2**40 − 1 " × ", (…) around the rest
        squared = squared * squared
    written = f"{2**40 + 3 * (2**40 - 1) + 2 * (2**40 - 2):,}"  # 6,597,069,766,649
    with pytest.raises(
        GraphError,
        match=rf"{written} characters \(more than the limit of "
        r"100,000\); draw the graph instead with cl.draw_graph",
    ):
        cl.formula(squared)
    chain = x
    for _ in range(50_000):  # sin(sin(…x…)): 250,001 characters
        chain = cl.sin(chain)
    with pytest.raises(GraphError, match="250,001 characters"):
        cl.formula(chain)
    assert cl.formula(squared, {squared.inputs[0]: "u"}) == "u × u"  # names keep it short
    assert cl.formula(chain, {chain.inputs[0].inputs[0]: "s"}) == "sin(sin(s))"


def test_formula_counts_its_length_exactly():
    x, z = cl.variable("x", shape=(2,)), cl.variable("z", shape=(2,))
    u = (x - 1) * cl.cos(z)
    for node in [u * u, cl.sum_n(x, u, z)[0] ** 2, cl.exp(-(u + z)), cl.sum(u * x)]:
        text = cl.formula(node)
        with limit(len(text)):
            assert cl.formula(node) == text
        with limit(len(text) - 1), pytest.raises(GraphError, match=f"{len(text)} characters"):
            cl.formula(node)


@contextmanager
def limit(characters: int):
    """``graph.FORMULA_LIMIT`` set to ``characters`` for a block."""
    saved, graph.FORMULA_LIMIT = graph.FORMULA_LIMIT, characters
    try:
        yield
    finally:
        graph.FORMULA_LIMIT = saved


def test_formula_size_is_the_tree_size_for_a_symbolic_derivative():
    x = cl.variable("x", shape=())
    logistic = 4 * x * (1 - x)
    derivative = cl.jvp(4 * logistic * (1 - logistic), {x: 1.0})
    text = cl.formula(derivative)
    leaves = text.count("x") + sum(text.count(c) for c in "14")  # each leaf is one symbol
    operators = sum(text.count(c) for c in "×+−")
    assert leaves + operators == cl.tree_size(derivative) == 52
    assert len(cl.topological_order(derivative)) == 19  # the graph shares what the text repeats
