"""Every kernel runs in the CPU emulator on ragged sizes and matches the NumPy reference."""

import itertools
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.kernels import emulator, launch, reference
from course_lib.kernels.errors import KernelLaunchError
from course_lib.ops.attention import CausalSoftmax, SoftmaxGrad
from course_lib.ops.norms import RMSNormGradW, RMSNormGradX

pytestmark = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)
SIZES = (1, 17, 33, 257)  # ragged: not multiples of any block or tile size
EMU = {"mode": "emulator"}


def _f32(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _cyclic(values, n):
    """n-tuples in which every value appears once in every position."""
    return [tuple(values[(i + j) % len(values)] for j in range(n)) for i in range(len(values))]


@pytest.mark.parametrize("n", [*SIZES, 1000, 4099])
@pytest.mark.parametrize("kernel", [launch.vector_add, launch.vector_add_float4])
def test_vector_add(kernel, n, rng):
    a, b = _f32(rng, n), _f32(rng, n)
    assert np.array_equal(kernel(a, b, **EMU), reference.vector_add(a, b))


def test_float4_copies_misaligned_views(rng):
    a = _f32(rng, 101)
    c = launch.vector_add_float4(a[1:], a[:-1], **EMU)  # a[1:] starts 4 bytes off alignment
    assert np.array_equal(c, a[1:] + a[:-1])


@pytest.mark.parametrize("shape", [*_cyclic(SIZES, 3), (257, 257, 257)])
@pytest.mark.parametrize("kernel", [launch.matmul_naive, launch.matmul_tiled])
def test_matmul(kernel, shape, rng):
    m, n, k = shape
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    np.testing.assert_allclose(
        kernel(a, b, **EMU), reference.matmul(a, b), rtol=1e-4, atol=1e-5 * np.sqrt(k)
    )


@pytest.mark.parametrize(
    "shape", [*_cyclic(SIZES, 3), (128, 256, 72), (129, 130, 9), (64, 20, 12), (3, 5, 130)]
)
def test_register_tiled_matmul(shape, rng):
    """Whole tiles use float4 loads and stores; ragged edges and rows whose length is not a
    multiple of 4 (not on 16 bytes) take the guarded scalar path."""
    m, n, k = shape
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    np.testing.assert_allclose(
        launch.matmul_register_tiled(a, b, **EMU), reference.matmul_register_tiled(a, b),
        rtol=1e-4, atol=1e-5 * np.sqrt(k),
    )  # fmt: skip


def test_register_tiled_matmul_copies_unaligned_views(rng):
    a = _f32(rng, 8 * 8 + 1)
    view = a[1:].reshape(8, 8)  # starts 4 bytes past a 16-byte boundary
    np.testing.assert_allclose(
        launch.matmul_register_tiled(view, view, **EMU), reference.matmul(view, view),
        rtol=1e-4, atol=1e-5,
    )


@pytest.mark.parametrize("stride", [1, 2, 3, 32, 1000])
@pytest.mark.parametrize("n", [1, 33, 4099])
def test_copy_strided(n, stride, rng):
    x = _f32(rng, n)
    assert np.array_equal(launch.copy_strided(x, stride, **EMU), reference.copy_strided(x, stride))


def test_copy_strided_grid_stride_loop_covers_any_grid(rng):
    x = _f32(rng, 5000)
    for grid in (1, 3, 40):  # fewer threads than elements: each thread loops
        out = launch.copy_strided(x, 2, grid=grid, block=64, **EMU)
        assert np.array_equal(out, x[::2])


@pytest.mark.parametrize("variant", launch.TRANSPOSES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 33), (33, 1), (17, 257), (64, 96)])
def test_transpose(variant, shape, rng):
    x = _f32(rng, *shape)
    assert np.array_equal(launch.transpose(x, variant=variant, **EMU), reference.transpose(x))


