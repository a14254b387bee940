"""``jit`` and ``cond`` at their edges (a review's findings): jit of wrapped and nested
functions, what its guards do not see, and cond's predicates, dtypes, shapes and results."""

import functools
import importlib

import numpy as np
import pytest

import course_lib as cl

jit_module = importlib.import_module("course_lib.runtime.jit")


# -- jit -------------------------------------------------------------------------------------
def test_jit_of_a_jitted_function_keeps_its_own_settings():
    inner = cl.jit(lambda a: cl.sum(a * a, axis=1))
    outer = cl.jit(inner, dynamic={0: [0]})
    for n in (1, 2, 3):
        np.testing.assert_array_equal(outer(np.ones((n, 2))), np.full(n, 2.0))
    assert outer.stats["traces"] == 1 and outer.cache is not inner.cache
    assert inner.stats["traces"] == 0
    assert cl.jit(inner, max_traces=0).max_traces == 0

    def scaled(a):
        return a * 2.0

    scaled.stats = "the user's"  # an attribute of the function is not the JitFunction's
    compiled = cl.jit(scaled)
    compiled(np.ones(2))
    compiled(np.ones(2))
    assert compiled.stats["hits"] == 1


def test_jit_compiles_a_partial_and_a_callable_object():
    class Scale:
        def __call__(self, a):
            return a * 3.0

    partial = cl.jit(functools.partial(lambda a, k: a * k, k=3.0))
    np.testing.assert_array_equal(partial(np.ones(2)), [3.0, 3.0])
    np.testing.assert_array_equal(cl.jit(Scale())(np.ones(2)), [3.0, 3.0])
    with pytest.raises(cl.GraphError, match=r"jit\(partial\).*what the function returns"):
        cl.jit(functools.partial(lambda a: None))(np.ones(2))
    with pytest.raises(cl.GraphError, match="expected a function to compile, got a int"):
        cl.jit(3)


def _square(a):
    return a * a


def _loss_and_grad(x, w):
    loss = cl.sum(cl.jit(_square)(x * w))
    return loss, cl.grad(loss, w)


def test_a_jitted_function_called_by_another_is_inlined():
    x, w = np.ones(2), np.full(2, 3.0)
    for compiled in (cl.jit(_loss_and_grad), cl.jit(_loss_and_grad, max_traces=0)):
        loss, dw = compiled(x, w)  # the eager fallback used to lose the gradient: zeros
        assert float(loss) == 18.0
        np.testing.assert_array_equal(dw, [6.0, 6.0])

    @cl.jit
    def doubled(a, n):
        return a if n == 0 else doubled(a * 2.0, n - 1)

    np.testing.assert_array_equal(doubled(np.ones(2), 3), [8.0, 8.0])
    assert doubled.stats["traces"] == 1
    square = cl.jit(_square)  # called alone (no jitted caller), it compiles again
    assert not isinstance(square(np.ones(2)), cl.Node) and square.stats["traces"] == 1


def test_jit_says_that_a_closure_is_baked_into_the_trace():
    scale = [2.0]
    compiled = cl.jit(lambda a: a * scale[0])
    np.testing.assert_array_equal(compiled(np.ones(2)), [2.0, 2.0])
    scale[0] = 5.0
    np.testing.assert_array_equal(compiled(np.ones(2)), [2.0, 2.0])  # the old trace
    for doc in (jit_module.__doc__, cl.jit.__doc__):
        assert "closure" in doc and "per trace" in doc


# -- cond ------------------------------------------------------------------------------------
def test_cond_results_of_two_known_dtypes_take_their_promotion_on_both_branches():
    a, b = cl.variable("a", (2,), np.float64), cl.variable("b", (2,), np.int64)
    out = cl.cond(cl.sum(a) > 0, lambda: a, lambda: b)
    narrowed = cl.cond(cl.sum(a) > 0, lambda v: v, lambda v: cl.cast(v, np.float32), a)
    for sign in (1.0, -1.0):
        feed = {a: sign * np.array([1.0, 2.0]), b: np.array([3, 4])}
        for node in (out, narrowed):
            got = cl.Executor(node).run(feed, allow_unused=True)
            assert node.dtype == got.dtype == np.float64
    jitted = cl.jit(lambda v: cl.cond(cl.sum(v) > 0, lambda: v, lambda: cl.cast(v, "float32")))
    assert jitted(-np.ones(2)).dtype == jitted(np.ones(2)).dtype == np.float64


