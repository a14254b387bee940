"""Review 9 of the checks of notebooks 07–09, as a grader: correct answers written another way
pass, and wrong answers a student would write are refused, with the hint that fits (not
"not done yet", not another mistake's hint)."""

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from conftest import needs_gxx
from course_lib.exercises import verify


def _reference(exercise_id):
    return reference_answer(notebook_exercises()[exercise_id])


# -- 07.scale_add -----------------------------------------------------------------------------
SCALE_ADD = ('extern "C" __global__ void scale_add(const float* x, const float* y, float* out, '
             'float a, int n) {\n%s\n}')  # fmt: skip


@needs_gxx("running 07.scale_add in the emulator")
@pytest.mark.parametrize("body", [
    "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) "
    "out[i] = a * x[i] + y[i];",
    "int i = threadIdx.x + blockDim.x * blockIdx.x; if (i >= n) return; "
    "out[i] = fmaf(a, x[i], y[i]);",
    "size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; if (i < (size_t)n) "
    "out[i] = a * __ldg(x + i) + y[i];",
], ids=["grid-stride", "early-return-fma", "size_t"])  # fmt: skip
def test_scale_add_written_another_way_passes(body):
    verdict = verify("07.scale_add", SCALE_ADD % body)
    assert verdict.passed, verdict.message


@needs_gxx("running 07.scale_add in the emulator")
@pytest.mark.parametrize(("guard", "first_missed"), [
    ("i < n - 1", "never wrote out[999] (1 of 1000"),
    ("blockIdx.x < n / blockDim.x", "never wrote out[992] (8 of 1000"),  # n a multiple of it
], ids=["off-by-one", "whole-blocks-only"])  # fmt: skip
def test_a_scale_add_that_writes_nothing_for_n_1_is_wrong_not_not_done(guard, first_missed):
    """Both write nothing at n = 1, the first launch, and were told "not done yet (is its
    body still the stub?)"; the first launch is now n = 1000, where they miss the tail."""
    body = f"int i = blockIdx.x * blockDim.x + threadIdx.x; if ({guard}) out[i] = a * x[i] + y[i];"
    verdict = verify("07.scale_add", SCALE_ADD % body)
    assert verdict.status == "failed" and verdict.mistake == "missed-elements", verdict.message
    assert first_missed in verdict.message


@needs_gxx("running 07.scale_add in the emulator")
def test_the_scale_add_stub_is_still_not_done():
    verdict = verify("07.scale_add", SCALE_ADD % "    // your code here")
    assert verdict.status == "not done", verdict.message


# -- 07.tiled_matmul and 07.softmax_rows: other valid versions ---------------------------------
@needs_gxx("running 07.tiled_matmul in the emulator")
def test_a_tiled_matmul_that_reads_its_b_tile_transposed_and_skips_zero_fill_passes():
    """The tile of B stored as loaded and read as b_tile[threadIdx.x][k]; no zero fill, the
    product loop cut at K instead (the hint of tile-not-transposed names this version)."""
    source = """#define TILE 16
extern "C" __global__ void tiled_matmul(const float* A, const float* B, float* C, int M, int N,
                                        int K) {
    __shared__ float a_t[TILE][TILE];
    __shared__ float b_t[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx, b_row = blockIdx.x * TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        if (row < M && k0 + tx < K) a_t[ty][tx] = A[row * K + k0 + tx];
        if (b_row < N && k0 + tx < K) b_t[ty][tx] = B[b_row * K + k0 + tx];
        __syncthreads();
        for (int k = 0; k < min(TILE, K - k0); ++k) acc = fmaf(a_t[ty][k], b_t[tx][k], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}"""
    verdict = verify("07.tiled_matmul", source)
    assert verdict.passed, verdict.message


