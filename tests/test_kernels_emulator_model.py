"""The emulator's execution model: indexing, barriers, shared memory, atomics, errors, cache."""

import os

import numpy as np
import pytest

from course_lib.kernels import emulator, native
from course_lib.kernels.errors import (
    KernelCompileError,
    KernelLaunchError,
    UnsupportedConstructError,
)

pytestmark = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)


def _kernel(source: str, name: str = "k"):
    return emulator.compile_module(source, f"{name}.cu").get_function(name)


def test_every_thread_of_a_3d_launch_runs_once_with_its_indices():
    k = _kernel(r"""
extern "C" __global__ void k(int* out) {
    int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    int size = blockDim.x * blockDim.y * blockDim.z;
    out[block * size + thread] += block * 1000 + thread;
}""")
    grid, block = (3, 2, 2), (4, 3, 2)
    out = np.zeros(12 * 24, dtype=np.int32)
    k(grid, block, (out,))
    blocks, threads = np.divmod(np.arange(out.size), 24)
    assert np.array_equal(out, blocks * 1000 + threads)


def test_barriers_order_shared_memory_across_many_threads():
    # Reverse each block's slice through shared memory, twice round a loop: without the
    # barriers a thread would read slots that others have not written yet.
    k = _kernel(r"""
extern "C" __global__ void k(const float* x, float* y, int n) {
    __shared__ float buffer[1024];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float value = i < n ? x[i] : 0.0f;
    for (int round = 0; round < 2; ++round) {
        buffer[threadIdx.x] = value;
        __syncthreads();
        value = buffer[blockDim.x - 1 - threadIdx.x] + 1.0f;
        __syncthreads();
    }
    if (i < n) y[i] = value;
}""")
    x = np.arange(2048, dtype=np.float32)
    y = np.empty_like(x)
    k((2,), (1024,), (x, y, np.int32(x.size)))
    assert np.array_equal(y, x + 2)


def test_static_shared_values_written_by_others_are_seen_after_a_barrier():
    # Thread 0 must not reuse the value it stored itself: thread 1 overwrote it in between.
    k = _kernel(r"""
extern "C" __global__ void k(int* out) {
    __shared__ int s;
    if (threadIdx.x == 0) s = 1;
    __syncthreads();
    if (threadIdx.x == 1) s = 2;
    __syncthreads();
    out[threadIdx.x] = s;
}""")
    out = np.zeros(4, dtype=np.int32)
    k((1,), (4,), (out,))
    assert np.array_equal(out, [2, 2, 2, 2])


def test_dynamic_shared_memory_starts_as_nan_and_is_per_launch():
    k = _kernel(r"""
extern "C" __global__ void k(float* out) {
    extern __shared__ float scratch[];
    out[threadIdx.x] = scratch[threadIdx.x];  // read before any write
}""")
    out = np.zeros(8, dtype=np.float32)
    k((1,), (8,), (out,), shared_mem=32)
    assert np.isnan(out).all()


def test_atomic_add_builds_a_histogram(rng):
    k = _kernel(r"""
extern "C" __global__ void k(const int* values, int* counts, float* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&counts[values[i]], 1);
        atomicAdd(total, 1.0f);
    }
}""")
    values = rng.integers(0, 10, 1000).astype(np.int32)
    counts, total = np.zeros(10, np.int32), np.zeros(1, np.float32)
    k((8,), (128,), (values, counts, total, np.int32(values.size)))
    assert np.array_equal(counts, np.bincount(values, minlength=10)) and total[0] == 1000


def test_signature_and_argument_checks():
    k = _kernel(r"""
extern "C" __global__ void k(float* x, const double* y, int n, float a, long long b) {}""")
    assert k.param_types == ("float32*", "float64*", "int32", "float32", "int64")
    x, y = np.zeros(4, np.float32), np.zeros(4)
    k(1, 1, (x, y, np.int32(1), np.float32(2), 3))  # a Python int is CuPy's int64
    for bad, message in [
        ((x, y, 1, np.float32(2), 3), "numpy.int32"),
        ((x, y, np.int32(1), 2.0, 3), "numpy.float32"),
        ((x, y, np.int32(1), np.float64(2), 3), "numpy.float32"),
        ((y, y, np.int32(1), np.float32(2), 3), "float32 array"),
        ((x[::2], y, np.int32(1), np.float32(2), 3), "strided"),
        ((list(x), y, np.int32(1), np.float32(2), 3), "NumPy arrays"),
        ((x, y), "takes 5 arguments"),
    ]:
        with pytest.raises(KernelLaunchError, match=message):
            k(1, 1, bad)