@pytest.mark.parametrize("variant", launch.REDUCTIONS)
@pytest.mark.parametrize("n", [1, 17, 33, 257, 4099, 300_001])
def test_reduce_sum(variant, n, rng):
    x = _f32(rng, n)
    total = launch.reduce_sum(x, variant=variant, **EMU)
    assert total.shape == () and total.dtype == np.float32
    np.testing.assert_allclose(total, reference.reduce_sum(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("variant", launch.REDUCTIONS)
def test_reduce_sum_edges(variant):
    assert launch.reduce_sum(np.zeros(0, np.float32), variant=variant, **EMU) == 0
    spikes = np.array([np.inf, 1.0, np.nan, 2.0], np.float32)
    assert np.isnan(launch.reduce_sum(spikes, variant=variant, **EMU))
    ones = np.ones(1000, np.float32)
    for block, blocks in ((32, 1), (64, 3), (1024, 2)):  # any whole-warp block, any grid
        assert launch.reduce_sum(ones, variant=variant, block=block, blocks=blocks, **EMU) == 1000


def test_new_launchers_reject_bad_arguments(rng):
    x = _f32(rng, 8)
    with pytest.raises(ParameterError, match="positive integer stride"):
        launch.copy_strided(x, 0, **EMU)
    with pytest.raises(ParameterError, match="positive integer stride"):
        launch.copy_strided(x, True, **EMU)
    with pytest.raises(ShapeError, match="vector"):
        launch.copy_strided(x.reshape(2, 4), 1, **EMU)
    with pytest.raises(ParameterError, match="naive"):
        launch.transpose(x.reshape(2, 4), variant="fast", **EMU)
    with pytest.raises(ShapeError, match="matrix"):
        launch.transpose(x, **EMU)
    with pytest.raises(ParameterError, match="tree"):
        launch.reduce_sum(x, variant="atomic", **EMU)
    with pytest.raises(KernelLaunchError, match="whole warps"):
        launch.reduce_sum(x, variant="shuffle", block=48, **EMU)
    with pytest.raises(KernelLaunchError, match="power of two"):
        launch.reduce_sum(x, variant="tree", block=48, **EMU)
    with pytest.raises(ShapeError, match="vector"):
        launch.reduce_sum(x.reshape(2, 4), **EMU)
    with pytest.raises(ShapeError):
        launch.matmul_register_tiled(x.reshape(2, 4), x.reshape(2, 4), **EMU)


@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 70))
def test_tiled_matmul_any_size(m, n, k):
    rng = np.random.default_rng(m * 10_000 + n * 100 + k)
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    np.testing.assert_allclose(
        launch.matmul_tiled(a, b, **EMU), reference.matmul(a, b), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("rows, cols", list(itertools.product(SIZES, SIZES)))
def test_softmax_and_rms_norm(rows, cols, rng):
    x = _f32(rng, rows, cols, scale=30.0)  # logits up to ~100: exp would overflow unshifted
    y = launch.softmax(x, **EMU)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, reference.softmax(x), rtol=1e-5, atol=1e-7)
    w = _f32(rng, cols)
    np.testing.assert_allclose(
        launch.rms_norm(x, w, 1e-5, **EMU), reference.rms_norm(x, w, 1e-5), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("block, cols", [(32, 33), (64, 7), (96, 3000), (32, 32 * 32 + 33)])
def test_row_kernels_any_whole_warp_block(block, cols, rng):
    """Blocks of any whole number of warps; rows longer than the registers hold (16 per
    thread) read the rest from global memory again."""
    x, w = _f32(rng, 3, cols, scale=10.0), _f32(rng, cols)
    np.testing.assert_allclose(
        launch.softmax(x, block=block, **EMU), reference.softmax(x), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        launch.rms_norm(x, w, block=block, **EMU), reference.rms_norm(x, w), rtol=1e-5, atol=1e-6
    )


def test_softmax_is_stable_for_infinite_and_huge_logits(rng):
    x = _f32(rng, 5, 70, scale=3.0)
    x[0, 40:] = -np.inf  # masked logits (as in causal attention): probability 0
    x[1, :] = 1e4 * np.sign(x[1])  # huge logits: exp would overflow unshifted
    x[2, 3] = 3e38  # one logit near float32's largest
    x[3, :] = -np.inf  # nothing left: NaN, as NumPy's formula gives
    y = launch.softmax(x, **EMU)
    with np.errstate(invalid="ignore"):
        expected = reference.softmax(x)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)  # NaN where NumPy has NaN
    assert np.isfinite(y[[0, 1, 2, 4]]).all() and np.isnan(y[3]).all()
    assert (y[0, 40:] == 0).all() and y[2, 3] == 1


