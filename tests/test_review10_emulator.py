"""Review 10 of the CPU emulator's counters and misuse checks, against hand counts from
NVIDIA's documented rules: a warp's global request touches 32-byte sectors and 128-byte lines;
shared memory has 32 banks of 4-byte words, the same word is broadcast, 8- and 16-byte
accesses are served in phases of 16 and 8 lanes; warps are formed from linear thread ids and
inactive lanes do not count.

Defects fixed: a ``__device__`` variable was counted as shared memory (it is global); two
different ``__syncthreads()`` on one line (or of one line number in a header and the kernel)
counted as one barrier, so a divergent pair passed; a lane at ``__syncwarp()`` paired with
lanes at a shuffle and gave them 0 instead of reporting the misuse."""

import os

import numpy as np
import pytest

from course_lib.kernels import emulator, profile
from course_lib.kernels.errors import KernelLaunchError

pytestmark = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)


def _kernel(source: str, name: str):
    return emulator.compile_module(source, f"review10_{name}.cu").get_function("k")


def _counted(kernel, grid, block, args, shared_mem=0) -> dict[str, int]:
    with profile() as p:
        kernel(grid, block, args, shared_mem=shared_mem)
    return p.launches[0].counters


def _threads(block):
    """(linear id, x, y) of each thread of a block, x fastest, as CUDA numbers lanes."""
    bx, by = block
    return [(x + bx * y, x, y) for y in range(by) for x in range(bx)]


