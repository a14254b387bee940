"""The kernels in the emulator at sizes and values the other tests skip: lengths next to the
tiles, blocks and warps, one row or one column, other head dims and grouped-query ratios, the
mask's first and last rows, and special values; and the launchers' refusals. The emulator puts
every array next to unreadable pages, so an index past its end (or before its start) crashes the
launch instead of reading a neighbour's bytes."""

import numpy as np
import pytest

from conftest import needs_gxx
from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.kernels import launch, reference

pytestmark = needs_gxx("the CUDA emulator")
E = {"mode": "emulator"}
RAGGED = (1, 31, 33, 63, 65, 127, 129, 257)


@pytest.fixture
def fence():
    """Inputs as float32 arrays. The emulator itself runs each launch on copies of its arrays
    between two unreadable pages (an index past either end crashes the launch), the bytes up
    to the next 16-byte boundary NaN and a write there reported: these tests need no fences
    of their own (they had them before the emulator did)."""
    return lambda array: np.asarray(array, dtype=np.float32)


def _random(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("n", RAGGED)
def test_vector_kernels_at_ragged_lengths(fence, n, rng):
    a, b = _random(rng, n), _random(rng, n)
    for add in (launch.vector_add, launch.vector_add_float4):
        np.testing.assert_array_equal(add(fence(a), fence(b), **E), a + b)
    for stride in (1, 3, n + 1):
        np.testing.assert_array_equal(launch.copy_strided(fence(a), stride, **E), a[::stride])
    for variant in launch.REDUCTIONS:  # float32 partial sums: |error| <= depth * u * sum |a|
        total = launch.reduce_sum(fence(a), variant=variant, block=32, blocks=3, **E)
        assert abs(total - a.sum(dtype=np.float64)) <= 32 * 2**-24 * np.abs(a).sum()


@pytest.mark.parametrize("shape", [(1, 1), (1, 257), (257, 1), (33, 31), (65, 129)])
def test_transposes_of_rows_columns_and_ragged_tiles(fence, shape, rng):
    x = _random(rng, *shape)
    for variant in launch.TRANSPOSES:
        np.testing.assert_array_equal(launch.transpose(fence(x), variant=variant, **E), x.T)


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (1, 129, 1), (33, 17, 31), (129, 9, 130),
                                     (2, 133, 3), (5, 0, 3)])  # fmt: skip
def test_matmuls_at_ragged_shapes(fence, m, k, n, rng):
    a, b = _random(rng, m, k), _random(rng, k, n)
    exact = a.astype(np.float64) @ b
    bound = max(k, 1) * 2**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b))  # float32 sums
    for kernel in ("matmul_naive", "matmul_tiled", "matmul_register_tiled"):
        c = getattr(launch, kernel)(fence(a), fence(b), **E)
        assert (np.abs(c - exact) <= bound).all(), kernel


