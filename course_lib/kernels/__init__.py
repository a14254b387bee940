"""CUDA kernels of course_lib, verified with or without a GPU.

The ``.cu`` files in this package are plain CUDA C. The same text is

- compiled by NVRTC for real GPU architectures (:mod:`.nvrtc`, no GPU needed),
- built with CuPy's ``RawModule`` and run on a GPU (:mod:`.gpu`),
- compiled with g++ behind a small prelude and run on the CPU (:mod:`.emulator`).

:mod:`.launch` calls each kernel like a NumPy function (grid and block chosen for you) and
:mod:`.reference` holds NumPy versions with the same signatures. :mod:`.fused` generates
fused elementwise kernels from a template; :mod:`.dispatch` lets ops use the kernels on a GPU.
"""

from __future__ import annotations

from . import analysis, dispatch, emulator, gpus, launch, nvrtc, profiling, reference
from .emulator import EmulatedKernel, EmulatedModule, compile_module, emulator_available
from .errors import KernelCompileError, KernelError, KernelLaunchError, UnsupportedConstructError
from .fused import FusedElementwise
from .gpus import GPUS, occupancy
from .launch import (
    attention,
    copy_strided,
    default_mode,
    fused,
    get_kernel,
    matmul_naive,
    matmul_register_tiled,
    matmul_tiled,
    reduce_sum,
    rmsnorm,
    rope,
    softmax,
    transpose,
    vector_add,
    vector_add_float4,
)
from .profiling import profile
from .sources import kernel_files, kernel_names, kernel_source, read_source


def describe_mode() -> str:
    """One line saying where kernels run: on the GPU, or in the CPU emulator."""
    if default_mode() == "gpu":
        return "kernels run on the GPU (CuPy RawModule, compiled by NVRTC)"
    if emulator_available():
        return "kernels run in the CPU emulator (no GPU: the same .cu source, compiled by g++)"
    return "kernels cannot run here: no GPU and no g++ for the CPU emulator"


__all__ = [
    "EmulatedKernel", "EmulatedModule", "FusedElementwise", "KernelCompileError", "KernelError",
    "KernelLaunchError", "UnsupportedConstructError", "analysis", "attention", "compile_module",
    "default_mode", "describe_mode", "dispatch", "emulator", "emulator_available", "fused",
    "get_kernel", "kernel_files", "kernel_names", "kernel_source", "launch", "matmul_naive",
    "matmul_tiled", "nvrtc", "read_source", "reference", "rmsnorm", "rope", "softmax",
    "vector_add", "vector_add_float4",
    "GPUS", "copy_strided", "gpus", "matmul_register_tiled", "occupancy", "profile",
    "profiling", "reduce_sum", "transpose",
]  # fmt: skip