def test_cond_shape_is_unknown_where_a_branch_is():
    x = cl.variable("x", (), np.float64)
    anything = cl.variable("anything", None, np.float64)
    out = cl.cond(x > 0, lambda: anything, lambda: cl.constant(np.zeros(3)))
    assert out.shape is None  # was (3,), though the true branch gives any shape
    feed = {x: np.array(1.0), anything: np.arange(5.0)}
    np.testing.assert_array_equal(cl.evaluate(out, feed), np.arange(5.0))
    batch = cl.variable("batch", (None, 3), np.float64)
    rows = cl.cond(x > 0, lambda: batch, lambda: cl.constant(np.zeros((2, 3))))
    assert rows.shape == (None, 3)  # was refused: (None, 3) and (2, 3) fit
    np.testing.assert_array_equal(cl.evaluate(rows, {x: np.array(-1.0), batch: np.ones((2, 3))}),
                                  np.zeros((2, 3)))  # fmt: skip
    with pytest.raises(cl.ShapeError, match="one shape"):
        cl.cond(x > 0, lambda: batch, lambda: cl.constant(np.zeros((2, 4))))


@pytest.mark.parametrize("pred", [False, np.False_, np.array(False), np.array([False])])
def test_cond_with_a_known_predicate_on_tensors_runs_the_taken_function(pred):
    t = cl.Tensor(np.array([2.0, 3.0]), requires_grad=True)
    called = []

    def true_fn(v):
        called.append("true")
        return v * 2.0

    out = cl.cond(pred, true_fn, lambda v: v * 5.0, t)  # was: "Dead" in a NumPy error
    np.testing.assert_array_equal(out.numpy(), [10.0, 15.0])
    cl.sum(out).backward()
    np.testing.assert_array_equal(t.grad.numpy(), [5.0, 5.0])
    assert called == []
    with pytest.raises(cl.ShapeError, match="single value"):
        cl.cond(np.array([True, False]), true_fn, true_fn, t)


def test_cond_branches_may_return_tuples():
    x = cl.variable("x", (2,), np.float64)
    pair = cl.cond(cl.sum(x) > 0, lambda v: (v * 2.0, cl.sum(v)), lambda v: [-v, x[0]], x)
    assert isinstance(pair, tuple) and len(pair) == 2
    grads = cl.grad(pair[0][1] + pair[1], x)
    run = cl.Executor([*pair, grads])
    doubled, total, g = run.run({x: np.array([1.0, 2.0])})
    np.testing.assert_array_equal(doubled, [2.0, 4.0])
    assert total == 3.0
    np.testing.assert_array_equal(g, [1.0, 3.0])
    negated, first, g = run.run({x: np.array([-1.0, -2.0])})
    np.testing.assert_array_equal(negated, [1.0, 2.0])
    assert first == -1.0
    np.testing.assert_array_equal(g, [1.0, -1.0])
    jitted = cl.jit(lambda v: cl.cond(cl.sum(v) > 0, lambda: (v, v * 3.0), lambda: (-v, v)))
    np.testing.assert_array_equal(jitted(np.ones(2))[1], [3.0, 3.0])


def test_cond_names_branches_that_do_not_return_alike():
    x = cl.variable("x", (), np.float64)
    with pytest.raises(cl.GraphError, match=r"true_fn returned 2 node\(s\) and false_fn one"):
        cl.cond(x > 0, lambda: (x, x), lambda: x)
    with pytest.raises(cl.GraphError, match="false_fn must return a node or a tuple of nodes, "
                                            "got None"):  # fmt: skip
        cl.cond(x > 0, lambda: x, lambda: None)