@pytest.mark.parametrize("cols", [1, 31, 33, 65, 129, 257, 516])
def test_row_kernels_at_ragged_widths(fence, cols, rng):
    x, g, w = _random(rng, 2, cols), _random(rng, 2, cols), _random(rng, cols)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    p = reference.softmax(x64)
    for block in (None, 64):
        close = {"rtol": 1e-5, "atol": 1e-6}
        np.testing.assert_allclose(launch.softmax(fence(x), block=block, **E), p, **close)
        np.testing.assert_allclose(launch.softmax_grad(fence(g), fence(p), 0.5, block=block, **E),
                                   reference.softmax_grad(g64, p, 0.5), **close)  # fmt: skip
        np.testing.assert_allclose(launch.rms_norm(fence(x), fence(w), block=block, **E),
                                   reference.rms_norm(x64, w), **close)  # fmt: skip
        np.testing.assert_allclose(
            launch.rms_norm_grad_x(fence(g), fence(x), fence(w), block=block, **E),
            reference.rms_norm_grad_x(g64, x64, w), rtol=1e-4, atol=1e-5,
        )  # fmt: skip
    grad_w = launch.rms_norm_grad_w(fence(g), fence(x), block=32, **E)
    np.testing.assert_allclose(grad_w, reference.rms_norm_grad_w(g64, x64), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("queries, keys", [(1, 1), (1, 33), (33, 33), (2, 257)])
def test_causal_softmax_first_and_last_rows(fence, queries, keys, rng):
    s = _random(rng, 2, queries, keys)
    y = launch.causal_softmax(fence(s), 0.3, **E)
    np.testing.assert_allclose(y, reference.causal_softmax(s.astype(np.float64), 0.3),
                               rtol=1e-5, atol=1e-7)  # fmt: skip
    assert y[:, 0, keys - queries + 1 :].max(initial=0) == 0 and (y[:, -1] > 0).all()


@pytest.mark.parametrize("shape, axis", [((1, 2), 0), ((3, 2), 0), ((2, 5, 3, 6), 1),
                                         ((1, 7, 130), -2), ((4, 1, 2), 1)])  # fmt: skip
def test_rope_at_odd_lengths_and_positions(fence, shape, axis, rng):
    x = _random(rng, *shape)
    cos, sin = reference.rope_tables(shape[axis], shape[-1])
    want = np.moveaxis(reference.rope(np.moveaxis(x, axis, -2), cos, sin), -2, axis)
    got = launch.rope(fence(x), fence(cos), fence(sin), axis=axis, block=32, **E)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("head_dim, seq_len, heads, kv_heads", [
    (16, 1, 2, 2), (32, 33, 2, 1), (48, 65, 2, 2), (80, 33, 8, 1), (128, 65, 2, 1), (1, 31, 2, 2),
])  # fmt: skip
@pytest.mark.parametrize("causal", [True, False])
def test_attention_head_dims_lengths_and_kv_groups(fence, head_dim, seq_len, heads, kv_heads,
                                                   causal, rng):  # fmt: skip
    q = _random(rng, 1, heads, seq_len, head_dim)
    k, v = (_random(rng, 1, kv_heads, seq_len, head_dim) for _ in range(2))
    want = reference.attention(*(a.astype(np.float64) for a in (q, k, v)), causal)
    got = launch.attention(fence(q), fence(k), fence(v), causal, **E)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_softmax_reference_agrees_with_the_kernel_on_infinite_rows():
    x = np.array([[-np.inf] * 5, [0, np.inf, 1, 2, 3], [0, -np.inf, 1, 2, 3]], np.float32)
    want = reference.softmax(x)  # no RuntimeWarning: pytest makes those errors
    assert np.isnan(want[:2]).all() and want[2, 1] == 0
    np.testing.assert_allclose(launch.softmax(x, **E), want, rtol=1e-6)


@pytest.mark.parametrize("values, dtype", [([1 + 2j, 3], "complex128"), ([None, 1.0], "object"),
                                           (["1", "2"], "<U1")])  # fmt: skip
def test_launchers_refuse_inputs_that_are_not_real_numbers(values, dtype):
    bad, good = np.array(values), np.ones(2, np.float32)
    with pytest.raises(GraphError, match=rf"vector_add's input of shape \(2,\) .*not {dtype}"):
        launch.vector_add(bad, good, **E)
    with pytest.raises(GraphError, match=r"softmax's input of shape \(2,\)"):
        launch.softmax(bad, **E)


@pytest.mark.parametrize("call", [
    lambda x: launch.softmax(x, **E), lambda x: launch.rms_norm(x, np.ones(1), **E),
    lambda x: launch.rms_norm_grad_x(x, x, np.ones(1), **E),
])  # fmt: skip
def test_row_kernels_name_themselves_when_given_a_scalar(call):
    with pytest.raises(ShapeError, match=r"^(softmax|rms_norm|rms_norm_grad_x) works on rows"):
        call(np.float32(1))


@pytest.mark.parametrize("kernel", ["matmul_naive", "matmul_tiled"])
def test_int_indexed_matmuls_refuse_matrices_of_over_2_31_elements(kernel):
    big = np.broadcast_to(np.float32(1), (2**16, 2**15 + 1))  # refused before any copy
    with pytest.raises(ShapeError, match=rf"{kernel} indexes with 32-bit ints.*\(65536, 32769\)"):
        getattr(launch, kernel)(big, np.ones((2**15 + 1, 1), np.float32), **E)


@pytest.mark.parametrize("block", [16, (8,), (8, 8, 2)])
def test_matmul_naive_block_is_a_pair(block):
    with pytest.raises(ParameterError, match="matmul_naive needs a block of two sizes"):
        launch.matmul_naive(np.ones((2, 2)), np.ones((2, 2)), block=block, **E)


@pytest.mark.parametrize("blocks, error", [(-1, ParameterError), (0, ParameterError),
                                           (2.5, GraphError)])  # fmt: skip
def test_reduce_sum_refuses_a_bad_number_of_blocks(blocks, error):
    with pytest.raises(error, match="reduce_sum's blocks must be an integer"):
        launch.reduce_sum(np.ones(8, np.float32), blocks=blocks, **E)


def test_adamw_update_refuses_an_lr_or_step_that_is_not_one_value():
    x = np.ones(4, np.float32)
    for lr, step, sizes in ((np.array([1e-3, 5.0]), 1, "2 and 1"), (1e-3, np.ones(3), "1 and 3")):
        with pytest.raises(ShapeError, match=f"needs one lr and one step.*got {sizes}"):
            launch.adamw_update(x, x, x, lr, step, 0.9, 0.999, 1e-8, 0.0, **E)


def test_a_torch_tensor_is_read_as_numbers_by_the_launchers_conversion():
    torch = pytest.importorskip("torch")
    converted = launch._float32("softmax", np, torch.ones(2, 3, dtype=torch.float64))
    assert converted.dtype == np.float32 and converted.shape == (2, 3)