@needs_gxx("running 07.softmax_rows in the emulator")
def test_an_online_softmax_with_a_grid_stride_loop_passes():
    body = """int stride = gridDim.x * blockDim.x;
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        const float* row = x + (size_t)r * cols;
        float m = __int_as_float(0xff800000), s = 0.0f;
        for (int j = 0; j < cols; j++) {
            float next = fmaxf(m, row[j]);
            s = s * expf(m - next) + expf(row[j] - next);
            m = next;
        }
        for (int j = 0; j < cols; j++) out[(size_t)r * cols + j] = expf(row[j] - m) / s;
    }"""
    source = ('extern "C" __global__ void softmax_rows(const float* x, float* out, int rows, '
              f"int cols) {{\n{body}\n}}")  # fmt: skip
    verdict = verify("07.softmax_rows", source)
    assert verdict.passed, verdict.message


# -- 07.warp_sum ------------------------------------------------------------------------------
ROW_SUM = ('extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) '
           "{\n%s\n}")  # fmt: skip
_PARTIAL = """float s = 0.0f;
for (int j = threadIdx.x; j < cols; j += blockDim.x) s += x[blockIdx.x * cols + j];
for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
"""


@needs_gxx("running 07.warp_sum in the emulator")
def test_a_row_sum_that_zeroes_out_then_adds_without_a_barrier_is_refused():
    """Thread 0 zeroes out[row] and each warp's lane 0 atomicAdds its total, with nothing in
    between: the emulator runs thread 0 first, so the sum came out right and the answer
    passed; on a GPU another warp's atomicAdd can land before the zero."""
    racy = "if (threadIdx.x == 0) out[blockIdx.x] = 0.0f;\n" + _PARTIAL + (
        "if (threadIdx.x % 32 == 0) atomicAdd(&out[blockIdx.x], s);")
    verdict = verify("07.warp_sum", ROW_SUM % racy)
    assert verdict.status == "failed" and verdict.mistake == "adds-to-out", verdict.message
    assert "9 stores to out per block and no __syncthreads()" in verdict.message


@needs_gxx("running 07.warp_sum in the emulator")
@pytest.mark.parametrize("body", [
    # zeroed, a barrier, then each warp adds: ordered, so right on a GPU too
    "__shared__ float total; if (threadIdx.x == 0) total = 0.0f; __syncthreads();\n" + _PARTIAL
    + "if (threadIdx.x % warpSize == 0) atomicAdd(&total, s); __syncthreads();\n"
    "if (threadIdx.x == 0) out[blockIdx.x] = total;",
    # the first warp alone reads the whole row: no barrier needed
    "if (threadIdx.x >= 32) return; float s = 0.0f;\n"
    "for (int j = threadIdx.x; j < cols; j += 32) s += x[blockIdx.x * cols + j];\n"
    "for (int o = 1; o < 32; o *= 2) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
    "if (threadIdx.x == 0) out[blockIdx.x] = s;",
    # thread 0 adds the warp totals in a loop
    "__shared__ float t[32];\n" + _PARTIAL + "if (threadIdx.x % 32 == 0) t[threadIdx.x / 32] = s;"
    "\n__syncthreads(); if (threadIdx.x == 0) { float total = 0.0f;\n"
    "for (int w = 0; w < blockDim.x / 32; ++w) total += t[w]; out[blockIdx.x] = total; }",
], ids=["shared-atomic-after-barrier", "one-warp", "serial-warp-totals"])  # fmt: skip
def test_a_row_sum_written_another_way_passes(body):
    verdict = verify("07.warp_sum", ROW_SUM % body)
    assert verdict.passed, verdict.message


@needs_gxx("running 07.warp_sum in the emulator")
def test_a_row_sum_without_its_barrier_is_told_so_not_to_guard_the_lanes():
    """The warp totals read before the other warps stored them read NaN: the hint used to be
    unwritten-shared's, about lanes past the number of warps, which this answer guards."""
    source = _reference("07.warp_sum").replace("__syncthreads();", "")
    verdict = verify("07.warp_sum", source)
    assert verdict.status == "failed" and verdict.mistake is None, verdict.message
    assert "the emulator counted no __syncthreads()" in verdict.message


