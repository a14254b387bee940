"""Control flow in the graph (Switch/Merge, cond) and the tracing JIT with guards."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import course_lib as cl
from course_lib.gradcheck import check_gradients


def _branchy():
    x, y, z = (cl.variable(n, shape=()) for n in "xyz")
    out = cl.cond(x < y, lambda: cl.exp(x + z) * 2.0, lambda: cl.sin(y**2) - 1.0)
    return (x, y, z), out


def test_cond_takes_the_right_branch_and_computes_only_it():
    (x, y, z), out = _branchy()
    run = cl.Executor(out)
    assert float(run.run({x: 1.0, y: 2.0, z: 0.5})) == pytest.approx(2 * np.exp(1.5))
    taken_true = run.last_run
    assert float(run.run({x: 3.0, y: 2.0, z: 0.5})) == pytest.approx(np.sin(4.0) - 1.0)
    taken_false = run.last_run
    # true branch: add, exp, mul (3 ops); false branch: pow, sin, sub (3 ops)
    assert taken_true["skipped"] == 3 and taken_false["skipped"] == 3
    assert taken_true["computed"] + 3 == len(run._steps)


@given(values=st.tuples(*[st.floats(-2, 2) for _ in range(3)]))
def test_cond_gradient_matches_finite_differences(values):
    (x, y, z), out = _branchy()
    a, b, c = values
    if abs(a - b) < 1e-3:  # keep the kink out of the finite difference
        b += 0.01
    feed = {x: np.array(a), y: np.array(b), z: np.array(c)}
    for name, (analytic, numeric) in check_gradients(out, feed).items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_cond_operands_and_eager_mode():
    x = cl.variable("x", shape=(3,))
    out = cl.cond(cl.sum(x) > 0, lambda v: v * 2.0, lambda v: -v, x)
    np.testing.assert_array_equal(
        cl.evaluate(out, {x: np.array([1.0, 2.0, -1.0])}), [2.0, 4.0, -2.0]
    )
    np.testing.assert_array_equal(
        cl.evaluate(out, {x: np.array([-1.0, 0.0, 0.0])}), [1.0, 0.0, 0.0]
    )
    t = cl.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    eager = cl.cond(cl.sum(t) > 0, lambda v: v * 3.0, lambda v: v, t)
    cl.sum(eager).backward()
    np.testing.assert_array_equal(t.grad.numpy(), [3.0, 3.0])


def test_cond_rejects_a_vector_predicate():
    x = cl.variable("x", shape=(3,))
    with pytest.raises(cl.ShapeError, match="single value"):
        cl.cond(x > 0, lambda: x, lambda: -x)


def _model(x, w):
    loss = cl.mean(cl.tanh(x @ w) ** 2)
    return loss, cl.grad(loss, w)


def test_jit_equals_eager_values_and_gradients(rng):
    compiled = cl.jit(_model)
    for _ in range(3):
        x, w = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
        loss, dw = compiled(x, w)
        tw = cl.Tensor(w, requires_grad=True)
        eager_loss = cl.mean(cl.tanh(cl.Tensor(x) @ tw) ** 2)
        eager_loss.backward()
        assert float(loss) == pytest.approx(eager_loss.item(), rel=1e-12)
        np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-12)
    assert compiled.stats["traces"] == 1 and compiled.stats["hits"] == 2


def test_jit_retraces_exactly_on_guard_misses(rng):
    compiled = cl.jit(lambda x, scale: cl.sum(x * scale))
    calls = [((2, 3), "f8", 1.0), ((2, 3), "f8", 1.0), ((4, 3), "f8", 1.0), ((2, 3), "f4", 1.0),
             ((2, 3), "f8", 2.0), ((4, 3), "f8", 1.0), ((2, 3), "f8", 2.0)]  # fmt: skip
    for shape, dtype, scale in calls:
        compiled(np.ones(shape, dtype=dtype), scale)
    assert compiled.stats["traces"] == 4  # (2,3,f8,1), (4,3,f8,1), (2,3,f4,1), (2,3,f8,2)
    assert compiled.stats["hits"] == 3
    assert compiled.stats["trace_seconds"] > 0


def test_dynamic_axes_share_one_trace():
    compiled = cl.jit(lambda x: cl.sum(x * x, axis=1), dynamic={0: [0]})
    for n in (1, 5, 17, 3):
        np.testing.assert_allclose(compiled(np.ones((n, 4))), np.full(n, 4.0))
    assert compiled.stats["traces"] == 1


def test_buckets_bound_the_number_of_traces():
    compiled = cl.jit(lambda x: cl.sum(x, axis=0))
    for n in range(1, 40):
        padded, size = cl.pad_to_bucket(np.ones((n, 2)), axis=0)
        assert compiled(padded)[0] == size
    assert compiled.stats["traces"] == 4  # buckets 8, 16, 32, 64


def test_value_dependent_python_control_flow_points_to_cond():
    def relu_by_hand(x):
        return x if cl.sum(x) > 0 else -x

    with pytest.raises(cl.GraphError, match=r"jit\(relu_by_hand\).*cond"):
        cl.jit(relu_by_hand)(np.ones(3))


def test_a_full_cache_falls_back_to_eager_on_a_guard_miss():
    compiled = cl.jit(lambda x: cl.sum(x * x, axis=1), max_traces=2)
    rows = [2, 4, 5, 2, 5, 4, 0, 7]
    for n in rows:
        x = np.arange(3.0 * n).reshape(n, 3)
        x[:, 0] = np.nan if n == 5 else x[:, 0]
        np.testing.assert_array_equal(compiled(x), np.sum(x * x, axis=1))
    # 2 and 4 are traced; 5, 0 and 7 miss every guard once the cache is full, so they run
    # eagerly each time, and the repeated 2 and 4 hit the cache
    assert compiled.stats["traces"] == 2 and len(compiled.cache) == 2
    assert compiled.stats["hits"] == 2 and compiled.stats["eager"] == 4


def test_eager_fallback_gives_the_compiled_values_and_gradients(rng):
    compiled, eager = cl.jit(_model), cl.jit(_model, max_traces=0)
    x, w = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
    (loss, dw), (eager_loss, eager_dw) = compiled(x, w), eager(x, w)
    assert float(eager_loss) == pytest.approx(float(loss), rel=1e-12)
    np.testing.assert_allclose(eager_dw, dw, rtol=1e-12)
    assert np.all(dw != 0)  # a gradient that is really there, not zeros from no graph
    assert eager.stats == {"traces": 0, "hits": 0, "eager": 1, "trace_seconds": 0.0}


def test_eager_fallback_results_are_new_arrays_in_the_returned_form():
    f = cl.jit(lambda a, k: (a, a * k, cl.constant(np.array([1.0, 2.0]))), max_traces=0)
    for arg in (np.array([1.0, 2.0]), cl.Tensor([1.0, 2.0])):
        same, scaled, const = f(arg, 3)
        same[0] = 9.0
        np.testing.assert_array_equal(np.asarray(arg), [1.0, 2.0])
        np.testing.assert_array_equal(scaled, [3.0, 6.0])
        np.testing.assert_array_equal(const, [1.0, 2.0])
    ints = cl.jit(lambda a: a * 2, max_traces=0)(np.array([1, 2]))
    assert ints.dtype == np.int64 and ints.tolist() == [2, 4]


def test_eager_fallback_runs_a_python_if_the_tracer_refuses():
    def relu_by_hand(x):
        return x if cl.sum(x) > 0 else -x

    eager = cl.jit(relu_by_hand, max_traces=0)
    np.testing.assert_array_equal(eager(np.array([1.0, -3.0])), [-1.0, 3.0])
    np.testing.assert_array_equal(eager(np.array([3.0, -1.0])), [3.0, -1.0])
    with pytest.raises(cl.GraphError, match="truth value"):
        cl.jit(relu_by_hand, max_traces=1)(np.ones(3))
