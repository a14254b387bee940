"""The attention softmax's row kernels on the CPU: NumPy's values (a few float32 roundings,
the same NaN and infinities), and the ops use them."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.kernels import cpu_kernels
from course_lib.ops.attention import CausalSoftmax, SoftmaxGrad
from course_lib.ops.reductions import stable_log_sum_exp
from course_lib.ops.rope import Rope

needs_kernels = pytest.mark.skipif(
    not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)), reason="no C++ compiler"
)
SHAPES = [(2, 3, 67, 69), (1, 1, 128, 128), (5, 40, 97)]  # ragged rows; T <= S


def _scores(shape, seed=0, specials=True) -> np.ndarray:
    s = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 4
    if specials:  # a NaN in a row, +inf in a visible and in a masked place, -inf
        s[..., 3, 1] = np.nan
        s[..., 5, 2] = np.inf
        s[..., 6, -1] = np.inf  # masked (a future key): still NaN, as NumPy adds the mask
        s[..., 7, :] = -np.inf
        s[..., 9, 0] = -np.inf
    return s


def _same_values(result, expected):
    """NumPy's bits: NaN where NumPy has NaN (x86 gives NaN payloads by operand order, which
    the compiler may swap), every other value bit for bit (signed zeros included)."""
    assert result.dtype == expected.dtype and result.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(result), nan)
    assert result[~nan].tobytes() == expected[~nan].tobytes()


def _close(result, expected, atol=1e-7):
    assert result.dtype == expected.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(result), np.isnan(expected))
    np.testing.assert_allclose(result, expected, rtol=2e-6, atol=atol)


@needs_kernels
@pytest.mark.parametrize("shape", SHAPES)
def test_the_causal_softmax_kernel_gives_numpys_values(shape):
    op, s = CausalSoftmax(0.3), _scores(shape)
    with np.errstate(invalid="ignore"):
        expected = op.on_arrays(np, s)
    _close(op.compute(np, s), expected)
    _close(op.compute(np, np.asfortranarray(s)), expected)  # another layout: copied first


@needs_kernels
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_the_softmax_adjoint_kernel_gives_numpys_values(shape, scale):
    op = SoftmaxGrad(scale)
    p = CausalSoftmax(1.0).on_arrays(np, _scores(shape, specials=False))
    g = _scores(shape, seed=1)
    with np.errstate(invalid="ignore"):
        expected = op.on_arrays(np, g, p)
    # g − Σ g·p cancels: float32 sums of |g·p| ≈ 4 per row differ by ~1e-6 in NumPy itself
    _close(op.compute(np, g, p), expected, atol=4e-6)


@needs_kernels
@pytest.mark.parametrize("shape", SHAPES)
def test_the_softmax_and_cross_entropy_kernels_give_numpys_values(shape, monkeypatch):
    """The plain softmax (the loss's gradient) and cross-entropy's rows over the last axis:
    NumPy's formula's values, NaN and infinities included (a NaN, +inf or an all −inf row;
    a target whose logit is ±inf)."""
    from course_lib.ops.nn import CrossEntropy, Softmax  # noqa: PLC0415

    x = _scores(shape)
    targets = np.random.default_rng(2).integers(0, shape[-1], shape[:-1])
    x[..., 11, targets[..., 11]] = np.inf
    x[..., 13, targets[..., 13]] = -np.inf
    finite = np.where(np.isfinite(x), x, np.float32(1.5))
    with np.errstate(all="ignore"):
        results = [Softmax(-1).compute(np, x), CrossEntropy().compute(np, finite, targets),
                   cpu_kernels.cross_entropy(x, targets)]  # fmt: skip
        monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
        expected = [Softmax(-1).compute(np, x), CrossEntropy().compute(np, finite, targets)]
        _, shifted, log_sum = stable_log_sum_exp(np, x, -1)
        expected.append(np.take_along_axis(shifted - log_sum, targets[..., None], -1)[..., 0])
    _close(results[0], expected[0])
    assert type(results[1]) is type(expected[1]) is np.float32
    np.testing.assert_allclose(results[1], expected[1], rtol=2e-6)
    rows, picked = results[2], expected[2]  # each row's log-probability
    np.testing.assert_array_equal(np.isnan(rows), np.isnan(picked))
    np.testing.assert_array_equal(rows[np.isinf(picked)], picked[np.isinf(picked)])
    finite_rows = np.isfinite(picked)
    np.testing.assert_allclose(rows[finite_rows], picked[finite_rows], rtol=2e-6, atol=2e-6)
    assert np.isnan(picked).any() and np.isinf(picked).any()


def test_small_float64_and_device_inputs_take_the_array_modules_way():
    small = np.zeros((4, 8, 8), np.float32)
    assert not cpu_kernels.worth_it(small)
    assert not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE))  # float64
    assert not cpu_kernels.worth_it(small, np.zeros((4, 8, 9), np.float32))  # two shapes


@needs_kernels
def test_attention_gradients_through_the_kernels_match_float64():
    """The gradient of a causal softmax of float32 scores large enough for the kernels,
    against the same graph in float64 (the array module's way)."""
    shape = (2, 2, 64, 64)
    s = cl.variable("s", shape, np.float32)
    w = np.random.default_rng(3).standard_normal(shape)
    loss = cl.sum(cl.causal_softmax(s, 0.25) * w.astype(np.float32))
    (grad,) = cl.grad(loss, [s])
    scores = _scores(shape, specials=False)
    got = cl.evaluate(grad, {s: scores})
    s64 = cl.variable("s", shape, np.float64)
    (grad64,) = cl.grad(cl.sum(cl.causal_softmax(s64, 0.25) * w), [s64])
    np.testing.assert_allclose(got, cl.evaluate(grad64, {s64: scores.astype(np.float64)}),
                               rtol=1e-4, atol=1e-6)  # fmt: skip


@needs_kernels
def test_a_training_step_runs_its_attention_softmax_through_the_kernels(monkeypatch):
    calls = []
    for name in ("causal_softmax", "softmax_grad"):
        kernel = getattr(cpu_kernels, name)
        monkeypatch.setattr(cpu_kernels, name,
                            lambda *a, _k=kernel, _n=name: calls.append(_n) or _k(*a))  # fmt: skip
    shape = (2, 2, 64, 64)
    s = cl.variable("s", shape, np.float32)
    (grad,) = cl.grad(cl.sum(cl.causal_softmax(s, 0.25) * 2.0), [s])
    cl.evaluate(grad, {s: _scores(shape, specials=False)})
    assert sorted(set(calls)) == ["causal_softmax", "softmax_grad"]


ROPE_CASES = [  # (shape, seq_axis, start, inverse)
    ((2, 64, 4, 32), -3, 0, False),  # LLaMA's (B, T, H, d)
    ((2, 64, 4, 32), 1, 5, True),  # positions from 5, rotating back (the adjoint)
    ((3, 4, 70, 16), -2, 0, False),  # (B, H, T, d)
    ((130, 2, 64), 0, 3, False),  # positions on the first axis
    ((257, 64), 0, 0, True),  # one row per position
]


@needs_kernels
@pytest.mark.parametrize(("shape", "seq_axis", "start", "inverse"), ROPE_CASES)
def test_the_rope_kernel_gives_numpys_bits(monkeypatch, shape, seq_axis, start, inverse):
    x = _scores(shape, specials=False)
    x.flat[::97] = np.nan
    x.flat[5::101] = np.inf
    x.flat[7::103] = -np.inf
    op = Rope(10000.0, seq_axis, inverse, start)
    with np.errstate(invalid="ignore"):
        kernel = op.compute(np, x)
        strided = op.compute(np, np.asfortranarray(x))  # another layout: copied first
        monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
        expected = op.compute(np, x)  # the array module's four passes
    _same_values(kernel, expected)
    _same_values(strided, expected)


@needs_kernels
def test_rope_runs_through_its_kernel_on_float32_only(monkeypatch):
    calls = []
    kernel = cpu_kernels.rope
    monkeypatch.setattr(cpu_kernels, "rope", lambda *a: calls.append(1) or kernel(*a))
    op = Rope(10000.0, -3)
    op.compute(np, np.ones((2, 64, 4, 32), np.float32))
    assert calls == [1]
    op.compute(np, np.ones((2, 64, 4, 32), np.float64))  # float64: the array module's way
    op.compute(np, np.ones((1, 4, 2, 8), np.float32))  # too small to be worth a call
    assert calls == [1]


def _adam_arrays(shape=(300, 70), seed=4):
    rng = np.random.default_rng(seed)
    theta, m, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal(shape)).astype(np.float32) * 1e-3
    v.flat[::53] = 0.0  # sqrt(0) + eps
    g.flat[::97] = np.nan
    m.flat[::89] = np.inf
    return theta, m, v, g


@needs_kernels
@pytest.mark.parametrize(("beta", "power"), [(0.9, 1), (0.95, 2), (0.0, 2)])
def test_the_adam_moment_kernel_gives_numpys_bits(monkeypatch, beta, power):
    from course_lib.models.optim import AdamMoment  # noqa: PLC0415

    _, m, _, g = _adam_arrays()
    op = AdamMoment(beta, power)
    kernel = op.compute(np, m, g)
    monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
    with np.errstate(invalid="ignore"):
        _same_values(kernel, op.compute(np, m, g))


@needs_kernels
@pytest.mark.parametrize(("weight_decay", "step", "lr"), [(0.1, 1, 1e-3), (0.0, 1000, 3e-4),
                                                          (0.01, 7, 0.5)])  # fmt: skip
def test_the_adamw_update_kernel_gives_numpys_bits(monkeypatch, weight_decay, step, lr):
    from course_lib.models.optim import AdamWUpdate  # noqa: PLC0415

    theta, m, v, _ = _adam_arrays()
    op = AdamWUpdate(0.9, 0.95, 1e-8, weight_decay)
    lr, step = np.asarray(lr), np.asarray(step)
    calls = []
    kernel_function = cpu_kernels.adamw_update
    monkeypatch.setattr(cpu_kernels, "adamw_update",
                        lambda *a, **k: calls.append(1) or kernel_function(*a, **k))  # fmt: skip
    kernel = op.compute(np, theta, m, v, lr, step)
    assert calls == [1]
    monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
    with np.errstate(invalid="ignore"):
        _same_values(kernel, op.compute(np, theta, m, v, lr, step))


@needs_kernels
@pytest.mark.parametrize("name", ["sigmoid", "silu"])
def test_sigmoid_and_silu_kernels_are_within_float32_rounding_of_float64(monkeypatch, name):
    op = {"sigmoid": cl.ops.elementwise.Sigmoid(), "silu": cl.ops.elementwise.Silu()}[name]
    x = np.random.default_rng(5).standard_normal((64, 700)).astype(np.float32) * 6
    x.flat[:9] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, -88.0, 120.0, -120.0]
    calls = []
    kernel = getattr(cpu_kernels, name)
    monkeypatch.setattr(cpu_kernels, name, lambda a: calls.append(1) or kernel(a))
    got = op.compute(np, x)
    assert calls == [1] and got.dtype == np.float32
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sig = 1.0 / (1.0 + np.exp(-x64))
        exact = sig if name == "sigmoid" else x64 * sig
    exact[np.isneginf(x64)] = 0.0 if name == "sigmoid" else np.nan  # −inf·0: NaN, as NumPy
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    np.testing.assert_allclose(got, exact, rtol=4e-7, atol=1e-37)
    monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
    with np.errstate(invalid="ignore"):
        tanh_form = op.compute(np, x)  # the array module's way: the same specials
    finite = np.isfinite(tanh_form)
    np.testing.assert_array_equal(got[~finite], tanh_form[~finite])
    np.testing.assert_allclose(got, tanh_form, rtol=2e-6, atol=2e-6)


