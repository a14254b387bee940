"""Graphs are pure: no op writes into its inputs, so the passes may reorder or rebuild nodes
and an optimised training graph updates parameters exactly like the unoptimised one."""

import numpy as np
import pytest
from op_specs import SPECS, sample

import course_lib as cl
from course_lib.graph import topological_order
from course_lib.models.optim import SGD, AdamW


def _frozen(value):
    if isinstance(value, np.ndarray):
        value = value.view()
        value.flags.writeable = False
    return value


def _run_read_only(outputs, feed):
    """Interpret ``outputs`` op by op, every value read-only: an op that writes into an
    input raises ``ValueError: assignment destination is read-only``."""
    values = {}
    for node in topological_order(outputs):
        if node.is_variable:
            values[node] = _frozen(cl.to_numpy(feed[node]))
        elif node.is_constant:
            values[node] = _frozen(node.op.value)
        else:
            values[node] = _frozen(node.op.compute(np, *(values[i] for i in node.inputs)))
    return [values[o] for o in outputs]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_no_op_writes_into_its_inputs_forward_or_backward(spec):
    shapes = [(2, 3)] * spec.arity
    if spec.shape_kind == "fixed":
        shapes = [tuple(s) for s in spec.extra["shapes"][0]]
    elif spec.shape_kind == "matrix":
        shapes = [(2, 3), (3, 4)]
    elif spec.shape_kind == "rows2":
        shapes = [(2, 3)]
    xs = [cl.variable(f"x{i}", s, np.float64) for i, s in enumerate(shapes)]
    out = spec.build(*xs)
    grads = cl.grad(cl.sum(out), xs)
    t = cl.variable("t", shapes[0], np.float64)
    tangent = cl.jvp(out, {xs[0]: t})
    feed = dict(zip(xs, sample(spec, np.random.default_rng(0), shapes)))
    feed[t] = np.ones(shapes[0])
    _run_read_only([out, *[g for g in grads if g is not None], tangent], feed)


def _training_graph(optimizer, p, q):
    loss = cl.sum(p * q) + cl.sum(cl.tanh(q) * cl.tanh(q))
    grads = dict(zip("pq", cl.grad(loss, [p, q])))
    return [loss, *optimizer.update_nodes({"p": p, "q": q}, grads)]


@pytest.mark.parametrize("make", [lambda a: SGD(lr=0.1), lambda a: AdamW(a, lr=0.1)],
                         ids=["sgd", "adamw"])  # fmt: skip
def test_optimized_training_graph_updates_like_the_unoptimized_one(make):
    rng = np.random.default_rng(0)
    start = {"p": rng.standard_normal(5), "q": rng.standard_normal(5)}
    results = {}
    for optimize in (False, True):
        arrays = {k: v.copy() for k, v in start.items()}
        optimizer = make(arrays)
        p, q = cl.variable("p", (5,), np.float64), cl.variable("q", (5,), np.float64)
        run = cl.Executor(_training_graph(optimizer, p, q), optimize=optimize)
        losses = []
        for _ in range(3):
            loss, *new = run.run({p: arrays["p"], q: arrays["q"], **optimizer.feed()})
            optimizer.write_back(arrays, new)
            losses.append(float(loss))
        results[optimize] = losses, arrays
    (loss0, plain), (loss1, optimized) = results[False], results[True]
    np.testing.assert_allclose(loss1, loss0, rtol=1e-12)
    for name in start:
        assert not np.allclose(plain[name], start[name])
        np.testing.assert_allclose(optimized[name], plain[name], rtol=1e-12, err_msg=name)


def test_running_update_nodes_changes_nothing_until_write_back():
    arrays = {"w": np.arange(3.0)}
    optimizer = AdamW(arrays, lr=0.5)
    w, g = cl.variable("w", (3,), np.float64), cl.variable("g", (3,), np.float64)
    run = cl.Executor(optimizer.update_nodes({"w": w}, {"w": g}))
    values = run.run({w: arrays["w"], g: np.ones(3), **optimizer.feed()})
    np.testing.assert_array_equal(arrays["w"], np.arange(3.0))
    assert not optimizer.m["w"].any() and not optimizer.v["w"].any()
    optimizer.write_back(arrays, values)
    assert (arrays["w"] < np.arange(3.0)).all() and optimizer.m["w"].all()


def test_write_back_refuses_results_of_other_nodes():
    optimizer = SGD(lr=0.1)
    w, g = cl.variable("w", (3,), np.float64), cl.variable("g", (3,), np.float64)
    optimizer.update_nodes({"w": w}, {"w": g})
    with pytest.raises(cl.ShapeError, match="SGD.write_back: 2 values .* 1 parameter"):
        optimizer.write_back({"w": np.zeros(3)}, [np.zeros(3), np.zeros(3)])


@pytest.mark.parametrize("make", [lambda a: SGD(lr=0.1, weight_decay=0.1),
                                  lambda a: AdamW(a, lr=0.1, weight_decay=0.1)],
                         ids=["sgd", "adamw"])  # fmt: skip
def test_update_nodes_write_into_nothing(make):
    arrays = {"p": np.ones(4), "q": np.full(4, 2.0)}
    optimizer = make(arrays)
    p, q = cl.variable("p", (4,), np.float64), cl.variable("q", (4,), np.float64)
    outputs = _training_graph(optimizer, p, q)
    feed = {p: arrays["p"], q: arrays["q"], **optimizer.feed()}
    _run_read_only(outputs, {k: v for k, v in feed.items() if not isinstance(k, str)})
