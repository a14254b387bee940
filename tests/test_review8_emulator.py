"""Review 8 (from the exercise checkers' side): a kernel the CPU emulator compiles is one NVRTC
compiles, and the other way round, for CUDA's single-precision intrinsics and the C library's
constants. Before, ``__fmaf_rn`` and its kin did not compile in the emulator (a correct
07.scale_add was "does not compile" on a machine without a GPU), ``__powf``, ``__log2f`` and
``__sinf`` compiled and then failed to load, and ``INFINITY`` compiled here but not on a GPU."""

import os

import numpy as np
import pytest

from course_lib.kernels import emulator, nvrtc
from course_lib.kernels.errors import KernelCompileError

pytestmark = pytest.mark.skipif(  # CI has g++: fail there rather than skip
    not emulator.emulator_available() and not os.environ.get("CI"),
    reason="the CUDA emulator needs g++ on PATH",
)

FLOATS = r"""
extern "C" __global__ void floats(const float* a, const float* b, const float* c, float* out,
                                  int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    out[0 * n + i] = __fmaf_rn(a[i], b[i], c[i]);
    out[1 * n + i] = __fadd_rn(a[i], b[i]);
    out[2 * n + i] = __fsub_rn(a[i], b[i]);
    out[3 * n + i] = __fdiv_rn(a[i], b[i]);
    out[4 * n + i] = __frcp_rn(b[i]);
    out[5 * n + i] = __fsqrt_rn(fabsf(a[i]));
    out[6 * n + i] = __frsqrt_rn(fabsf(b[i]));
    out[7 * n + i] = __powf(fabsf(a[i]), 1.5f);
    out[8 * n + i] = __log2f(fabsf(a[i]));
    out[9 * n + i] = __sinf(a[i]);
    out[10 * n + i] = __cosf(a[i]);
}
"""

INTS = r"""
extern "C" __global__ void ints(const float* x, int* out, int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    out[0 * n + i] = __float2int_rn(x[i]);
    out[1 * n + i] = __float2int_rz(x[i]);
    out[2 * n + i] = __popc((unsigned int)i * 37u);
}
"""


def test_the_correctly_rounded_intrinsics_give_ieee_results():
    rng = np.random.default_rng(8)
    n = 32
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    # one FMA that rounds once: (1 + 2⁻¹²)² − (1 + 2⁻¹¹) is 2⁻²⁴, the rounded product gives 0
    a[0] = b[0] = np.float32(1 + 2.0**-12)
    c[0] = np.float32(-(1 + 2.0**-11))
    out = np.zeros(11 * n, np.float32)
    emulator.compile_module(FLOATS, "review8_floats.cu").get_function("floats")(
        (1,), (n,), (a, b, c, out, np.int32(n))
    )
    got = out.reshape(11, n)
    assert got[0, 0] == np.float32(2.0**-24) and a[0] * b[0] + c[0] == 0
    exact = np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    np.testing.assert_allclose(got[0], exact, rtol=1e-7, atol=0)
    for row, want in ((1, a + b), (2, a - b), (3, a / b), (4, np.float32(1) / b),
                      (5, np.sqrt(np.abs(a)))):  # fmt: skip
        np.testing.assert_array_equal(got[row], want)
    np.testing.assert_allclose(got[6], 1 / np.sqrt(np.abs(b).astype(np.float64)), rtol=1e-7)
    for row, want in ((7, np.abs(a) ** 1.5), (8, np.log2(np.abs(a))), (9, np.sin(a)),
                      (10, np.cos(a))):  # fmt: skip
        np.testing.assert_allclose(got[row], want, rtol=2e-6)


def test_float_to_int_rounds_ties_to_even_or_towards_zero_and_popc_counts_bits():
    x = np.array([2.5, 3.5, -2.5, 2.7, -2.7, 0.5, -0.5, 7.0], np.float32)
    out = np.zeros(3 * x.size, np.int32)
    emulator.compile_module(INTS, "review8_ints.cu").get_function("ints")(
        (1,), (x.size,), (x, out, np.int32(x.size))
    )
    rn, rz, popc = out.reshape(3, x.size)
    assert rn.tolist() == [2, 4, -2, 3, -3, 0, 0, 7]
    assert rz.tolist() == [2, 3, -2, 2, -2, 0, 0, 7]
    assert popc.tolist() == [bin(i * 37).count("1") for i in range(x.size)]


@pytest.mark.parametrize("name", ["INFINITY", "NAN", "FLT_MAX", "HUGE_VALF"])
def test_the_c_librarys_constants_do_not_compile_as_on_nvrtc(name):
    source = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = ' + name + "; }"
    with pytest.raises(KernelCompileError, match=f"review8_{name}.cu"):
        emulator.compile_module(source, f"review8_{name}.cu")
    if nvrtc.nvrtc_available():  # the GPU's compiler refuses the same kernel
        with pytest.raises(KernelCompileError, match=f'identifier "{name}" is undefined'):
            nvrtc.compile_source(source)


@pytest.mark.skipif(not nvrtc.nvrtc_available(), reason="NVRTC is not installed")
def test_nvrtc_compiles_the_intrinsics_the_emulator_runs():
    nvrtc.compile_source(FLOATS, "floats.cu")
    nvrtc.compile_source(INTS, "ints.cu")