@needs_kernels
def test_the_kernels_exponentials_are_libmvecs_on_x86_64_glibc():
    import platform  # noqa: PLC0415

    if platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc":
        pytest.skip("libmvec's SIMD expf is linked on x86-64 glibc")
    assert cpu_kernels.vector_exp(), "the kernels fell back to the scalar expf"


@needs_kernels
@pytest.mark.parametrize("shape", [(4, 64, 256), (300, 70), (2, 3, 40, 129)])
def test_rms_norm_kernels_are_within_float32_rounding_of_the_array_code(monkeypatch, shape):
    from course_lib.ops.norms import RMSNorm, RMSNormGradX  # noqa: PLC0415

    rng = np.random.default_rng(6)
    x, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    w = rng.standard_normal(shape[-1]).astype(np.float32)
    x[0, 0] = 0.0  # ε alone under the root
    x.flat[7] = np.nan  # its row is NaN
    x.flat[-3] = np.inf  # its row: inf/inf, NaN
    calls = []
    for name in ("rms_norm", "rms_norm_grad_x"):
        kernel = getattr(cpu_kernels, name)
        monkeypatch.setattr(cpu_kernels, name,
                            lambda *a, _k=kernel: calls.append(1) or _k(*a))  # fmt: skip
    forward, backward = RMSNorm(1e-5), RMSNormGradX(1e-5)
    with np.errstate(invalid="ignore"):
        got = forward.compute(np, x, w), backward.compute(np, g, x, w)
        got_strided = backward.compute(np, np.asfortranarray(g), x[..., ::-1][..., ::-1], w)
        assert calls == [1, 1, 1]
        monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
        expected = forward.compute(np, x, w), backward.compute(np, g, x, w)
    for result, reference in [*zip(got, expected), (got_strided, expected[1])]:
        _close(result, reference, atol=2e-6)