@pytest.mark.parametrize(
    "grid, block, shared, message",
    [
        ((1,), (2048,), 0, "at most 1024"),
        ((1,), (1, 1, 128), 0, "64 along z"),
        ((0,), (32,), 0, "positive"),
        ((1, 1, 1, 1), (32,), 0, "1 to 3"),
        ((1,), (32,), 64 * 1024, "dynamic shared memory"),
    ],
)
def test_launch_configuration_is_checked(grid, block, shared, message):
    k = _kernel(r'extern "C" __global__ void k(float* x) {}')
    with pytest.raises(KernelLaunchError, match=message):
        k(grid, block, (np.zeros(1, np.float32),), shared_mem=shared)


def test_barrier_misuse_is_reported():
    early = _kernel(r"""
extern "C" __global__ void k(float* x) {
    if (threadIdx.x == 3) return;
    __syncthreads();
}""")
    with pytest.raises(KernelLaunchError, match=r"thread \(3, 0, 0\) returned"):
        early((1,), (8,), (np.zeros(1, np.float32),))
    divergent = _kernel(r"""
extern "C" __global__ void k(float* x) {
    if (threadIdx.x < 4) {
        __syncthreads();
    } else {
        __syncthreads();
    }
}""")
    with pytest.raises(KernelLaunchError, match="line 4, thread .* at line 6"):
        divergent((1,), (8,), (np.zeros(1, np.float32),))


def test_memory_faults_become_errors():
    k = _kernel(r"""
extern "C" __global__ void k(float* x) { x[(long long)threadIdx.x << 40] = 1.0f; }""")
    with pytest.raises(KernelLaunchError, match="illegal memory access"):
        k((1,), (4,), (np.zeros(1, np.float32),))
    k((1,), (1,), (np.zeros(1, np.float32),))  # the process is fine afterwards


@pytest.mark.parametrize(
    "body, message",
    [
        ("float v = __shfl_down(x[0], 1);", "without a mask"),
        ("unsigned b = __ballot_sync(0xffffffff, x[0] > 0);", "warp votes"),
        ('asm volatile("membar.gl;");', "inline PTX"),
        ("int c = __syncthreads_count(x[0] > 0);", "barrier reductions"),
        ("__half h;", "16-bit"),
    ],
)
def test_unsupported_constructs_name_file_and_line(body, message):
    source = f'extern "C" __global__ void k(float* x) {{\n    {body}\n}}'
    with pytest.raises(UnsupportedConstructError, match=rf"bad\.cu:2: .*{message}"):
        emulator.compile_module(source, "bad.cu")


@pytest.mark.parametrize(
    "source, message",
    [
        ('#include <cstdio>\nextern "C" __global__ void k() {}', "system headers"),
        ("__global__ void k() {}", 'extern "C"'),
        ("template <int N> __global__ void k() {}", "templates"),
        ('extern __shared__ float s[];\nextern "C" __global__ void k() {}', "inside the kernel"),
        ("__device__ float twice(float x) { return 2 * x; }", "no kernel"),
    ],
)
def test_unsupported_declarations(source, message):
    with pytest.raises(UnsupportedConstructError, match=message):
        emulator.compile_module(source, "bad.cu")


def test_comments_do_not_trip_the_checks():
    k = _kernel(r"""
// __shfl_down(x, 1) is not used here; /* nor asm */
extern "C" __global__ void k(float* x) { x[0] = 1.0f; }  // __syncthreads()""")
    assert not k.uses_barriers


def test_compile_errors_name_file_and_line():
    with pytest.raises(KernelCompileError, match=r"broken\.cu:3:"):
        emulator.compile_module(
            'extern "C" __global__ void k(float* x) {\n\n    x[0] = ;\n}', "broken.cu"
        )


def test_unknown_kernel_name():
    module = emulator.compile_module(r'extern "C" __global__ void k(float* x) {}', "one.cu")
    with pytest.raises(KernelLaunchError, match="defines k"):
        module.get_function("other")


def test_libraries_are_cached_by_source_hash(tmp_path, monkeypatch):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    source = r'extern "C" __global__ void k(float* x) { x[0] = 42.0f; }  // cache test'
    unit, names, barriers = emulator.translate(source, "cached.cu")
    assert names == ["k"] and not barriers
    first = native.build_library(unit, "cached.cu")
    assert first.parent == tmp_path and first.exists()
    stamp = first.stat().st_mtime_ns
    assert native.build_library(unit, "cached.cu") == first  # no rebuild
    assert first.stat().st_mtime_ns == stamp
    other, _, _ = emulator.translate(source.replace("42", "43"), "cached.cu")
    assert native.build_library(other, "cached.cu") != first


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(native.COMPILER_ENV, "no-such-compiler-xyz")
    assert not emulator.emulator_available()
    with pytest.raises(KernelCompileError, match="g\\+\\+"):
        native.build_library("int x;", "x.cu")