# -- 08.rmsnorm and 08.attention --------------------------------------------------------------
@pytest.mark.parametrize("answer", [
    lambda x, w, eps: x / cl.sqrt(cl.mean(x * x, axis=-1, keepdims=True) + eps) * w,
    lambda x, w, eps: w * x * cl.rsqrt(cl.sum(x * x, axis=-1, keepdims=True) / x.shape[-1] + eps),
    lambda x, w, eps: x * cl.power(cl.mean(cl.power(x, 2), axis=len(x.shape) - 1,
                                           keepdims=True) + eps, -0.5) * w,
], ids=["sqrt", "sum-over-n", "power"])  # fmt: skip
def test_rmsnorm_written_another_way_passes(answer):
    verdict = verify("08.rmsnorm", answer)
    assert verdict.passed, verdict.message


def _future(t, k=1, value=-np.inf):
    return cl.constant(np.triu(np.full((t, t), value), k=k))


def _tril(t):
    return cl.constant(np.tril(np.ones((t, t))))


def _scores(q, k, scale=None):
    d = q.shape[1]
    return q @ cl.matrix_transpose(k) * (d**-0.5 if scale is None else scale)


@pytest.mark.parametrize("answer", [
    lambda q, k, v: cl.causal_softmax(q @ cl.matrix_transpose(k), q.shape[1] ** -0.5) @ v,
    lambda q, k, v: cl.softmax(_scores(q, k) + _future(q.shape[0], value=-1e9), axis=-1) @ v,
    lambda q, k, v: (lambda e: e / cl.sum(e, axis=-1, keepdims=True))(
        cl.exp(_scores(q, k)) * _tril(q.shape[0])) @ v,
], ids=["causal_softmax", "minus-1e9", "exp-times-tril"])  # fmt: skip
def test_attention_written_another_way_passes(answer):
    verdict = verify("08.attention", answer)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(("answer", "mistake"), [
    (lambda q, k, v: cl.softmax(_scores(q, k) * _tril(q.shape[0]), axis=-1) @ v, "no-mask"),
    (lambda q, k, v: (cl.softmax(_scores(q, k), axis=-1) * _tril(q.shape[0])) @ v, "no-mask"),
    (lambda q, k, v: cl.softmax(_scores(q, k) + _future(q.shape[0], k=2), axis=-1) @ v,
     "no-mask"),
    (lambda q, k, v: cl.softmax(_scores(q, k, q.shape[0] ** -0.5) + _future(q.shape[0]),
                                axis=-1) @ v, "no-scale"),
    (lambda q, k, v: cl.softmax(_scores(q, k, q.shape[1] ** 0.5) + _future(q.shape[0]),
                                axis=-1) @ v, "no-scale"),
], ids=["scores-times-tril", "probabilities-times-tril", "triu-k2", "scale-sqrt-T",
        "times-sqrt-d"])  # fmt: skip
def test_a_wrong_attention_mask_or_scale_gets_its_hint(answer, mistake):
    """A mask of zeros multiplied into the scores, one applied after the softmax, one that
    lets each position see the next; 1/√T for 1/√d, ×√d: refused with no hint before."""
    verdict = verify("08.attention", answer)
    assert verdict.status == "failed" and verdict.mistake == mistake, verdict.message