@needs_kernels
@pytest.mark.parametrize("shape", [(4, 64, 256), (300, 70), (2, 3, 40, 129), (6000, 3)])
def test_the_rms_norm_weight_adjoint_kernel_is_within_the_einsums_rounding(monkeypatch, shape):
    """Σ over rows of g·x̂ in double, against the float64 sum: at least as close as NumPy's
    float32 einsum; a NaN or inf in x spreads as NumPy spreads it."""
    from course_lib.ops.norms import RMSNormGradW  # noqa: PLC0415

    rng = np.random.default_rng(7)
    x, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    w = np.ones(shape[-1], np.float32)
    op, calls = RMSNormGradW(1e-5), []
    kernel = cpu_kernels.rms_norm_grad_w
    monkeypatch.setattr(cpu_kernels, "rms_norm_grad_w", lambda *a: calls.append(1) or kernel(*a))
    got = op.compute(np, g, x, w)
    x64 = x.reshape(-1, shape[-1]).astype(np.float64)
    xhat = x64 / np.sqrt((x64**2).mean(-1, keepdims=True) + 1e-5)
    terms = g.reshape(xhat.shape).astype(np.float64) * xhat
    exact, scale = terms.sum(0), np.abs(terms).sum(0)
    monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
    einsum = op.compute(np, g, x, w)
    assert calls == [1] and got.dtype == np.float32 and got.shape == w.shape
    assert np.all(np.abs(got - exact) <= np.maximum(np.abs(einsum - exact), 0) + 1e-6 * scale)
    x.flat[7], x.flat[-3] = np.nan, np.inf  # two rows of NaN: every column's sum is NaN
    with np.errstate(invalid="ignore"):
        assert np.isnan(op.compute(np, g, x, w)).all()


