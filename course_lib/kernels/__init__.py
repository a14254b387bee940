"""CUDA kernels of course_lib, verified with or without a GPU.

The ``.cu`` files in this package are plain CUDA C. The same text is

- compiled by NVRTC for real GPU architectures (:mod:`.nvrtc`, no GPU needed),
- built with CuPy's ``RawModule`` and run on a GPU (:mod:`.gpu`),
- compiled with g++ behind a small prelude and run on the CPU (:mod:`.emulator`).

:mod:`.launch` calls each kernel like a NumPy function (grid and block chosen for you) and
:mod:`.reference` holds NumPy versions with the same signatures. :mod:`.fused_template`
generates fused elementwise kernels from a template (``fused`` launches one);
:mod:`.dispatch` lets ops use the kernels on a GPU; :mod:`.profiling` counts the memory
traffic of emulated launches (``profile()``) and bounds their time on named GPUs
(:mod:`.gpus`).

Importing this package loads no compiler, emulator or CuPy code: the names below that need
them (the launchers, the emulator, NVRTC, the GPU side) are loaded the first time they are
used (a module ``__getattr__``), so ``import course_lib`` stays light.
"""

from __future__ import annotations

import importlib

from .errors import KernelCompileError, KernelError, KernelLaunchError, UnsupportedConstructError
from .fused_template import FusedElementwise
from .sources import kernel_files, kernel_names, kernel_source, read_source

#: Loaded on first use: submodules (None) and the names they export (their module).
_LAZY: dict[str, str | None] = {
    **dict.fromkeys(
        ("analysis", "dispatch", "emulator", "gpu", "gpus", "launch", "measured", "native",
         "nvrtc", "profiling", "reference")
    ),  # fmt: skip
    **dict.fromkeys(("GPUS", "occupancy"), "gpus"),
    "profile": "profiling",
    **dict.fromkeys(
        ("EmulatedKernel", "EmulatedModule", "compile_module", "emulator_available"), "emulator"
    ),
    **dict.fromkeys(
        ("array_module", "attention", "copy_strided", "default_mode", "fused", "get_kernel",
         "matmul_naive", "matmul_register_tiled", "matmul_tiled", "reduce_sum", "rms_norm", "rope",
         "softmax", "transpose", "vector_add", "vector_add_float4"),
        "launch",
    ),  # fmt: skip
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_LAZY[name] or name}", __name__)
    value = module if _LAZY[name] is None else getattr(module, name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


def describe_mode() -> str:
    """One line saying where kernels run: on the GPU, or in the CPU emulator."""
    from .emulator import emulator_available  # noqa: PLC0415  (loaded on first use)
    from .launch import default_mode  # noqa: PLC0415

    if default_mode() == "gpu":
        return "kernels run on the GPU (CuPy RawModule, compiled by NVRTC)"
    if emulator_available():
        return "kernels run in the CPU emulator (no GPU: the same .cu source, compiled by g++)"
    return "kernels cannot run here: no GPU and no g++ for the CPU emulator"


__all__ = [
    "EmulatedKernel", "EmulatedModule", "FusedElementwise", "KernelCompileError", "KernelError",
    "KernelLaunchError", "UnsupportedConstructError", "analysis", "array_module", "attention",
    "compile_module", "default_mode", "describe_mode", "dispatch", "emulator",
    "emulator_available", "fused", "get_kernel", "gpu", "kernel_files", "kernel_names",
    "kernel_source", "launch",
    "matmul_naive", "matmul_tiled", "measured", "native", "nvrtc", "read_source", "reference",
    "rms_norm", "rope", "softmax", "vector_add", "vector_add_float4",
    "GPUS", "copy_strided", "gpus", "matmul_register_tiled", "occupancy", "profile",
    "profiling", "reduce_sum", "transpose",
]  # fmt: skip
