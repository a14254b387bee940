"""Every op's derivatives against PyTorch (torch.autograd.grad, torch.func.jvp).

Runs when the ``oracle`` extra is installed (``make test`` installs it)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from op_specs import SPECS, sample
from strategies import input_shapes

import course_lib as cl

torch = pytest.importorskip("torch", reason="the oracle extra (PyTorch) is not installed")
pytestmark = pytest.mark.oracle


def _ours(spec, arrays, seed, tangents):
    xs = [cl.variable(f"x{i}", a.shape, np.float64) for i, a in enumerate(arrays)]
    out = spec.build(*xs)
    feed = dict(zip(xs, arrays))
    value = cl.evaluate(out, feed)
    grads = cl.grad(cl.sum(out * cl.constant(seed)), xs)
    tangent = cl.jvp(out, dict(zip(xs, tangents)))
    run = cl.Executor([*grads, tangent])
    results = run.run({v: x for v, x in feed.items() if v in run.variables})
    return value, results[:-1], results[-1]


def _theirs(spec, arrays, seed, tangents):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = spec.torch(*ts)
    grads = torch.autograd.grad(out, ts, grad_outputs=torch.tensor(seed), allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(ts, grads)]
    _, tangent = torch.func.jvp(
        spec.torch, tuple(torch.tensor(a) for a in arrays), tuple(torch.tensor(t) for t in tangents)
    )
    return out.detach().numpy(), [g.numpy() for g in grads], tangent.numpy()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@given(data=st.data())
def test_op_matches_pytorch(spec, data):
    shapes = data.draw(input_shapes(spec))
    rng = np.random.default_rng(7)
    arrays = sample(spec, rng, shapes)
    ours_value = cl.evaluate(spec.build(*[cl.constant(a) for a in arrays]))
    seed = rng.standard_normal(np.shape(ours_value))
    tangents = [rng.standard_normal(a.shape) for a in arrays]
    value, grads, tangent = _ours(spec, arrays, seed, tangents)
    t_value, t_grads, t_tangent = _theirs(spec, arrays, seed, tangents)
    np.testing.assert_allclose(value, t_value, rtol=1e-10, atol=1e-12)
    for ours, theirs in zip(grads, t_grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tangent, t_tangent, rtol=1e-9, atol=1e-12)


def test_cross_entropy_matches_pytorch():
    rng = np.random.default_rng(0)
    logits, targets = rng.standard_normal((6, 5)), rng.integers(0, 5, 6)
    z = cl.variable("z", (6, 5), np.float64)
    loss = cl.cross_entropy(z, cl.constant(targets))
    value, g = cl.evaluate([loss, cl.grad(loss, z)], {z: logits})
    tz = torch.tensor(logits, requires_grad=True)
    t_loss = torch.nn.functional.cross_entropy(tz, torch.tensor(targets))
    (t_g,) = torch.autograd.grad(t_loss, tz)
    np.testing.assert_allclose(value, t_loss.item(), rtol=1e-12)
    np.testing.assert_allclose(g, t_g.numpy(), rtol=1e-10)


_NORM_W = np.array([0.5, 1.5, -1.0])
COMPOSITIONS = {
    "tanh_sin": (lambda x: cl.sum(cl.tanh(x) * cl.sin(x)), lambda x: (x.tanh() * x.sin()).sum()),
    "softmax_log": (
        lambda x: cl.sum(cl.log_softmax(x @ x.T, -1) * cl.sigmoid(x)[:, :1]),
        lambda x: ((x @ x.T).log_softmax(-1) * x.sigmoid()[:, :1]).sum(),
    ),
    "rms_norm_fused": (
        lambda x: cl.sum(cl.rms_norm(x, cl.constant(_NORM_W), 0.1) * cl.sin(x)),
        lambda x: (
            torch.tensor(_NORM_W) * x * (x * x).mean(-1, keepdim=True).add(0.1).rsqrt() * x.sin()
        ).sum(),
    ),
    "silu_norm": (
        lambda x: cl.sum(cl.silu(x) * cl.rsqrt(cl.mean(x * x, -1, True) + 1e-5)),
        lambda x: (
            torch.nn.functional.silu(x) * (x * x).mean(-1, keepdim=True).add(1e-5).rsqrt()
        ).sum(),
    ),
}


@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_second_derivatives_match_pytorch(name):
    ours, theirs = COMPOSITIONS[name]
    rng = np.random.default_rng(1)
    a, v = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    x = cl.variable("x", (3, 3), np.float64)
    g = cl.grad(ours(x), x)
    hvp = cl.grad(cl.sum(g * cl.constant(v)), x)  # Hessian-vector product, reverse over reverse
    fwd_hvp = cl.jvp(g, {x: v})  # forward over reverse
    h1, h2 = cl.evaluate([hvp, fwd_hvp], {x: a})
    tx = torch.tensor(a, requires_grad=True)
    (tg,) = torch.autograd.grad(theirs(tx), tx, create_graph=True)
    (t_hvp,) = torch.autograd.grad(tg, tx, grad_outputs=torch.tensor(v))
    np.testing.assert_allclose(h1, t_hvp.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(h2, t_hvp.numpy(), rtol=1e-9, atol=1e-12)