def test_rms_norm_takes_the_array_code_for_a_weight_of_another_dtype_or_shape(monkeypatch):
    from course_lib.ops.norms import RMSNorm  # noqa: PLC0415

    calls = []
    monkeypatch.setattr(cpu_kernels, "rms_norm", lambda *a: calls.append(1))
    x = np.ones((64, 300), np.float32)
    RMSNorm(1e-5).compute(np, x, np.ones(300))  # a float64 weight
    RMSNorm(1e-5).compute(np, x.astype(np.float64), np.ones(300))  # float64 rows
    assert calls == []


@needs_kernels
def test_silus_adjoint_is_one_op_with_a_kernel_within_float32_rounding(monkeypatch):
    from course_lib.ops.elementwise import SiluGrad  # noqa: PLC0415

    x = cl.variable("x", (64, 700), np.float32)
    (grad,) = cl.grad(cl.sum(cl.silu(x) * 3.0), [x])
    names = [n.op.name for n in cl.graph.topological_order([grad]) if n.inputs]
    assert "silu_grad" in names and "sigmoid" not in names
    rng = np.random.default_rng(7)
    xs, gs = (rng.standard_normal((64, 700)).astype(np.float32) * 6 for _ in range(2))
    xs.flat[:6] = [np.nan, np.inf, -np.inf, 0.0, 90.0, -90.0]
    calls = []
    kernel = cpu_kernels.silu_grad
    monkeypatch.setattr(cpu_kernels, "silu_grad", lambda *a: calls.append(1) or kernel(*a))
    with np.errstate(invalid="ignore", over="ignore"):
        got = SiluGrad().compute(np, gs, xs)
        assert calls == [1]
        x64 = xs.astype(np.float64)
        s = 1.0 / (1.0 + np.exp(-x64))
        exact = gs * (s * (1.0 + x64 * (1.0 - s)))
        monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
        tanh_form = SiluGrad().compute(np, gs, xs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    np.testing.assert_allclose(got, exact, rtol=2e-6, atol=1e-6)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(tanh_form))
    # the tanh form (the array code) loses ~1e-5 to cancellation where s is near 0 or 1
    np.testing.assert_allclose(got, tanh_form, rtol=1e-5, atol=2e-5)