# queries, keys, scale, block: T < S (queries aligned with the last keys), one row longer than
# the registers of 32 threads hold (the rest read again), a negative scale (masked keys and the
# padding stay -inf), rows that take float4 loads (S a multiple of 4) and rows that do not
CAUSAL = [(5, 7, 0.5, None), (17, 17, 1.0, None), (3, 40, 0.125, None), (4, 32 * 16 + 36, 0.3, 32),
          (6, 9, -2.0, None), (2, 2, 0.0, None)]  # fmt: skip


@pytest.mark.parametrize("queries, keys, scale, block", CAUSAL)
def test_causal_softmax_and_its_adjoint_match_the_ops_array_code(queries, keys, scale, block, rng):
    """The GPU replaces CausalSoftmax's and SoftmaxGrad's array code with these kernels."""
    s = _f32(rng, 2, 3, queries, keys, scale=10.0)
    y = launch.causal_softmax(s, scale, block=block, **EMU)
    np.testing.assert_allclose(y, CausalSoftmax(scale).on_arrays(np, s), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y, reference.causal_softmax(s, scale), rtol=1e-5, atol=1e-7)
    g = _f32(rng, *s.shape)
    np.testing.assert_allclose(
        launch.softmax_grad(g, y, scale, block=block, **EMU),
        SoftmaxGrad(scale).on_arrays(np, g, y), rtol=1e-4, atol=1e-6,
    )  # fmt: skip


def test_causal_softmax_adds_the_mask_so_nan_or_inf_under_it_poisons_the_row(rng):
    s = _f32(rng, 1, 4, 8)
    s[0, 0, 5] = np.nan  # under query 0's mask
    s[0, 1, 7] = np.inf  # under query 1's mask
    s[0, 2, 6] = -np.inf  # -inf under the mask changes nothing
    y = launch.causal_softmax(s, 1.0, **EMU)
    with np.errstate(invalid="ignore"):
        expected = CausalSoftmax(1.0).on_arrays(np, s)
    assert np.isnan(y[0, :2]).all() and np.isnan(expected[0, :2]).all()
    np.testing.assert_allclose(y[0, 2:], expected[0, 2:], rtol=1e-5)


def test_causal_softmax_keeps_the_mask_rules_beyond_the_registers(rng):
    """Keys past what 32 threads hold in registers (the kernel reads them again): a huge score
    under the mask changes nothing (left out of the maximum too), a NaN under it poisons."""
    s = _f32(rng, 1, 4, 548)
    s[0, 0, -1] = 1e6  # masked for query 0 (it sees keys 0 .. 544)
    s[0, 1, 546] = np.nan  # masked for query 1
    y = launch.causal_softmax(s, 1.0, block=32, **EMU)
    with np.errstate(invalid="ignore"):
        expected = CausalSoftmax(1.0).on_arrays(np, s)
    assert np.isfinite(y[0, 0]).all() and np.isnan(y[0, 1]).all()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(3, 7), (129, 40), (1001, 8), (2, 3, 33), (2, 16_389),
                                   (0, 5)])  # fmt: skip
def test_rms_norm_grad_w_matches_the_ops_array_code(shape, rng):
    """Chunks of rows with a short last one (129 rows: 65 chunks of 2, the last of 1; 1001
    rows: 126 of 8, the last of 1), a row longer than 1024 threads hold in registers, empty
    inputs."""
    g, x = _f32(rng, *shape), _f32(rng, *shape, scale=3.0)
    w = np.ones(shape[-1], np.float32)
    got = launch.rms_norm_grad_w(g, x, 1e-5, **EMU)
    assert got.shape == (shape[-1],) and got.dtype == np.float32
    expected = RMSNormGradW(1e-5).compute(np, g, x, w)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, reference.rms_norm_grad_w(g, x, 1e-5), rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="rms_norm_grad_w needs"):
        launch.rms_norm_grad_w(g[..., None], x, **EMU)