# -- 08.decode_step ---------------------------------------------------------------------------
def _decoder(pairs="half", sign=1, rotate_k=True):
    """A decode_step with RoPE on ``pairs`` ("half" or "interleaved"), by ``sign`` × the
    position, the key rotated or not; correct otherwise."""

    def decode_step(cache, q, k, v, position):
        h, d = q.shape
        half, group = d // 2, h // k.shape[0]
        angle = sign * position * 10000.0 ** (-np.arange(half) / half)
        cos, sin = np.cos(angle).astype(q.dtype), np.sin(angle).astype(q.dtype)

        def rotate(x):
            if pairs == "half":
                a, b = x[..., :half], x[..., half:]
                return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
            out = np.empty_like(x)
            a, b = x[..., 0::2], x[..., 1::2]
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
            return out

        keys = np.concatenate([cache[0], (rotate(k) if rotate_k else k)[None]])
        values = np.concatenate([cache[1], v[None]])
        scores = np.einsum("hd,shd->hs", rotate(q), keys[:, np.arange(h) // group]) / d**0.5
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        return np.einsum("hs,shd->hd", weights, values[:, np.arange(h) // group]), (keys, values)

    return decode_step


def test_decode_step_written_another_way_passes():
    verdict = verify("08.decode_step", _decoder())
    assert verdict.passed, verdict.message


def test_a_decode_step_that_never_rotates_the_key_gets_the_unrotated_key_hint():
    """Only q rotated: the output at position 1 was refused with no hint."""
    verdict = verify("08.decode_step", _decoder(rotate_k=False))
    assert verdict.status == "failed" and verdict.mistake == "unrotated-in-cache", verdict.message


@pytest.mark.parametrize(("decoder", "said"), [
    (_decoder(pairs="interleaved"), "rotates the pairs (x[2i], x[2i+1])"),
    (_decoder(sign=-1), "rotates backwards, by −position"),
], ids=["interleaved", "backwards"])  # fmt: skip
def test_rope_written_unlike_cl_rope_is_named_in_the_message(decoder, said):
    verdict = verify("08.decode_step", decoder)
    assert verdict.status == "failed", verdict.message
    assert said in verdict.message


# -- 09 ---------------------------------------------------------------------------------------
def _params(c):
    kv = c.n_kv_heads * c.head_dim
    return (c.n_layers * (2 * c.dim * c.dim + 2 * c.dim * kv + 3 * c.dim * c.ffn_dim + 2 * c.dim)
            + 2 * c.vocab_size * c.dim + c.dim)  # fmt: skip


def test_forward_flops_as_a_float_sum_per_layer_passes():
    def forward_flops(c, batch, seq):
        t, s = float(batch * seq), float(seq)
        h, n, d, i, kv = c.dim, c.n_heads, c.head_dim, c.ffn_dim, c.n_kv_heads * c.head_dim
        layer = 2 * (4 * t * h + 2 * t) + 2 * t * h * (2 * n * d + 2 * kv) + 3 * t * n * d
        layer += 4 * t * s * n * d + 3 * t * s * n + 6 * t * h * i + 5 * t * i + 2 * t * h
        return c.n_layers * layer + 4 * t * h + 2 * t + 2 * t * h * c.vocab_size

    verdict = verify("09.forward_flops", forward_flops)
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(("change", "mistake"), [
    # the causal pairs counted exactly, s(s+1)/2 a head, in QKᵀ, its softmax and PV
    (lambda c, b, s: -c.n_layers * (4 * b * s * s * c.n_heads * c.head_dim
                                    + 3 * b * s * s * c.n_heads) * (s - 1) / (2 * s),
     "causal-halved"),
    # RoPE on the keys too, with n heads
    (lambda c, b, s: c.n_layers * 3 * b * s * c.n_heads * c.head_dim, "rope-on-keys"),
], ids=["causal-pairs", "rope-on-keys-n-heads"])  # fmt: skip
def test_a_wrong_flop_count_gets_its_hint(change, mistake):
    reference = _reference("09.forward_flops")
    verdict = verify("09.forward_flops", lambda c, b, s: reference(c, b, s) + change(c, b, s))
    assert verdict.status == "failed" and verdict.mistake == mistake, verdict.message


def test_a_flop_count_off_in_the_8th_digit_shows_digits_that_differ():
    """Without the 2bs of each norm's rows the first case is 8e-9 off: the message said
    "returned 6.298707e+13, the table says 6.298707e+13"."""
    reference = _reference("09.forward_flops")
    verdict = verify("09.forward_flops",
                     lambda c, b, s: reference(c, b, s) - c.n_layers * 2 * 2 * b * s)
    assert verdict.status == "failed", verdict.message
    assert "returned 6.2987071e+13, the table says 6.2987072e+13" in verdict.message


def test_count_params_with_numpy_ints_passes():
    verdict = verify("09.count_params", lambda c: np.int64(_params(c)))
    assert verdict.passed, verdict.message


def test_parallel_budget_with_whole_bytes_sent_passes():
    """The bytes sent as an int (2·(n−1)·buffer // n): the check allows any number there."""
    reference = _reference("09.parallel_memory")

    def parallel_budget(config, batch, seq, devices, strategy):
        budget = reference(config, batch, seq, devices, strategy)
        budget["communication"] = round(budget["communication"])
        return budget

    verdict = verify("09.parallel_memory", parallel_budget)
    assert verdict.passed, verdict.message
