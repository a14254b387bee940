"""Derivatives at the edges of their domains (0, ±0, ±inf, NaN, tiny and huge numbers) agree
with PyTorch's, so no rule computes 0 · inf = NaN where the derivative is a number."""

import numpy as np
import pytest
from op_specs import UNARY_SPECS

import course_lib as cl
from conftest import oracle_import

POINTS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300, 1e300, -2.5, 3.0]
OPS = {
    "pow0": (lambda x: x**0, lambda x: x**0),
    "pow1": (lambda x: x**1, lambda x: x**1),
    "pow2": (lambda x: x**2, lambda x: x**2),
    "pow3": (lambda x: x**3, lambda x: x**3),
    "pow1.5": (lambda x: x**1.5, lambda x: x**1.5),
    "pow_half": (lambda x: x**0.5, lambda x: x**0.5),
    "pow_minus1": (lambda x: x**-1, lambda x: x**-1),
    **{spec.name: (spec.build, spec.torch) for spec in UNARY_SPECS},  # every unary op
    "reciprocal": (lambda x: 1.0 / x, lambda x: 1.0 / x),
    "square": (lambda x: x * x, lambda x: x * x),
    "softmax": (lambda x: cl.softmax(x, -1), lambda x: x.softmax(-1)),
    "logsumexp": (lambda x: cl.logsumexp(x, -1), lambda x: x.logsumexp(-1)),
    "log_softmax": (lambda x: cl.log_softmax(x, -1), lambda x: x.log_softmax(-1)),
}
# where the engines differ (docs/architecture.md, "Derivatives at edge points"): relu at NaN
# is 0 here (its rule is the lecture's one node, x > 0), PyTorch passes the gradient
CONVENTIONS = {("relu", "nan")}


@pytest.mark.parametrize("name", OPS)
def test_derivatives_at_the_edges_agree_with_pytorch(name):
    torch = oracle_import("torch")
    ours, theirs = OPS[name]
    for point in POINTS:
        if (name, str(point)) in CONVENTIONS:
            continue
        value = np.array([point])
        one = cl.variable("x1", (1,), np.float64)
        out = cl.sum(ours(one))
        with np.errstate(all="ignore"):
            (dx,) = cl.Executor(cl.grad(out, [one])).run({one: value}, allow_unused=True)
            tangent_run = cl.Executor(cl.jvp(out, {one: np.ones(1)}))
            tangent = tangent_run.run({one: value}, allow_unused=True)
        t = torch.tensor(value, requires_grad=True)
        (expected,) = torch.autograd.grad(theirs(t).sum(), t)
        expected = expected.numpy()
        np.testing.assert_allclose(dx, expected, rtol=1e-12, err_msg=f"d{name}/dx at {point}")
        np.testing.assert_allclose(np.reshape(tangent, 1), expected, rtol=1e-12,
                                   err_msg=f"tangent of {name} at {point}")  # fmt: skip


def test_pow_zero_exponent_gradient_at_zero_is_zero():
    x = cl.variable("x", (3,), np.float64)
    (dx,) = cl.grad(cl.sum(x**0), [x])
    np.testing.assert_array_equal(cl.evaluate(dx, {x: np.array([0.0, 1.0, -2.0])}), 0.0)
    t = cl.Tensor([0.0, 2.0], requires_grad=True)
    cl.sum(t**0).backward()
    np.testing.assert_array_equal(t.grad.numpy(), 0.0)


def test_jvp_refuses_a_tangent_for_a_constant():
    x, two = cl.variable("x", (), np.float64), cl.constant(2.0)
    with pytest.raises(cl.GraphError, match="jvp: 2 is a constant.*use a variable"):
        cl.jvp(x * two + 2.0, {two: 1.0})


def test_dual_number_pow_zero_exponent_at_zero_has_slope_zero():
    for p in (0, 0.0):
        assert cl.Dual(0.0, 1.0) ** p == cl.Dual(1.0, 0.0)
    assert cl.Dual(0.0, 1.0) ** 1 == cl.Dual(0.0, 1.0)