def test_attention_of_empty_heads_needs_no_scale():
    q = np.zeros((1, 2, 4, 0), np.float32)  # head_dim 0: the default scale d**-0.5 is undefined
    assert launch.attention(q, q, q, **EMU).shape == (1, 2, 4, 0)


def test_causal_softmax_and_softmax_grad_refuse_bad_shapes(rng):
    with pytest.raises(ShapeError, match="T <= S"):
        launch.causal_softmax(_f32(rng, 3, 2), 1.0, **EMU)
    with pytest.raises(ShapeError, match="one shape"):
        launch.softmax_grad(_f32(rng, 3, 2), _f32(rng, 2, 3), **EMU)
    assert launch.causal_softmax(np.zeros((0, 2, 3), np.float32), 1.0, **EMU).shape == (0, 2, 3)


@pytest.mark.parametrize("rows, cols, block", [(3, 7, None), (4, 64, None), (2, 32 * 16 + 36, 32),
                                              (5, 1, None)])  # fmt: skip
def test_rms_norm_grad_x_matches_the_ops_array_code(rows, cols, block, rng):
    g, x, w = _f32(rng, rows, cols), _f32(rng, rows, cols, scale=3.0), _f32(rng, cols)
    out = launch.rms_norm_grad_x(g, x, w, 1e-5, block=block, **EMU)
    np.testing.assert_allclose(out, RMSNormGradX(1e-5).compute(np, g, x, w), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, reference.rms_norm_grad_x(g, x, w, 1e-5), rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="rms_norm_grad_x needs"):
        launch.rms_norm_grad_x(g, x, w[:-1] if cols > 1 else np.ones(2, np.float32), **EMU)


def test_row_kernels_reject_other_blocks(rng):
    for block in (16, 48, 2048):
        with pytest.raises(KernelLaunchError, match="multiple of 32"):
            launch.softmax(_f32(rng, 2, 5), block=block, **EMU)


@pytest.mark.parametrize("n", [0, 1, 33, 1000])
def test_adamw_kernels(n, rng):
    """AdamW's moments and update (``adamw.cu``) against NumPy, empty arrays included."""
    p, g, m = _f32(rng, n), _f32(rng, n), _f32(rng, n)
    v = np.abs(_f32(rng, n)) + 0.01
    for power, beta in ((1, 0.9), (2, 0.95)):
        want = reference.adam_moment(m, g, beta, power)
        for block in (256, 1024):
            got = launch.adam_moment(m, g, beta, power, block=block, **EMU)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    for decay, step in ((0.0, 1), (0.1, 1000)):
        args = (p, m, v, np.float64(1e-3), np.int64(step), 0.9, 0.95, 1e-8, decay)
        np.testing.assert_allclose(launch.adamw_update(*args, **EMU), reference.adamw_update(*args),
                                   rtol=1e-6, atol=1e-7)  # fmt: skip
    with pytest.raises(ShapeError, match="adam_moment needs m and g of one shape"):
        launch.adam_moment(m, np.ones(n + 1, np.float32), 0.9, 1, **EMU)


