"""The kernels on a real GPU through CuPy (skipped without one)."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.backend import gpu_available
from course_lib.kernels import FusedElementwise, dispatch, launch, reference
from course_lib.ops.attention import CausalSoftmax, SoftmaxGrad
from course_lib.ops.norms import RMSNormGradX

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs CuPy and an NVIDIA GPU"),
]
GPU = {"mode": "gpu"}


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _host(array):
    return array.get()


@pytest.mark.parametrize("n", [1, 17, 33, 257, 1 << 20])
def test_vector_add_on_gpu(n, rng):
    a, b = _f32(rng, n), _f32(rng, n)
    for kernel in (launch.vector_add, launch.vector_add_float4):
        assert np.array_equal(_host(kernel(a, b, **GPU)), a + b)


@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 257), (257, 257, 257), (1000, 300, 700)])
def test_matmul_on_gpu(shape, rng):
    m, n, k = shape
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    for kernel in (launch.matmul_naive, launch.matmul_tiled):
        np.testing.assert_allclose(
            _host(kernel(a, b, **GPU)), reference.matmul(a, b), rtol=1e-4, atol=1e-4 * np.sqrt(k)
        )


@pytest.mark.parametrize("rows, cols", [(1, 1), (17, 33), (5, 1024), (257, 4099), (3, 40_000)])
def test_row_kernels_on_gpu(rows, cols, rng):
    x, w = _f32(rng, rows, cols) * 20, _f32(rng, cols)
    np.testing.assert_allclose(
        _host(launch.softmax(x, **GPU)), reference.softmax(x), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        _host(launch.rms_norm(x, w, **GPU)), reference.rms_norm(x, w), rtol=1e-5, atol=1e-5
    )


def test_rope_and_attention_on_gpu(rng):
    x = _f32(rng, 2, 4, 33, 64)
    cos, sin = reference.rope_tables(33, 64)
    np.testing.assert_allclose(
        _host(launch.rope(x, cos, sin, **GPU)), reference.rope(x, cos, sin), rtol=1e-5, atol=1e-5
    )
    for kv_heads, head_dim in ((8, 64), (4, 64), (2, 64), (2, 128), (4, 33)):  # GQA 1, 2, 4
        q = _f32(rng, 2, 8, 257, head_dim)
        k, v = (_f32(rng, 2, kv_heads, 257, head_dim) for _ in range(2))
        for causal in (True, False):
            np.testing.assert_allclose(
                _host(launch.attention(q, k, v, causal, **GPU)),
                reference.attention(q, k, v, causal),
                rtol=1e-4,
                atol=1e-5,
            )


@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 257), (1000, 300, 700), (256, 512, 128)])
def test_register_tiled_matmul_on_gpu(shape, rng):
    m, n, k = shape
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    np.testing.assert_allclose(
        _host(launch.matmul_register_tiled(a, b, **GPU)), reference.matmul(a, b),
        rtol=1e-4, atol=1e-4 * np.sqrt(k),
    )  # fmt: skip


def test_copy_transpose_and_reductions_on_gpu(rng):
    x = _f32(rng, 100_003)
    for stride in (1, 32):
        assert np.array_equal(_host(launch.copy_strided(x, stride, **GPU)), x[::stride])
    m = _f32(rng, 257, 1000)
    for variant in launch.TRANSPOSES:
        assert np.array_equal(_host(launch.transpose(m, variant=variant, **GPU)), m.T)
    for variant in launch.REDUCTIONS:  # the shuffles run on real warps here
        total = _host(launch.reduce_sum(x, variant=variant, **GPU))
        np.testing.assert_allclose(total, reference.reduce_sum(x), rtol=1e-5, atol=1e-3)


def test_fused_on_gpu(rng):
    spec = FusedElementwise("fused_gpu", ("a", "b"), (("c", "a * b + 1.0f"),))
    a, b = _f32(rng, 1000), _f32(rng, 1000)
    (c,) = launch.fused(spec, a, b, **GPU)
    # NVRTC contracts a * b + 1 into one fused multiply-add (one rounding instead of NumPy's
    # two): up to ~1 float32 ulp of a * b apart, which near a * b = -1 is a large relative
    # error of the small result (5.5e-6 seen on an H100), so the bound is absolute in a * b.
    np.testing.assert_allclose(_host(c), a * b + 1, rtol=1e-6, atol=2e-7 * np.abs(a * b).max())


def test_gpu_and_emulator_agree(rng):
    x = _f32(rng, 33, 257)
    np.testing.assert_allclose(
        _host(launch.softmax(x, **GPU)), launch.softmax(x, mode="emulator"), rtol=1e-6, atol=1e-8
    )


def test_softmax_op_uses_the_kernel_on_gpu(rng, monkeypatch):
    import cupy

    calls = []
    original = dispatch.kernel_result

    def spy(*args, **kwargs):
        calls.append(args[0].name)
        return original(*args, **kwargs)

    monkeypatch.setattr(dispatch, "kernel_result", spy)
    data = _f32(rng, 4, 33)
    cl.set_device("gpu")
    try:
        x = cl.variable("x", shape=(4, 33))
        out = cl.evaluate(cl.softmax(x), {"x": cupy.asarray(data)})
    finally:
        cl.set_device("cpu")
    assert calls == ["softmax"]
    np.testing.assert_allclose(cl.backend.to_numpy(out), reference.softmax(data), rtol=1e-5)


@pytest.mark.parametrize("queries, keys", [(7, 9), (128, 128), (64, 1024), (2, 20_000)])
def test_causal_softmax_and_its_adjoint_on_gpu(queries, keys, rng):
    s, g = _f32(rng, 2, 3, queries, keys) * 10, _f32(rng, 2, 3, queries, keys)
    y = _host(launch.causal_softmax(s, 0.125, **GPU))
    np.testing.assert_allclose(y, CausalSoftmax(0.125).on_arrays(np, s), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        _host(launch.softmax_grad(g, y, 0.125, **GPU)), SoftmaxGrad(0.125).on_arrays(np, g, y),
        rtol=1e-4, atol=1e-6,
    )  # fmt: skip


def test_rms_norm_adjoints_on_gpu(rng):
    for rows, cols in ((3, 7), (64, 1024), (2, 40_000), (4096, 1024)):
        g, x, w = _f32(rng, rows, cols), _f32(rng, rows, cols) * 3, _f32(rng, cols)
        np.testing.assert_allclose(
            _host(launch.rms_norm_grad_x(g, x, w, 1e-5, **GPU)),
            RMSNormGradX(1e-5).compute(np, g, x, w), rtol=1e-4, atol=1e-5,
        )  # fmt: skip
        np.testing.assert_allclose(
            _host(launch.rms_norm_grad_w(g, x, 1e-5, **GPU)), reference.rms_norm_grad_w(g, x, 1e-5),
            rtol=1e-4, atol=1e-4 * np.sqrt(rows),
        )  # fmt: skip


def test_rope_with_positions_before_the_heads_on_gpu(rng):
    x = _f32(rng, 2, 33, 4, 64)  # (batch, positions, heads, head_dim): the projections' layout
    cos, sin = reference.rope_tables(33, 64)
    expected = reference.rope(x.swapaxes(1, 2), cos, sin).swapaxes(1, 2)
    np.testing.assert_allclose(_host(launch.rope(x, cos, sin, axis=1, **GPU)), expected,
                               rtol=1e-5, atol=1e-5)  # fmt: skip