@pytest.mark.parametrize("exponent", [0, 1, 2, -1, 0.5])
def test_eager_pow_gradient_at_zero_agrees_with_pytorch(exponent):
    torch = oracle_import("torch")
    t = cl.Tensor([0.0, 2.0, -3.0], requires_grad=True)
    with np.errstate(all="ignore"):
        cl.sum(t**exponent).backward()
    expected = torch.tensor([0.0, 2.0, -3.0], dtype=torch.float64, requires_grad=True)
    (expected**exponent).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), expected.grad.numpy())


# -- the table of docs/architecture.md: op x {NaN, tie, 0, ±0, ±inf}, both inputs --------
EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0]
BINARY = {
    "maximum": (cl.maximum, lambda t, x, y: t.maximum(x, y)),
    "add": (cl.add, lambda t, x, y: x + y),
    "sub": (cl.sub, lambda t, x, y: x - y),
    "mul": (cl.mul, lambda t, x, y: x * y),
    "div": (cl.div, lambda t, x, y: x / y),
    "where": (lambda x, y: cl.where(x > y, x, y), lambda t, x, y: t.where(x > y, x, y)),
}
ROWS = [[3.0, np.nan, 1.0], [3.0, 3.0, 1.0], [np.nan, np.nan, 2.0], [np.inf, 1.0, np.inf],
        [-np.inf, -np.inf, -np.inf], [0.0, -0.0, -1.0], [np.inf, np.nan, -np.inf]]  # fmt: skip
REDUCTIONS = {
    "max": (cl.max, lambda x: x.max()),  # torch's full max: ties split, NaN positions win
    "sum": (cl.sum, lambda x: x.sum()),
    "mean": (cl.mean, lambda x: x.mean()),
}
# PyTorch is not consistent with itself here: amax(dim) gives NaN to the whole row when it
# holds a NaN, max(dim) sends a tie's gradient to one index; course_lib follows torch.max()


def _ours(build, values):
    xs = [cl.variable(f"x{k}", np.shape(v), np.float64) for k, v in enumerate(values)]
    feed = {x: np.asarray(v, dtype=np.float64) for x, v in zip(xs, values)}
    with np.errstate(all="ignore"):
        grads = cl.Executor(cl.grad(cl.sum(build(*xs)), xs)).run(feed)
    return [cl.to_numpy(g) for g in grads]


def _theirs(torch, build, values):
    ts = [torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True) for v in values]
    grads = torch.autograd.grad(build(*ts).sum(), ts, allow_unused=True)
    return [np.zeros(np.shape(v)) if g is None else g.numpy() for g, v in zip(grads, values)]


@pytest.mark.parametrize("name", BINARY)
def test_binary_derivatives_at_every_pair_of_edge_points_agree_with_pytorch(name):
    torch = oracle_import("torch")
    ours, theirs = BINARY[name]
    x = np.repeat(EDGES, len(EDGES))
    y = np.tile(EDGES, len(EDGES))  # every pair: ties, NaN, ±0, ±inf
    got = _ours(ours, [x, y])
    want = _theirs(torch, lambda a, b: theirs(torch, a, b), [x, y])
    for k in range(2):
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}: input {k}, x={x}, y={y}")


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_derivatives_at_edge_rows_agree_with_pytorch(name):
    torch = oracle_import("torch")
    ours, theirs = REDUCTIONS[name]
    for row in ROWS:
        (got,) = _ours(ours, [np.array(row)])
        (want,) = _theirs(torch, theirs, [np.array(row)])
        np.testing.assert_array_equal(got, want, err_msg=f"d{name} at {row}")


def test_maximum_tangent_is_the_transpose_of_its_gradient():
    x, y = cl.variable("x", (3,), np.float64), cl.variable("y", (3,), np.float64)
    feed = {x: np.array([1.0, 2.0, np.nan]), y: np.array([2.0, 2.0, 0.0])}
    tangent = cl.Executor(cl.jvp(cl.maximum(x, y), {x: np.ones(3), y: np.ones(3)})).run(feed)
    gx, gy = cl.Executor(cl.grad(cl.sum(cl.maximum(x, y)), [x, y])).run(feed)
    np.testing.assert_array_equal(cl.to_numpy(tangent), cl.to_numpy(gx) + cl.to_numpy(gy))


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_, np.uint8])
def test_grad_refuses_non_float_variables(dtype):
    v = cl.variable("v", (3,), dtype)
    with pytest.raises(cl.GraphError, match="only floating-point values have gradients"):
        cl.grad(cl.sum(cl.cast(v, np.float64)), [v])