@pytest.mark.parametrize("seq_len", SIZES)
@pytest.mark.parametrize("head_dim", [2, 18, 64])
def test_rope(seq_len, head_dim, rng):
    x = _f32(rng, 2, 3, seq_len, head_dim)
    cos, sin = reference.rope_tables(seq_len, head_dim)
    np.testing.assert_allclose(
        launch.rope(x, cos, sin, **EMU), reference.rope(x, cos, sin), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("axis", [0, 1, 2, -4])
def test_rope_with_positions_on_any_axis_but_the_last(axis, rng):
    """The projections' own layout (batch, positions, heads, head_dim) and others: rows at
    position (row / inner) % seq_len."""
    x = _f32(rng, 3, 5, 4, 6)
    seq_len = x.shape[axis]
    cos, sin = reference.rope_tables(seq_len, 6)
    moved = np.moveaxis(x, axis, -2)
    expected = np.moveaxis(reference.rope(moved, cos, sin), -2, axis)
    np.testing.assert_allclose(launch.rope(x, cos, sin, axis=axis, **EMU), expected,
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    for bad in (3, -1, 4):  # the last axis, or none
        with pytest.raises(ShapeError, match="positions on an axis before the last"):
            launch.rope(x, cos, sin, axis=bad, **EMU)


ATTENTION = [
    # batch, heads, kv heads, seq_len, head_dim; T is never a multiple of the 64 x 32 tiles
    (1, 1, 1, 1, 4),
    (2, 4, 2, 17, 8),  # grouped-query: 2 query heads per kv head
    (1, 4, 1, 33, 33),  # 4 query heads per kv head, odd head_dim
    (1, 2, 2, 130, 16),  # ordinary multi-head (group size 1), 3 query blocks, 5 key tiles
    (1, 4, 2, 70, 64),  # the largest head_dim of 64-row blocks
    (1, 2, 1, 40, 65),  # the smallest head_dim of 32-row blocks
    (1, 6, 2, 40, 128),  # the largest head_dim
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", ATTENTION)
def test_attention(shape, causal, rng):
    batch, heads, kv_heads, seq_len, head_dim = shape
    q = _f32(rng, batch, heads, seq_len, head_dim)
    k, v = (
        _f32(rng, batch, kv_heads, seq_len, head_dim),
        _f32(rng, batch, kv_heads, seq_len, head_dim),
    )
    np.testing.assert_allclose(
        launch.attention(q, k, v, causal, **EMU),
        reference.attention(q, k, v, causal),
        rtol=1e-4,
        atol=1e-5,
    )


def test_attention_scale_and_large_scores(rng):
    q, k, v = (_f32(rng, 1, 2, 50, 8) for _ in range(3))
    for scale in (0.5, 40.0):  # scores up to ~1000: exp would overflow without the running max
        np.testing.assert_allclose(
            launch.attention(q, k, v, True, scale, **EMU),
            reference.attention(q, k, v, True, scale=scale),
            rtol=1e-4, atol=1e-5,
        )  # fmt: skip


def test_causal_first_row_is_the_first_value(rng):
    q, k, v = (_f32(rng, 1, 1, 17, 8) for _ in range(3))
    out = launch.attention(q, k, v, True, **EMU)
    np.testing.assert_allclose(out[0, 0, 0], v[0, 0, 0], rtol=1e-6)


@pytest.mark.parametrize(
    "call",
    [
        lambda: launch.vector_add(np.ones(3), np.ones(4), **EMU),
        lambda: launch.matmul_tiled(np.ones((2, 3)), np.ones((2, 3)), **EMU),
        lambda: launch.rms_norm(np.ones((2, 3)), np.ones(4), **EMU),
        lambda: launch.rope(np.ones((4, 3)), np.ones((4, 1)), np.ones((4, 1)), **EMU),
        lambda: launch.attention(np.ones((1, 3, 4, 8)), *[np.ones((1, 2, 4, 8))] * 2, **EMU),
        lambda: launch.attention(np.ones((1, 2, 4, 8)), *[np.ones((1, 2, 5, 8))] * 2, **EMU),
    ],
)
def test_launchers_reject_bad_shapes(call):
    with pytest.raises(ShapeError):
        call()


def test_empty_inputs_launch_nothing():
    assert launch.softmax(np.zeros((0, 5)), **EMU).shape == (0, 5)
    assert launch.matmul_naive(np.zeros((0, 3)), np.zeros((3, 2)), **EMU).shape == (0, 2)


def test_unknown_mode():
    with pytest.raises(KernelLaunchError, match="emulator"):
        launch.vector_add(np.ones(2), np.ones(2), mode="tpu")


def test_default_mode_without_gpu_is_the_emulator():
    if launch.default_mode() == "gpu":
        pytest.skip("this machine has a GPU")
    assert launch.default_mode() == "emulator"




@pytest.mark.parametrize("block", [32.5, 0, 2048, True, "256"])
def test_a_block_that_is_not_a_whole_number_of_threads_is_refused(block):
    x = np.ones(64, np.float32)
    with pytest.raises((ParameterError, GraphError), match="block .*threads per block"):
        launch.vector_add(x, x, block=block, **EMU)
