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