@needs_kernels
def test_an_odd_head_size_unknown_when_built_fails_as_numpys_code_does():
    x = cl.variable("x", (None, None, None, None), np.float32)
    with pytest.raises(cl.errors.CourseLibError, match="rope"):
        cl.evaluate(cl.rope(x, seq_axis=1), {x: np.ones((2, 64, 4, 33), np.float32)})


def test_kernels_that_cannot_build_leave_every_op_on_numpys_code(monkeypatch):
    from course_lib.kernels.errors import UnsafeCacheError  # noqa: PLC0415

    def refused():
        raise UnsafeCacheError("refusing the kernel cache /tmp/x: writable by others")

    monkeypatch.setattr(cpu_kernels, "_library", refused)
    cpu_kernels._built.cache_clear()
    try:
        with pytest.warns(cpu_kernels.CpuKernelsUnavailable, match="off .*refusing the kernel"):
            assert not cpu_kernels.worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32))
        x = np.linspace(-3, 3, cpu_kernels.MIN_SIZE, dtype=np.float32)
        np.testing.assert_allclose(cl.ops.elementwise.Sigmoid().compute(np, x),
                                   1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5)  # fmt: skip
        assert not cpu_kernels.vector_exp()
    finally:
        cpu_kernels._built.cache_clear()


@needs_kernels
def test_adamw_with_a_numpy_eps_gives_numpys_bits(monkeypatch):
    from course_lib.models.optim import AdamWUpdate  # noqa: PLC0415

    theta, m, v, _ = _adam_arrays()
    v = np.abs(v) * np.float32(1e-12)  # ε matters
    op = AdamWUpdate(0.9, 0.95, np.float64(1e-8), 0.0)
    lr, step = np.asarray(1e-3), np.asarray(3)
    with np.errstate(invalid="ignore"):
        kernel = op.compute(np, theta, m, v, lr, step)
        monkeypatch.setattr(cpu_kernels, "worth_it", lambda *a: False)
        _same_values(kernel, op.compute(np, theta, m, v, lr, step))
