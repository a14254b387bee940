"""Review 10 of the passes and the executor: each test failed before its fix.

Oracle: the same graph run unoptimised (op by op, NumPy's semantics)."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.passes import fold_constants


def _outputs():
    c = cl.constant(np.array([1.5, -2.0, 4.0]))
    return {
        "sum of a constant": cl.sum(c),
        "exp of a Python number": cl.exp(cl.constant(2.0)),
        "element of a constant": c[1],
        "int8 product": cl.constant(np.int8(100)) * cl.constant(np.int8(3)),
    }


@pytest.mark.parametrize("name", list(_outputs()))
def test_a_folded_output_has_the_plain_runs_type(name):
    """A NumPy scalar result folded into a constant came back as a 0-d array
    (``array(3.5)``) where the unoptimised run returns ``np.float64(3.5)``."""
    out = _outputs()[name]
    plain = cl.Executor(out).run()
    optimized = cl.Executor(out, optimize=True).run()
    assert type(optimized) is type(plain) and isinstance(plain, np.generic)
    assert optimized.dtype == plain.dtype and optimized.tobytes() == plain.tobytes()


def test_a_numpy_scalar_is_still_folded_where_another_node_reads_it():
    x = cl.variable("x", (3,), np.float32)
    folded = fold_constants(x * cl.exp(cl.constant(2.0)))
    assert folded.inputs[1].is_constant and folded.inputs[1].dtype == np.float64


def test_a_fused_0d_result_is_the_numpy_scalar_the_plain_run_gives():
    x = cl.variable("x", (), np.float64)
    y = cl.exp(x * 2.0 + 1.0)
    feed = {x: np.array(0.5)}
    plain = cl.Executor([y]).run(feed)[0]
    fused = cl.Executor([y], optimize=True).run(feed)[0]
    assert type(fused) is type(plain) is np.float64
    assert fused == plain
