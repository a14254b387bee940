"""Hypothesis strategies: shapes that exercise broadcasting and batching; random graphs."""

import numpy as np
from hypothesis import strategies as st

import course_lib as cl

dims = st.integers(1, 4)
shapes = st.lists(dims, min_size=1, max_size=3).map(tuple)


@st.composite
def broadcast_pair(draw):
    """A full shape and a shape that broadcasts to it (leading dims dropped, some set to 1)."""
    full = draw(shapes)
    drop = draw(st.integers(0, len(full)))
    other = [1 if draw(st.booleans()) else d for d in full[drop:]]
    if draw(st.booleans()):
        return full, tuple(other)
    return tuple(other), full


@st.composite
def input_shapes(draw, spec):
    """The list of input shapes for an op spec."""
    if spec.shape_kind == "fixed":  # the spec lists the shape combinations it accepts
        return [tuple(s) for s in draw(st.sampled_from(spec.extra["shapes"]))]
    if spec.shape_kind == "matrix":
        m, n, p = draw(dims), draw(dims), draw(dims)
        batch = tuple(draw(st.lists(dims, max_size=1)))
        return [batch + (m, n), (n, p)] if draw(st.booleans()) else [(m, n), batch + (n, p)]
    if spec.shape_kind == "rows2":
        shape = draw(shapes)
        return [(max(2, shape[0]),) + shape[1:]]
    if spec.name == "getitem_fancy":
        return [draw(shapes)]
    if spec.arity == 2 and spec.broadcast:
        return list(draw(broadcast_pair()))
    if spec.arity == 2:
        shape = draw(shapes)
        return [shape, shape]
    return [draw(shapes)]


# -- random expression graphs: a program of steps, each applying an op to earlier nodes ---
graph_programs = st.lists(
    st.tuples(st.booleans(), st.integers(0, 100), st.integers(0, 100), st.integers(0, 100)),
    min_size=1,
    max_size=12,
)


def build_graph(program, unary, binary, dtype=np.float64):
    """Variables a (2, 3) and b (3,), then one node per step (``unary[op](x)`` or
    ``binary[op](x, y)`` on earlier nodes, so nodes get shared). Returns (variables, output)."""
    xs = [cl.variable("a", (2, 3), dtype), cl.variable("b", (3,), dtype)]
    nodes = list(xs)
    for is_binary, op, i, j in program:
        x, y = nodes[i % len(nodes)], nodes[j % len(nodes)]
        fns = binary if is_binary else unary
        nodes.append(fns[op % len(fns)](x, y) if is_binary else fns[op % len(fns)](x))
    return xs, nodes[-1]
