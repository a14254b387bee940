"""The emulator's shared memory is poisoned (0xFF bytes) before each block, as a GPU's holds
stale data: a word read before any thread wrote it gives NaN (float) or -1 (int), not 0."""

import os

import numpy as np
import pytest

from course_lib.kernels import emulator, profile

pytestmark = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)


def _kernel(source: str, name: str = "k"):
    return emulator.compile_module(source, f"{name}.cu").get_function(name)


STATIC_SHARED = r"""
extern "C" __global__ void k(float* read, int* counts) {
    __shared__ float values[32];
    __shared__ int count;
    float before = values[threadIdx.x];  // read before any write, in every block
    int count_before = count;
    __syncthreads();
    values[threadIdx.x] = 1.0f;          // what the block leaves behind for the next one
    if (threadIdx.x == 0) count = 7;
    read[blockIdx.x * blockDim.x + threadIdx.x] = before;
    if (threadIdx.x == 0) counts[blockIdx.x] = count_before;
}"""


@pytest.mark.parametrize("counted", [False, True])
def test_static_shared_memory_is_nan_before_every_block(counted):
    """Not 0 in the first block, and not the previous block's values in the next ones."""
    k = _kernel(STATIC_SHARED)
    read, counts = np.zeros(3 * 32, np.float32), np.zeros(3, np.int32)
    if counted:  # the counting build poisons it too, and counts no access for doing so
        with profile() as p:
            k((3,), (32,), (read, counts))
        assert (p.shared_loads, p.shared_stores) == (3 * 2 * 32, 3 * (32 + 1))
    else:
        k((3,), (32,), (read, counts))
    assert np.isnan(read).all()
    assert np.array_equal(counts, [-1, -1, -1])


def test_dynamic_shared_memory_is_nan_before_every_block():
    k = _kernel(r"""
extern "C" __global__ void k(float* read) {
    extern __shared__ float scratch[];
    float before = scratch[threadIdx.x];
    __syncthreads();
    scratch[threadIdx.x] = 2.0f;
    read[blockIdx.x * blockDim.x + threadIdx.x] = before;
}""")
    read = np.zeros(2 * 8, np.float32)
    k((2,), (8,), (read,), shared_mem=8 * 4)
    assert np.isnan(read).all()


def test_shared_memory_written_before_it_is_read_is_unchanged():
    k = _kernel(r"""
extern "C" __global__ void k(float* out) {
    __shared__ float tile[64];
    tile[threadIdx.x] = blockIdx.x + threadIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}""")
    out = np.zeros(4 * 64, np.float32)
    k((4,), (64,), (out,))
    want = np.arange(4)[:, None] + np.arange(64)[::-1][None, :]
    assert np.array_equal(out.reshape(4, 64), want)
