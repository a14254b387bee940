"""Hypothesis strategies for shapes that exercise broadcasting and batching."""

from hypothesis import strategies as st

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
