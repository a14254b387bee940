"""The emulator's counters equal the counts worked out on paper for the shipped kernels, and
the roofline bounds built from them behave as bounds."""

import os
from dataclasses import replace

import numpy as np
import pytest

from course_lib.errors import ParameterError
from course_lib.kernels import emulator, gpus, launch, profile, profiling, reference
from course_lib.kernels.analysis import sectors_touched, warp_addresses

pytestmark = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)
EMU = {"mode": "emulator"}


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _counted(fn, *args, **kwargs):
    with profile() as p:
        result = fn(*args, **kwargs, **EMU)
    return p, result


@pytest.mark.parametrize("shape", [(16, 16, 16), (33, 17, 40), (1, 70, 3), (64, 32, 48)])
def test_naive_matmul_loads_two_values_per_multiply_add(shape, rng):
    m, n, k = shape
    p, c = _counted(launch.matmul_naive, _f32(rng, m, k), _f32(rng, k, n))
    assert p.global_loads == 2 * m * n * k and p.global_load_bytes == 8 * m * n * k
    assert p.global_stores == m * n and p.global_store_bytes == 4 * m * n
    assert p.shared_loads == p.shared_stores == p.barriers == 0
    assert p.flops == 2 * m * n * k
    useful = 4 * (m * k + k * n + m * n)  # every element once
    if k % 8 == 0 and n % 8 == 0:  # rows of whole sectors: nothing else is touched
        assert p.dram_bytes == useful
    else:  # rows that end inside a sector share it with the next row
        assert useful <= p.dram_bytes < useful + 32 * (m + k + m)