SHUFFLES = r"""
extern "C" __global__ void k(const int* x, int* out, int delta) {
    int t = threadIdx.x, v = x[t];
    out[0 * blockDim.x + t] = __shfl_down_sync(0xffffffff, v, delta);
    out[1 * blockDim.x + t] = __shfl_up_sync(0xffffffff, v, delta);
    out[2 * blockDim.x + t] = __shfl_xor_sync(0xffffffff, v, delta);
    out[3 * blockDim.x + t] = __shfl_sync(0xffffffff, v, delta);
    out[4 * blockDim.x + t] = __shfl_down_sync(0xffffffff, v, delta, 8);
    __syncwarp();
    out[5 * blockDim.x + t] = __shfl_xor_sync(0xffffffff, v, delta, 8);
}"""


def _expected_shuffles(x: np.ndarray, delta: int) -> np.ndarray:
    """CUDA's shuffle rules, written out lane by lane for whole warps."""
    lane = np.arange(x.size) % 32
    warp = np.arange(x.size) - lane
    seg8 = lane & ~7

    def take(source):
        return x[warp + source]

    return np.concatenate([
        take(np.where(lane + delta < 32, lane + delta, lane)),
        take(np.where(lane >= delta, lane - delta, lane)),
        take(np.where((lane ^ delta) & ~31 > lane & ~31, lane, lane ^ delta)),
        take(np.full_like(lane, delta % 32)),
        take(np.where(lane % 8 + delta < 8, lane + delta, lane)),
        take(np.where((lane ^ delta) & ~7 > seg8, lane, lane ^ delta)),
    ])  # fmt: skip


@pytest.mark.parametrize("delta", [0, 1, 3, 8, 16, 31])
def test_warp_shuffles_follow_cuda_rules(delta, rng):
    k = _kernel(SHUFFLES)
    assert k.uses_barriers  # warp-level calls: the threads run as fibers
    x = rng.integers(-1000, 1000, 64).astype(np.int32)  # two warps
    out = np.zeros(6 * x.size, np.int32)
    k((1,), (64,), (x, out, np.int32(delta)))
    assert np.array_equal(out, _expected_shuffles(x, delta))


def test_shuffles_move_floats_and_doubles_bit_for_bit():
    k = _kernel(r"""
extern "C" __global__ void k(const float* x, const double* y, float* a, double* b) {
    a[threadIdx.x] = __shfl_xor_sync(0xffffffff, x[threadIdx.x], 1);
    b[threadIdx.x] = __shfl_xor_sync(0xffffffff, y[threadIdx.x], 1);
}""")
    x = np.array([np.nan, -0.0, np.inf, 1e-45] * 8, np.float32)
    y = np.array([np.nan, -0.0, -np.inf, 5e-324] * 8)
    a, b = np.zeros_like(x), np.zeros_like(y)
    k((1,), (32,), (x, y, a, b))
    swap = np.arange(32) ^ 1
    assert a.tobytes() == x[swap].tobytes() and b.tobytes() == y[swap].tobytes()


def test_half_warp_masks_and_barriers_mix():
    # Lanes 0-15 and 16-31 shuffle within their own half, then the block synchronises.
    k = _kernel(r"""
extern "C" __global__ void k(int* out) {
    __shared__ int total[2];
    int lane = threadIdx.x % 32;
    unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    int v = lane;
    for (int offset = 8; offset > 0; offset /= 2) v += __shfl_down_sync(mask, v, offset, 16);
    if (lane % 16 == 0) total[lane / 16] = v;
    __syncthreads();
    out[threadIdx.x] = total[0] * 1000 + total[1];
}""")
    out = np.zeros(32, np.int32)
    k((1,), (32,), (out,))
    assert (out == sum(range(16)) * 1000 + sum(range(16, 32))).all()


@pytest.mark.parametrize(
    "body, block, message",
    [
        ("if (threadIdx.x == 5) return; x[0] = __shfl_down_sync(0xffffffff, 1.0f, 1);", 32,
         "never get there"),
        ("x[0] = __shfl_down_sync(0xffffffff, 1.0f, 1);", 16, "a lane the block does not have"),
        ("x[0] = __shfl_sync(threadIdx.x == 0 ? 0xffffffffu : 0xfffffffeu, 1.0f, 1);", 32,
         "different masks"),
        ("x[0] = __shfl_down_sync(0x0000ffff, 1.0f, 1);", 32, "outside the mask"),
        ("x[0] = __shfl_sync(0xfffffffe, 1.0f, 0);", 32, "not in the mask"),
        ("x[0] = __shfl_sync(0x0000ffff, 1.0f, 20);", 32, "outside the mask"),
        ("if (threadIdx.x < 32) __syncwarp(); else __syncthreads();", 64, "returned while"),
    ],
)  # fmt: skip
def test_warp_call_misuse_is_reported(body, block, message):
    k = _kernel(f'extern "C" __global__ void k(float* x) {{\n    {body}\n}}')
    with pytest.raises(KernelLaunchError, match=message):
        k((1,), (block,), (np.zeros(1, np.float32),))