def _global_oracle(requests):
    """Sectors and 128-byte lines of warp requests, each a list of (byte offset, bytes)."""
    sectors = lines = 0
    for lanes in requests:
        touched = {s for a, n in lanes for s in range(a // 32, (a + n - 1) // 32 + 1)}
        sectors += len(touched)
        lines += len({s // 4 for s in touched})
    return sectors, lines


def _shared_oracle(requests):
    """Wavefronts of warp requests, each a list of (lane, byte address, bytes)."""
    wavefronts = 0
    for lanes in requests:
        per_phase = 32 // max(1, lanes[0][2] // 4) if lanes[0][2] >= 4 else 32
        for phase in range(32 // per_phase):
            words = {w for lane, a, n in lanes if lane // per_phase == phase
                     for w in range(a // 4, (a + n - 1) // 4 + 1)}  # fmt: skip
            banks = [sum(1 for w in words if w % 32 == b) for b in range(32)]
            wavefronts += max(banks) if words else 0
    return wavefronts


def _warps(active, threads):
    """The active threads' entries grouped by warp (empty warps dropped)."""
    by_warp = {}
    for t, x, y in threads:
        if active(t, x, y):
            by_warp.setdefault(t // 32, []).append((t, x, y))
    return list(by_warp.values())


GLOBAL_CASES = {
    # name: (block, C guard, Python guard, C index, Python index), x[index] -> y[t]
    "partial-last-warp": ((64, 1), "t < 40", lambda t, x, y: t < 40, "t", lambda t, x, y: t),
    "2d-block-24x4": ((24, 4), "true", lambda t, x, y: True, "threadIdx.y * 64 + threadIdx.x",
                      lambda t, x, y: y * 64 + x),
    "row-offset-1": ((32, 1), "true", lambda t, x, y: True, "t + 1", lambda t, x, y: t + 1),
    "reversed": ((64, 1), "true", lambda t, x, y: True, "63 - t", lambda t, x, y: 63 - t),
    "stride-3": ((32, 1), "true", lambda t, x, y: True, "3 * t", lambda t, x, y: 3 * t),
    "stride-33": ((32, 1), "true", lambda t, x, y: True, "33 * t", lambda t, x, y: 33 * t),
    "divergent-every-third": ((64, 1), "t % 3 == 0", lambda t, x, y: t % 3 == 0, "5 * t",
                              lambda t, x, y: 5 * t),
}  # fmt: skip


@pytest.mark.parametrize("case", list(GLOBAL_CASES))
def test_global_requests_and_sectors_equal_the_hand_count(case):
    block, guard, active, index, where = GLOBAL_CASES[case]
    k = _kernel(r"""
extern "C" __global__ void k(const float* x, float* y) {
    int t = threadIdx.x + blockDim.x * threadIdx.y;
    if (GUARD) y[t] = x[INDEX];
}""".replace("GUARD", guard).replace("INDEX", index), f"global_{case.replace('-', '_')}")
    x, y = np.arange(4096, dtype=np.float32), np.zeros(256, np.float32)
    c = _counted(k, (1,), block, (x, y))
    warps = _warps(active, _threads(block))
    loads = _global_oracle([[(4 * where(*w), 4) for w in warp] for warp in warps])
    stores = _global_oracle([[(4 * w[0], 4) for w in warp] for warp in warps])
    active_threads = sum(map(len, warps))
    assert c["global_loads"] == c["global_stores"] == active_threads
    assert c["global_load_requests"] == c["global_store_requests"] == len(warps)
    assert (c["load_sectors"], c["store_sectors"]) == (loads[0], stores[0])
    assert c["global_wavefronts"] == loads[1] + stores[1]


def test_float4_loads_one_vector_off_alignment_touch_seventeen_sectors():
    k = _kernel(r"""
extern "C" __global__ void k(const float4* x, float4* y) { y[threadIdx.x] = x[threadIdx.x + 1]; }
""", "float4_offset")
    c = _counted(k, (1,), (32,), (np.zeros(4 * 64, np.float32), np.zeros(4 * 32, np.float32)))
    # bytes 16 .. 527: sectors 0 .. 16 and lines 0 .. 4; the store: 16 sectors in 4 lines
    assert c["global_load_requests"] == 1 and c["global_load_bytes"] == 32 * 16
    assert (c["load_sectors"], c["store_sectors"], c["global_wavefronts"]) == (17, 16, 5 + 4)


SHARED_CASES = {
    # name: (C type, bytes, C store index, Python store, C load index, Python load), lane t
    "broadcast-read": ("float", 4, "t", lambda t: t, "5", lambda t: 5),
    "two-lanes-write-one-word": ("float", 4, "t / 2", lambda t: t // 2, "t", lambda t: t),
    "stride-2": ("float", 4, "2 * t", lambda t: 2 * t, "t", lambda t: t),
    "stride-32": ("float", 4, "t", lambda t: t, "32 * t", lambda t: 32 * t),
    "stride-33": ("float", 4, "t", lambda t: t, "33 * t", lambda t: 33 * t),
    "bytes": ("unsigned char", 1, "t", lambda t: t, "4 * t", lambda t: 4 * t),
    "double": ("double", 8, "t", lambda t: t, "16 * t", lambda t: 16 * t),
    "float2-stride-2": ("float2", 8, "2 * t", lambda t: 2 * t, "t / 2", lambda t: t // 2),
    "float4-stride-8": ("float4", 16, "8 * t", lambda t: 8 * t, "t % 8", lambda t: t % 8),
    "float4-one-vector": ("float4", 16, "t", lambda t: t, "0", lambda t: 0),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHARED_CASES))
def test_shared_wavefronts_and_bank_conflicts_equal_the_hand_count(case):
    kind, size, store, store_py, load, load_py = SHARED_CASES[case]
    param = "float" if kind == "unsigned char" else kind
    k = _kernel(r"""
extern "C" __global__ void k(PARAM* y) {
    extern __shared__ float buffer[];
    KIND* s = (KIND*)buffer;
    int t = threadIdx.x;
    s[STORE] = y[t];
    __syncthreads();
    y[t] = s[LOAD];
}""".replace("PARAM", param).replace("KIND", kind).replace("STORE", store).replace("LOAD", load),
                f"shared_{case.replace('-', '_')}")  # fmt: skip
    y = np.zeros(64 * 4, np.float64 if kind == "double" else np.float32)
    c = _counted(k, (1,), (64,), (y,), shared_mem=16 * 1024)
    requests = [[(t % 32, size * where(t), size) for t in range(w, w + 32)]
                for where in (store_py, load_py) for w in (0, 32)]  # fmt: skip
    wavefronts = _shared_oracle(requests)
    assert c["shared_requests"] == 4 and c["shared_stores"] == c["shared_loads"] == 64
    assert c["shared_wavefronts"] == wavefronts
    assert c["bank_conflicts"] == wavefronts - 4 * max(1, size // 4)  # a phase's first is free


@pytest.mark.parametrize("pad, wavefronts", [(32, 4096 + 128), (33, 256)])
def test_transposes_column_reads_conflict_32_ways_unless_the_row_is_padded(pad, wavefronts):
    k = _kernel(r"""
extern "C" __global__ void k(const float* in, float* out, int n) {
    __shared__ float tile[32][PAD];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}""".replace("PAD", str(pad)), f"transpose_{pad}")
    n = 64
    a, b = np.arange(n * n, dtype=np.float32), np.zeros(n * n, np.float32)
    c = _counted(k, (2, 2), (32, 8), (a, b, np.int32(n)))
    assert np.array_equal(b.reshape(n, n), a.reshape(n, n).T)
    # 4 blocks x 8 warps x 4 steps: 128 row stores (1 wavefront each) and 128 column loads
    # (32 words in one bank with rows of 32 floats, 32 banks with rows of 33)
    assert c["shared_requests"] == 256 and c["shared_wavefronts"] == wavefronts
    assert c["bank_conflicts"] == wavefronts - 256
    assert c["load_sectors"] == c["store_sectors"] == 128 * 4


def test_device_variables_are_global_memory_not_shared():
    k = _kernel(r"""
__device__ __align__(128) float g[32];
extern "C" __global__ void k(const float* x, float* y) {
    int i = threadIdx.x;
    g[i] = x[i];
    __syncthreads();
    y[i] = g[31 - i];
}""", "device_variable")
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    c = _counted(k, (1,), (32,), (x, y))
    assert np.array_equal(y, x[::-1])
    assert c["shared_loads"] == c["shared_stores"] == c["shared_requests"] == 0
    assert c["global_load_requests"] == c["global_store_requests"] == 2
    assert c["load_sectors"] == c["store_sectors"] == 8  # 128 bytes: 4 sectors a request
    assert c["global_wavefronts"] == 4 and c["unique_sectors"] == 12


def test_two_barriers_on_one_line_in_divergent_branches_are_reported():
    k = _kernel(r"""
extern "C" __global__ void k(float* y) {
    if (threadIdx.x < 16) { y[threadIdx.x] = 1.0f; __syncthreads(); } else { __syncthreads(); }
}""", "barriers_one_line")
    with pytest.raises(KernelLaunchError, match=r"divergent __syncthreads\(\).*thread \(0, 0, 0\) "
                       r"waits at line 3, thread \(16, 0, 0\) at line 3 \(another"):  # fmt: skip
        k((1,), (32,), (np.zeros(32, np.float32),))


def test_one_barrier_reached_by_every_thread_through_a_loop_still_passes():
    k = _kernel(r"""
extern "C" __global__ void k(float* y) {
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    for (int half = 32; half > 0; half /= 2) {
        __syncthreads(); if (threadIdx.x < half) s[threadIdx.x] += s[threadIdx.x + half]; }
    __syncthreads();
    y[threadIdx.x] = s[0];
}""", "barrier_loop")
    y = np.zeros(64, np.float32)
    c = _counted(k, (1,), (64,), (y,))
    assert (y == sum(range(64))).all() and c["barriers"] == 7


def test_a_lane_at_syncwarp_does_not_pair_with_lanes_at_a_shuffle():
    k = _kernel(r"""
extern "C" __global__ void k(float* y) {
    float v = threadIdx.x + 1.0f;
    if (threadIdx.x < 16) __syncwarp(); else v = __shfl_sync(0xffffffffu, v, 3);
    y[threadIdx.x] = v;
}""", "syncwarp_shuffle")
    with pytest.raises(KernelLaunchError, match=r"line 4 .* __syncwarp\(\), another at a shuffle"):
        k((1,), (32,), (np.zeros(32, np.float32),))


def test_a_shuffle_with_a_half_warp_mask_counts_only_its_lanes():
    k = _kernel(r"""
extern "C" __global__ void k(const float* x, float* y) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16)
        for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(0x0000ffffu, v, offset);
    y[threadIdx.x] = v;
}""", "half_mask")
    x, y = np.arange(32, dtype=np.float32), np.zeros(32, np.float32)
    c = _counted(k, (1,), (32,), (x, y))
    assert (y[:16] == x[:16].sum()).all() and np.array_equal(y[16:], x[16:])
    assert c["warp_syncs"] == 16 * 4 and c["barriers"] == 0