@pytest.mark.parametrize("shape", [(16, 16, 16), (32, 48, 64), (64, 64, 128)])
def test_tiled_matmul_loads_divide_by_the_tile(shape, rng):
    m, n, k = shape
    t = launch.MATMUL_TILE
    p, _ = _counted(launch.matmul_tiled, _f32(rng, m, k), _f32(rng, k, n))
    assert p.global_loads == 2 * m * n * k // t
    assert p.shared_stores == p.global_loads and p.shared_loads == 2 * m * n * k
    assert p.barriers == (m // t) * (n // t) * (k // t) * 2  # two per tile step, per block
    assert p.bank_conflicts == 0


def test_register_tiled_matmul_loads_divide_by_its_block_tile(rng):
    m, n, k = 128, 256, 32
    p, _ = _counted(launch.matmul_register_tiled, _f32(rng, m, k), _f32(rng, k, n))
    # float4 loads: 4 floats per instruction, each reused by the 128 rows (columns) of a tile
    assert p.global_loads == 2 * m * n * k // launch.REGISTER_TILE // 4
    assert p.global_load_bytes == 4 * 2 * m * n * k // launch.REGISTER_TILE
    assert p.shared_loads == m * n * k // 16  # 4 float4 loads per 8 x 8 multiply-adds
    assert p.bank_conflicts == 0 and p.global_stores == m * n // 4


def test_ragged_sizes_load_only_what_exists(rng):
    # Guards skip the loads of the padding: fewer loads than the rounded-up tiles would make.
    m, n, k = 17, 33, 20
    p, _ = _counted(launch.matmul_tiled, _f32(rng, m, k), _f32(rng, k, n))
    rows_of_tiles, cols_of_tiles = -(-m // 16), -(-n // 16)
    assert p.global_loads == cols_of_tiles * m * k + rows_of_tiles * k * n


@pytest.mark.parametrize("n", [32, 1024, 4096 + 32])
def test_vector_add_touches_three_sectors_per_eight_floats(n, rng):
    p, _ = _counted(launch.vector_add, _f32(rng, n), _f32(rng, n))
    assert p.sectors == 3 * n * 4 // 32 and p.global_requests == 3 * n // 32
    assert p.sectors_per_request == 4 and p.dram_bytes == 12 * n
    assert p.global_wavefronts == p.global_requests  # one 128-byte line per request


def test_ragged_vector_add_has_partial_warps(rng):
    n = 1000  # 31 full warps and one of 8 lanes
    p, _ = _counted(launch.vector_add, _f32(rng, n), _f32(rng, n))
    assert p.global_loads == 2 * n and p.global_requests == 3 * 32
    assert p.sectors == 3 * (31 * 4 + 1)


def test_float4_issues_a_quarter_of_the_instructions_for_the_same_bytes(rng):
    n = 4096
    a, b = _f32(rng, n), _f32(rng, n)
    scalar, _ = _counted(launch.vector_add, a, b)
    vector, _ = _counted(launch.vector_add_float4, a, b)
    assert vector.global_loads * 4 == scalar.global_loads
    assert vector.global_stores * 4 == scalar.global_stores
    assert vector.global_load_bytes == scalar.global_load_bytes == 8 * n
    assert vector.sectors == scalar.sectors  # same bytes, same sectors
    assert vector.global_requests * 4 == scalar.global_requests


@pytest.mark.parametrize("stride", [1, 2, 4, 8, 32])
def test_strided_copy_sectors_match_the_paper_count(stride, rng):
    n = 1024
    p, y = _counted(launch.copy_strided, _f32(rng, n * stride), stride)
    requests = p.total("global_load_requests")
    assert requests == n // 32 and y.size == n
    assert p.load_sectors == requests * sectors_touched(warp_addresses(stride))
    assert p.store_sectors == n // 8  # the writes stay coalesced


def test_stride_32_touches_eight_times_the_sectors_of_stride_1(rng):
    n = 2048
    unit, _ = _counted(launch.copy_strided, _f32(rng, n), 1)
    wide, _ = _counted(launch.copy_strided, _f32(rng, 32 * n), 32)
    assert unit.global_load_bytes == wide.global_load_bytes  # the same useful bytes
    assert wide.load_sectors == 8 * unit.load_sectors
    assert wide.dram_bytes > 4 * unit.dram_bytes
    assert wide.predicted_seconds("A100") > 4 * unit.predicted_seconds("A100")


def test_grid_stride_loop_does_the_same_work_with_any_grid(rng):
    x = _f32(rng, 8192)
    one, _ = _counted(launch.copy_strided, x, 1, grid=1)
    many, _ = _counted(launch.copy_strided, x, 1)
    assert one.global_loads == many.global_loads == x.size
    assert one.sectors == many.sectors


def test_transpose_bank_conflicts_vanish_with_padding(rng):
    x = _f32(rng, 64, 96)
    naive, _ = _counted(launch.transpose, x, variant="naive")
    shared, _ = _counted(launch.transpose, x, variant="shared")
    padded, _ = _counted(launch.transpose, x, variant="padded")
    column_reads = x.size // 32  # warp-level reads of a tile column
    assert shared.bank_conflicts == 31 * column_reads  # 32 lanes, one bank
    assert padded.bank_conflicts == 0 and naive.bank_conflicts == naive.shared_requests == 0
    assert shared.shared_requests == padded.shared_requests == 2 * column_reads
    # the naive transpose writes columns: a sector per lane
    assert naive.store_sectors == 8 * padded.store_sectors
    assert naive.load_sectors == padded.load_sectors


def test_shuffle_reduction_replaces_shared_memory_and_barriers(rng):
    x = _f32(rng, 256 * 64)
    tree, _ = _counted(launch.reduce_sum, x, variant="tree", block=256)
    shuffle, _ = _counted(launch.reduce_sum, x, variant="shuffle", block=256)
    blocks = x.size // 256 + 1  # 64 blocks, then one block adds their partials
    assert tree.barriers == blocks * (1 + 8 + 1)  # store, log2(256) steps, read the total
    assert shuffle.barriers == blocks
    assert shuffle.warp_syncs == blocks * 256 * 5 + blocks * 32 * 5  # 5 shuffles per warp sum
    assert shuffle.shared_stores == blocks * 8 and tree.shared_stores > 10 * shuffle.shared_stores
    assert tree.global_loads == shuffle.global_loads == x.size + 64


def test_bank_conflict_model_on_small_patterns():
    k = emulator.compile_module(r"""
extern "C" __global__ void k(float* out, int stride) {
    __shared__ float s[32 * 33];
    __shared__ double d[64];
    s[threadIdx.x * stride] = 1.0f;   // stride 2: two lanes per bank, 2 wavefronts
    d[threadIdx.x] = 2.0;             // 8-byte words: two phases of 16 lanes, no conflict
    out[threadIdx.x] = s[0] + (float)d[threadIdx.x ^ 1];  // s[0]: one word, a broadcast
}""", "banks.cu").get_function("k")
    out = np.zeros(32, np.float32)
    counted = {}
    for stride in (1, 2, 32, 33):
        with profile() as p:
            k((1,), (32,), (out, np.int32(stride)))
        counted[stride] = p.bank_conflicts
        assert p.shared_requests == 4 and p.shared_stores == p.shared_loads == 64
    assert counted == {1: 0, 2: 1, 32: 31, 33: 0}


def test_requests_are_per_warp_in_two_dimensional_blocks(rng):
    # matmul_naive's 16 x 16 block: a warp is two rows of 16 threads, so each of its B loads
    # reads 16 floats (64 bytes, 2 sectors) and its A loads 2 floats (2 sectors).
    m = n = k = 32
    p, _ = _counted(launch.matmul_naive, _f32(rng, m, k), _f32(rng, k, n))
    warps = m * n // 32
    assert p.total("global_load_requests") == 2 * warps * k
    assert p.load_sectors == warps * k * (2 + 2)


def test_counting_is_off_outside_profile(rng):
    a = _f32(rng, 64)
    launch.vector_add(a, a, **EMU)  # runs the plain build: nothing recorded anywhere
    module = emulator.load_module("vector_add.cu")
    assert b"clemu_count_begin" not in module.build().library.read_bytes()  # no counting code
    assert b"clemu_count_begin" in module.build(counting=True).library.read_bytes()
    assert not profiling.counting()
    with profile() as p:
        assert profiling.counting()
    assert p.launches == [] and p.global_loads == 0 and p.sectors_per_request == 0


def test_nested_profiles_see_each_launch_once(rng):
    a = _f32(rng, 16, 16)
    with profile() as outer:
        launch.matmul_naive(a, a, **EMU)
        with profile() as inner:
            launch.matmul_naive(a, a, **EMU)
    assert len(outer.launches) == 2 and len(inner.launches) == 1
    assert inner.flops == 2 * 16**3 and outer.flops == 2 * inner.flops
    assert outer.global_loads == 2 * inner.global_loads


def test_counted_results_equal_plain_results(rng):
    a, b = _f32(rng, 33, 47), _f32(rng, 47, 29)
    plain = launch.matmul_register_tiled(a, b, **EMU)
    p, counted = _counted(launch.matmul_register_tiled, a, b)
    assert np.array_equal(plain, counted) and len(p.launches) == 1
    assert "matmul_register_tiled" in repr(p)


def test_roofline_bounds_name_their_roof(rng):
    n = 1 << 14
    p, _ = _counted(launch.vector_add, _f32(rng, n), _f32(rng, n))
    a100 = gpus.GPUS["A100"]
    assert p.bound("A100") == "DRAM"
    assert p.predicted_seconds(a100) == pytest.approx(12 * n / 1555e9)
    blocks = n // 256  # 64 blocks for 108 SMs: 64 SMs' arithmetic
    assert p.roofs("A100")["compute"] == pytest.approx(n / (19.5e12 * blocks / 108))
    m = 64
    q, _ = _counted(launch.matmul_register_tiled, _f32(rng, m, m), _f32(rng, m, m))
    roofs = q.roofs("T4")
    assert q.predicted_seconds("T4") == max(roofs.values())
    assert q.bound("T4") == max(roofs, key=roofs.get)
    with pytest.raises(ParameterError, match="A100"):
        q.bound("V100")


def test_ladder_of_matmuls_shrinks_the_on_chip_traffic(rng):
    a, b = _f32(rng, 64, 64), _f32(rng, 64, 64)
    one_sm = replace(gpus.GPUS["A100"], sms=1)  # every grid fills it: only traffic counts
    times = [
        _counted(kernel, a, b)[0].roofs(one_sm)["L1/shared"]
        for kernel in (launch.matmul_naive, launch.matmul_tiled, launch.matmul_register_tiled)
    ]
    assert times[0] > times[1] > 2 * times[2]


def test_a_grid_smaller_than_the_gpu_uses_only_its_blocks_sms(rng):
    a = _f32(rng, 64, 64)  # matmul_register_tiled: one 128 x 128 block
    p, _ = _counted(launch.matmul_register_tiled, a, a)
    a100 = gpus.GPUS["A100"]
    roofs, alone = p.roofs(a100), p.roofs(replace(a100, sms=1))
    assert roofs["compute"] == pytest.approx(a100.sms * alone["compute"])
    assert roofs["L1/shared"] == pytest.approx(alone["L1/shared"])  # one SM's L1 either way
    assert roofs["DRAM"] == alone["DRAM"]  # DRAM is shared by all SMs


def test_occupancy_limits():
    assert gpus.occupancy("A100", 256, 32) == gpus.Occupancy(8, 64, 1.0, "threads")
    limited = gpus.occupancy("A100", 256, 128)  # 128 registers x 256 threads = half the file
    assert (limited.blocks_per_sm, limited.limit) == (2, "registers")
    shared = gpus.occupancy("T4", 128, 32, shared_bytes=48 * 1024)
    assert (shared.blocks_per_sm, shared.limit, shared.fraction) == (1, "shared memory", 0.125)
    assert gpus.occupancy("H100", 32, 16).limit == "blocks"
    assert gpus.occupancy("T4", 32, 16).blocks_per_sm == 16  # no shared memory, none reserved
    with pytest.raises(ParameterError, match="1024"):
        gpus.occupancy("A100", 2048, 32)


def test_gpu_table_is_consistent():
    for gpu in gpus.GPUS.values():
        # the FP32 peak is SMs x FP32 lanes x 2 x clock: 64 lanes per SM on A100 and T4,
        # 128 on H100 and Ada
        lanes = gpu.fp32_tflops * 1e12 / (2 * gpu.sms * gpu.clock_ghz * 1e9)
        assert min(abs(lanes - 64), abs(lanes - 128)) < 1.5, gpu.name
        assert gpu.ridge_flop_per_byte > 1
    assert "A100" in repr(gpus.SpecTable())


def test_scaled_counts_equal_a_larger_problems_counts(rng):
    """Every block of a whole-block problem does the same: 4x the blocks, 4x every count."""
    n = 4 * 256
    small, _ = _counted(launch.vector_add, _f32(rng, n), _f32(rng, n))
    large, _ = _counted(launch.vector_add, _f32(rng, 4 * n), _f32(rng, 4 * n))
    scaled = small.scaled(4)
    assert [x.counters for x in scaled.launches] == [x.counters for x in large.launches]
    assert scaled.flops == large.flops and scaled.launches[0].grid == large.launches[0].grid
    assert scaled.predicted_seconds("H100") == pytest.approx(large.predicted_seconds("H100"))


ROWS, COLS = 8, 256
_W, _G = np.linspace(-1, 1, COLS, dtype=np.float32), np.linspace(-2, 2, ROWS * COLS,
                                                                   dtype=np.float32)  # fmt: skip
# kernel: (the call on x, its reference, the arrays read beside x in float4, floats read one
# at a time per row)
ROW_KERNELS = {
    "softmax": (lambda x: launch.softmax(x, block=32, **EMU), reference.softmax, 0, 0),
    "causal_softmax": (lambda x: launch.causal_softmax(x[None], 0.5, block=32, **EMU)[0],
                       lambda x: reference.causal_softmax(x[None], 0.5)[0], 0, 0),
    "softmax_grad": (lambda x: launch.softmax_grad(_G.reshape(x.shape), x, 0.5, block=32, **EMU),
                     lambda x: reference.softmax_grad(_G.reshape(x.shape), x, 0.5), 1, 0),
    "rms_norm": (lambda x: launch.rms_norm(x, _W, block=32, **EMU),
                 lambda x: reference.rms_norm(x, _W), 1, 0),
    "rms_norm_grad_x": (lambda x: launch.rms_norm_grad_x(_G.reshape(x.shape), x, _W, block=32,
                                                         **EMU),
                        lambda x: reference.rms_norm_grad_x(_G.reshape(x.shape), x, _W), 1, COLS),
}  # fmt: skip


@pytest.mark.parametrize("kernel", list(ROW_KERNELS))
def test_row_kernels_load_float4_when_the_row_allows(kernel, rng):
    """Rows of a multiple of 4 floats on 16-byte boundaries take float4 loads and stores: a
    quarter of the instructions, the same bytes and results; a misaligned view (one float
    into its buffer) takes single floats."""
    run, expected, others, singles = ROW_KERNELS[kernel]
    buffer = _f32(rng, ROWS * COLS + 1)
    aligned = buffer[: ROWS * COLS].reshape(ROWS, COLS)
    shifted = buffer[1:].reshape(ROWS, COLS)  # starts 4 bytes past a 16-byte boundary
    counts = {}
    for name, x in (("aligned", aligned), ("shifted", shifted)):
        with profile() as counts[name]:
            y = run(x)
        np.testing.assert_allclose(y, expected(x), rtol=1e-5, atol=1e-6)
    vector, scalar = counts["aligned"], counts["shifted"]
    matrix = ROWS * COLS
    loaded = 4 * (matrix * (1 + others) + singles * ROWS)
    assert scalar.global_load_bytes == vector.global_load_bytes == loaded
    assert vector.global_loads == (1 + others) * matrix // 4 + singles * ROWS
    assert scalar.global_loads == (1 + others) * matrix + singles * ROWS
    assert vector.global_stores * 4 == scalar.global_stores == matrix
