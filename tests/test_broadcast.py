"""Broadcasting and its adjoint (course_lib.ops.broadcast): the lecture's examples draw no
plumbing nodes, and shapes unknown while the graph is built still get the right gradients."""

import re
from pathlib import Path

import numpy as np
import pytest

import course_lib as cl
from course_lib.gradcheck import check_gradients, check_tangents

PLUMBING = {"sum_to", "broadcast_to", "reshape"}
README = Path(__file__).parents[1] / "README.md"


def backward_ops(outputs, backward) -> list[str]:
    """The op names of the nodes that ``backward`` adds to the graph of ``outputs``."""
    forward = set(cl.topological_order(outputs))
    return [n.op.name for n in cl.topological_order(backward) if n not in forward]


def readme_example():
    """The README tour's graph and gradients, built by the README's own lines."""
    block = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    lines = block.splitlines()
    upto = next(i for i, line in enumerate(lines) if line.startswith("dy = "))
    scope: dict = {}
    exec("\n".join(lines[: upto + 1]), scope)
    return scope["y"], scope["dy"]


def test_readme_example_draws_only_the_lectures_backward_nodes():
    y, dy = readme_example()
    ops = backward_ops(y, dy)
    # v̄7 = 1; v̄5 = −v̄7; v̄(2→5) = v̄5·cos v2; v̄(1→4), v̄(2→4); v̄(1→3) = v̄3 / v1; two sums
    assert sorted(ops) == sorted(["ones_like", "neg", "cos", "mul", "mul", "mul", "div",
                                  "sum_n", "sum_n"])  # fmt: skip
    assert [float(v) for v in cl.evaluate(dy, {"x1": 2.0, "x2": 5.0})] == pytest.approx(
        [5.5, 2.0 - np.cos(5.0)]
    )


def lecture_examples():
    """The backward graphs notebooks 03 and 04 draw, as they build them."""
    w1 = cl.variable("v1", shape=())
    w2 = cl.exp(w1)
    w4 = w2 * (w2 + 1)
    a = cl.variable("a", shape=())
    b = a + a
    x = cl.variable("x", shape=(256, 2))
    y = cl.variable("y", shape=(256, 1))
    m1, m2 = cl.variable("w1", shape=(2, 16)), cl.variable("w2", shape=(16, 1))
    loss = cl.mean((cl.relu(x @ m1) @ m2 - y) ** 2)
    return {
        "03 f(v1)": (w4, cl.grad(w4, [w1])),
        "03 second derivative": (w4, cl.grad(cl.grad(w4, w1), w1)),
        "03 b + b": (b + b, cl.grad(b + b, [a])),
        "04 MLP": (loss, cl.grad(loss, [m1, m2])),
    }


@pytest.mark.parametrize("name", list(lecture_examples()))
def test_lecture_examples_have_no_plumbing_nodes(name):
    out, grads = lecture_examples()[name]
    assert not PLUMBING & set(backward_ops(out, grads)), backward_ops(out, grads)


# -- when broadcasting provably did not happen, nothing is added, even for unknown shapes ------
def test_no_sum_to_where_broadcasting_provably_did_not_happen():
    x, s = cl.variable("x"), cl.variable("s", shape=())
    cases = {
        "0-d constant": x * 2.0 + 1.0,
        "same node": x * x,
        "unary chain": cl.exp(cl.sin(x)) / 3.0,
        "0-d variable operand, x's side": x * s,
    }
    for name, out in cases.items():
        assert "sum_to" not in backward_ops(out, cl.grad(out, x)), name
        # the seed t is broadcast to x's unknown shape once; the rules add nothing
        assert backward_ops(out, cl.jvp(out, {x: cl.variable("t")})).count("broadcast_to") == 1


def test_partly_known_shapes_that_cannot_stretch_add_nothing():
    x, b = cl.variable("x", (None, 4)), cl.variable("b", (4,))
    out = x + b
    ops = backward_ops(out, cl.grad(out, [x, b]))
    assert ops.count("sum_to") == 1  # b's (4,) is summed over rows; x's (None, 4) is the output's


def test_unknown_shapes_that_may_broadcast_keep_their_sum_to():
    x, y = cl.variable("x"), cl.variable("y")
    out = x * y
    assert backward_ops(out, cl.grad(out, [x, y])).count("sum_to") == 2


# -- adversarial: unknown shapes that DO broadcast, on every path ------------------------------
# name: (build, {variable: (shape fed, shape declared)})
BROADCASTING = {
    "outer product": (
        lambda x, y: cl.sum(cl.exp(x * y) + y * 2.0 - x / (y * y + 1.0)),
        {"x": ((3, 1), None), "y": ((1, 4), None)},
    ),
    "0-d variable times unknown": (
        lambda x, s: cl.sum(cl.tanh(x * s) + s),
        {"x": ((2, 3), None), "s": ((), ())},
    ),
    "size-1 axis of a partly known shape": (
        lambda x, y: cl.sum((x + 1.0) * y),
        {"x": ((2, 1), (None, 1)), "y": ((2, 5), None)},
    ),
    "where with a broadcast condition": (
        lambda x, y: cl.sum(cl.where(x > 0.0, x * 3.0, y)),
        {"x": ((1, 3), None), "y": ((4, 1), None)},
    ),
    "sum_n of three": (
        lambda x, y: cl.sum(cl.sum_n(x, y, x * y)),
        {"x": ((3,), None), "y": ((2, 1), None)},
    ),
}


