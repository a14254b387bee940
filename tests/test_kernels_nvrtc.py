"""Every kernel compiles with NVRTC for sm_80 (A100) and sm_90 (H100), without a GPU."""

import os
import re

import pytest

from course_lib.kernels import FusedElementwise, kernel_files, kernel_names, nvrtc, read_source
from course_lib.kernels.errors import KernelCompileError

# In CI (CI=true) the test extra must have installed NVRTC: fail there rather than skip.
pytestmark = pytest.mark.skipif(
    not nvrtc.nvrtc_available() and not os.environ.get("CI"),
    reason="NVRTC missing: the test extra installs cupy-cuda12x and nvidia-cuda-nvrtc-cu12",
)


@pytest.mark.parametrize("arch", ["compute_80", *nvrtc.ARCHITECTURES])
@pytest.mark.parametrize("filename", kernel_files())
def test_every_kernel_compiles(filename, arch):
    compiled = nvrtc.compile_file(filename, arch)
    names = kernel_names(read_source(filename))
    assert names, f"{filename} defines no kernel"
    target = arch.split("_")[1]
    assert re.search(rf"^\.target sm_{target}\b", compiled.ptx, re.MULTILINE)
    for name in names:
        assert re.search(rf"\.entry {name}\(", compiled.ptx), f"{name} missing from the PTX"
    if arch.startswith("sm_"):
        assert compiled.cubin and compiled.cubin[:4] == b"\x7fELF"
        assert set(compiled.resources) == set(names)
        for usage in compiled.resources.values():
            assert 0 < usage.registers <= 255 and usage.spill_bytes == 0


def test_tiled_matmul_reports_its_shared_tiles():
    usage = nvrtc.compile_file("matmul_tiled.cu", "sm_80").resources["matmul_tiled"]
    assert usage.shared_bytes == 2 * 16 * 16 * 4  # two 16 x 16 float tiles


def test_generated_fused_kernels_compile():
    spec = FusedElementwise(
        "fused_gelu_tanh",
        inputs=("x", "bias"),
        temporaries=(("h", "x + bias"),),
        outputs=(
            ("y", "0.5f * h * (1.0f + tanhf(0.7978845608f * (h + 0.044715f * h * h * h)))"),
            ("z", "fmaxf(h, 0.0f)"),
        ),
    )
    compiled = nvrtc.compile_source(spec.source, "fused_gelu_tanh.cu", "sm_90")
    assert set(compiled.resources) == {"fused_gelu_tanh"}


def test_compile_errors_name_file_and_line():
    source = 'extern "C" __global__ void k(float* x) {\n    x[0] = undefined_name;\n}\n'
    with pytest.raises(KernelCompileError, match=r"broken\.cu\(2\): error: identifier"):
        nvrtc.compile_source(source, "broken.cu", "sm_80")


def test_errors_in_headers_point_into_the_header(tmp_path):
    (tmp_path / "helper.cuh").write_text("__device__ float twice(float x) { return 2 * y; }\n")
    from course_lib.kernels.sources import expand_includes

    text = expand_includes(
        '#include "helper.cuh"\nextern "C" __global__ void k(float* x) { x[0] = twice(x[0]); }',
        "main.cu",
        tmp_path,
    )
    with pytest.raises(KernelCompileError, match=r"helper\.cuh\(1\)"):
        nvrtc.compile_source(text, "main.cu", "compute_80")


def test_bad_architecture_name():
    with pytest.raises(KernelCompileError, match="sm_80"):
        nvrtc.compile_source('extern "C" __global__ void k() {}', "k.cu", "ampere")


def test_parse_resources():
    log = (
        "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
        "ptxas info    : Function properties for k\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]\n"
    )
    usage = nvrtc.parse_resources(log)["k"]
    assert (usage.registers, usage.shared_bytes, usage.stack_bytes, usage.spill_bytes) == (
        40,
        2048,
        16,
        8,
    )


def test_new_kernels_report_their_shared_memory_and_keep_registers_off_the_stack():
    transpose = nvrtc.compile_file("transpose.cu", "sm_80").resources
    assert transpose["transpose_shared"].shared_bytes == 32 * 32 * 4
    assert transpose["transpose_padded"].shared_bytes == 32 * 33 * 4  # one padding column
    tiled = nvrtc.compile_file("matmul_register_tiled.cu", "sm_90").resources
    usage = tiled["matmul_register_tiled"]
    # an 8 x (128 + 4) tile of A (transposed, padded) and an 8 x 128 tile of B
    assert usage.shared_bytes == (8 * 132 + 8 * 128) * 4
    assert usage.stack_bytes == 0  # the 8 x 8 accumulators live in registers, not local memory
    reduce = nvrtc.compile_file("reduce.cu", "sm_80").resources
    assert reduce["reduce_sum_shuffle"].shared_bytes == 32 * 4  # one float per warp
