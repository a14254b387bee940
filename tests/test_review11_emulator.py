"""Review 11 of the CPU emulator (hostile inputs), against what a GPU does with the same
launch (NVIDIA's rules, and hand-worked results).

Defects fixed: an index one past the end of an array (or one before its start) passed
silently, reading the neighbouring host memory and writing over it; an array passed for two
parameters (an in-place ``k(const float* x, float* y)`` called with ``(a, a)``) got two copies,
so the kernel's writes were lost; a ``__shared__`` array declared in a template was not
poisoned (g++ leaves a template's statics out of their section), so it read as 0 in the first
block and as the previous block's values in the next."""

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
    return emulator.compile_module(source, f"review11_{name}.cu").get_function("k")


READ_AT = r"""
extern "C" __global__ void k(const float* x, float* y, int i) { y[0] = x[i]; }"""
WRITE_AT = r"""
extern "C" __global__ void k(float* y, int i) { y[i] = 5.0f; }"""


@pytest.mark.parametrize("n", [8, 1024])
def test_a_read_one_past_the_end_is_an_illegal_memory_access(n):
    x, y = np.arange(n, dtype=np.float32), np.zeros(1, np.float32)
    k = _kernel(READ_AT, "read_at")
    k((1,), (1,), (x, y, np.int32(n - 1)))
    assert y[0] == n - 1
    with pytest.raises(KernelLaunchError, match=r"kernel k: illegal memory access .* block \(0"):
        k((1,), (1,), (x, y, np.int32(n)))


def test_a_write_one_past_the_end_is_an_illegal_memory_access_and_changes_nothing():
    y = np.zeros(8, np.float32)
    with pytest.raises(KernelLaunchError, match="illegal memory access"):
        _kernel(WRITE_AT, "write_at")((1,), (1,), (y, np.int32(8)))


@pytest.mark.parametrize("n, index", [(8, -1), (6, 6), (6, 7), (5, -3)])
def test_a_write_just_outside_an_array_names_the_argument_and_the_index(n, index):
    """Where no guard page lies (before the start, or up to the next 16-byte boundary)."""
    y = np.zeros(n, np.float32)
    with pytest.raises(KernelLaunchError, match=rf"argument 0 \(float32\*, {n} elements\) at "
                                                rf"index {index}$"):  # fmt: skip
        _kernel(WRITE_AT, "write_at")((1,), (1,), (y, np.int32(index)))


@pytest.mark.parametrize("index", [-1, 6, 7])
def test_a_read_just_outside_an_array_gives_nan_not_a_neighbours_value(index):
    x, y = np.arange(6, dtype=np.float32), np.zeros(1, np.float32)
    _kernel(READ_AT, "read_at")((1,), (1,), (x, y, np.int32(index)))
    assert np.isnan(y[0])


def test_an_array_passed_for_a_const_and_an_output_parameter_is_one_array():
    k = _kernel(
        r"""
extern "C" __global__ void k(const float* x, float* y) {
    int i = threadIdx.x;
    y[i] = 2.0f * x[i];
    if (i == 0) y[4] = x[0];  // on a GPU, the value thread 0 just wrote
}""",
        "in_place",
    )
    a = np.arange(1, 6, dtype=np.float32)
    k((1,), (4,), (a, a))
    assert a.tolist() == [2, 4, 6, 8, 2]


def test_writes_through_two_parameters_to_one_array_are_all_kept():
    k = _kernel(
        r"""
extern "C" __global__ void k(float* p, float* q) { p[0] = 1.0f; q[1] = 2.0f; }""",
        "two_outputs",
    )
    a = np.zeros(4, np.float32)
    k((1,), (1,), (a, a))
    assert a.tolist() == [1, 2, 0, 0]
    b = np.zeros(5, np.float32)  # overlapping views: p[1] and q[0] are one element
    _kernel(r"""
extern "C" __global__ void k(float* p, float* q) { p[1] = 1.0f; q[1] = 2.0f; }""",
            "two_views")((1,), (1,), (b[:4], b[1:]))  # fmt: skip
    assert b.tolist() == [0, 1, 2, 0, 0]


def test_one_array_passed_twice_is_counted_as_one_array():
    k = _kernel(
        r"""
extern "C" __global__ void k(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x] + 1; }
""",
        "counted_in_place",
    )
    a = np.zeros(32, np.float32)
    with profile() as p:
        k((1,), (32,), (a, a))
    assert a.tolist() == [1] * 32
    c = p.launches[0].counters
    assert c["load_sectors"] == c["store_sectors"] == 4 and c["unique_sectors"] == 4


TEMPLATE_SHARED = r"""
template <int N> struct Row { float v[N]; };
template <int N>
__device__ void body(float* read, int* counts) {
    __shared__ float values[N], more[2][N];
    __shared__ Row<N> row;
    __shared__ int count;
    float before = values[threadIdx.x] + more[1][threadIdx.x] + row.v[threadIdx.x];
    int count_before = count;
    __syncthreads();
    values[threadIdx.x] = more[1][threadIdx.x] = row.v[threadIdx.x] = 1.0f;
    if (threadIdx.x == 0) count = 7;
    read[blockIdx.x * blockDim.x + threadIdx.x] = before;
    if (threadIdx.x == 0) counts[blockIdx.x] = count_before;
}
extern "C" __global__ void k(float* read, int* counts) { body<32>(read, counts); }"""


@pytest.mark.parametrize("counted", [False, True])
def test_shared_memory_declared_in_a_template_is_nan_before_every_block(counted):
    k = _kernel(TEMPLATE_SHARED, "template_shared")
    read, counts = np.zeros(3 * 32, np.float32), np.zeros(3, np.int32)
    if counted:  # poisoning counts no access
        with profile() as p:
            k((3,), (32,), (read, counts))
        assert (p.shared_loads, p.shared_stores) == (3 * 4 * 32, 3 * (3 * 32 + 1))
    else:
        k((3,), (32,), (read, counts))
    assert np.isnan(read).all()
    assert counts.tolist() == [-1, -1, -1]


def test_an_atomic_is_counted_as_the_docstring_says_a_load_and_a_store():
    k = _kernel(
        r"""
extern "C" __global__ void k(float* total, const float* x) { atomicAdd(total, x[threadIdx.x]); }
""",
        "atomic",
    )
    total = np.zeros(1, np.float32)
    with profile() as p:
        k((1,), (64,), (total, np.ones(64, np.float32)))
    assert total[0] == 64
    c = p.launches[0].counters
    # x: 64 loads in 2 requests of 4 sectors; the atomic: 64 loads and 64 stores of one sector
    assert (c["global_loads"], c["global_stores"]) == (128, 64)
    assert (c["global_load_requests"], c["global_store_requests"]) == (4, 2)
    assert (c["load_sectors"], c["store_sectors"]) == (2 * 4 + 2, 2)
    assert "l1tex__t_requests_pipe_lsu_mem_global_op_atom" in emulator.__doc__
