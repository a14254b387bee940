"""Random expression DAGs (with shared nodes and broadcasting): grad and jvp equal
central differences."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from op_specs import UNARY_SPECS, on_any_real
from strategies import build_graph, graph_programs

import course_lib as cl
from course_lib.gradcheck import check_gradients, check_tangents

# the library's smooth one-input ops (not those whose spec keeps inputs away from a kink, as
# relu's): central differences need a derivative near every point; each on a bounded argument
SMOOTH_UNARY = [on_any_real(spec) for spec in UNARY_SPECS if spec.domain != "away0"]
UNARY = [*SMOOTH_UNARY, lambda x: cl.softmax(x, -1), lambda x: x * x]
BINARY = [cl.add, cl.sub, cl.mul, lambda x, y: x / (1.0 + y * y), cl.maximum]


@given(program=graph_programs, seed=st.integers(0, 2**16))
def test_random_graph_gradients(program, seed):
    xs, out = build_graph(program, UNARY, BINARY)
    rng = np.random.default_rng(seed)
    feed = {x: rng.standard_normal(x.shape) for x in xs}
    for name, (analytic, numeric) in check_gradients(out, feed).items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-6, err_msg=name)
    analytic, numeric = check_tangents(out, feed)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-6)