@pytest.mark.parametrize("name", list(BROADCASTING))
def test_unknown_broadcasting_shapes_get_the_right_gradient_on_every_path(name):
    build, shapes = BROADCASTING[name]
    rng = np.random.default_rng(len(name))
    arrays = {
        v: rng.uniform(0.3, 1.5, fed) * rng.choice([-1.0, 1.0], fed)  # away from kinks
        for v, (fed, _) in shapes.items()
    }
    variables = [cl.variable(v, declared, np.float64) for v, (_, declared) in shapes.items()]
    out = build(*variables)
    feed = {v: arrays[v.name] for v in variables}
    for label, (analytic, numeric) in check_gradients(out, feed).items():  # the executor
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8, err_msg=label)
        assert np.shape(analytic) == shapes[label][0]
    grads = cl.grad(out, variables)
    plain = cl.Executor(grads).run(feed)
    optimised = cl.Executor(grads, optimize=True).run(feed)
    tensors = [cl.Tensor(arrays[v], requires_grad=True) for v in shapes]
    build(*tensors).backward()
    for v, expected, fast, tensor in zip(shapes, plain, optimised, tensors):
        assert np.shape(expected) == np.shape(fast) == tensor.grad.shape == shapes[v][0]
        np.testing.assert_allclose(fast, expected, rtol=1e-12, err_msg=f"optimised d/d{v}")
        np.testing.assert_allclose(tensor.grad.numpy(), expected, rtol=1e-12, err_msg=f"eager {v}")
    analytic, numeric = check_tangents(out, feed)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("seed", [1.0, np.ones(1), np.ones((1, 3))])
def test_a_small_tangent_seed_of_an_unknown_shaped_variable_takes_its_shape(seed):
    x, s = cl.variable("x"), cl.variable("s", shape=())
    for out in (x * s, x + s, s - x, cl.exp(x) * s, x * 2.0 + s):
        run = cl.Executor(cl.jvp(out, {x: seed}))
        tangent = run.run({x: np.full((2, 3), 0.5), s: 2.0}, allow_unused=True)
        assert np.shape(tangent) == (2, 3)


# -- the two ops, each the other's adjoint, in both forms --------------------------------------
def test_broadcast_to_and_sum_to_are_each_others_adjoint_in_both_forms():
    for shape in [(1, 3), None]:
        x = cl.variable("x", shape=shape, dtype=np.float64)
        like = cl.variable("like", shape=None if shape is None else (4, 3), dtype=np.float64)
        wide = cl.ops.broadcast.broadcast_like(x, like)
        narrow = cl.sum_to(wide * wide, x)
        assert [wide.op.name, narrow.op.name] == ["broadcast_to", "sum_to"]
        assert (len(wide.inputs), wide.op.label()) == (
            (1, "broadcast_to(shape=(4, 3))") if shape else (2, "broadcast_to")
        )
        assert "sum_to" in backward_ops(wide, cl.grad(cl.sum(wide), x))
        assert "broadcast_to" in backward_ops(narrow, cl.grad(cl.sum(narrow), x))
        feed = {x: np.arange(3.0).reshape(1, 3)} | ({} if shape else {like: np.zeros((4, 3))})
        np.testing.assert_allclose(cl.evaluate(narrow, feed), 4 * np.arange(3.0)[None] ** 2)
        for label, (analytic, numeric) in check_gradients(cl.sum(narrow * narrow), feed).items():
            np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9, err_msg=label)
        loss = cl.sum(narrow * narrow)  # = Σ 16 x⁴
        second = cl.grad(cl.sum(cl.grad(loss, x) * x), x)  # twice through both ops: 256 x³
        np.testing.assert_allclose(cl.evaluate(second, feed), 256 * np.arange(3.0)[None] ** 3)


def test_the_run_time_form_checks_nothing_it_cannot_know_and_costs_like_the_static_one():
    x = cl.variable("x", shape=(2, 3))
    static = cl.sum_to(x, cl.variable("like", shape=(3,)))
    dynamic = cl.sum_to(x, cl.variable("like2"))
    assert static.op.flops((3,), (2, 3)) == dynamic.op.flops((3,), (2, 3), (3,)) == 3
    assert dynamic.op.accesses((3,), (2, 3), (3,)) == ((6, 0), 3)  # like lends its shape only
    with pytest.raises(cl.ShapeError, match="sum_to"):
        cl.sum_to(cl.variable("v", shape=(3,)), cl.variable("w", shape=(2, 3)))


def test_sum_to_an_empty_or_zero_dim_target():
    x = cl.variable("x", shape=(0, 3), dtype=np.float64)
    out = cl.sum_to(x, cl.variable("row", shape=(3,)))
    np.testing.assert_array_equal(cl.evaluate(out, {x: np.zeros((0, 3))}), np.zeros(3))
    total = cl.sum_to(cl.variable("m", shape=None), cl.constant(np.float64(1.0)))
    assert cl.evaluate(total, {"m": np.full((2, 2), np.inf)}) == np.inf
