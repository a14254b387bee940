"""How ops use their CUDA kernels when course_lib runs on the GPU.

Each op with a kernel says how to call it in its ``gpu_kernel(launch, *arrays)`` method (see
:class:`course_lib.graph.Op`), and its ``compute(xp, ...)`` starts with
``run_on_gpu(self, xp, ...)``: the kernel's result, or ``None`` when the op should fall back
to its array-module code: on the CPU, when its kernel is switched off, or when the arrays are
not what the kernel handles (dtype, axis, rank). This module only keeps the switches: softmax,
the causal softmax and the softmax adjoint, RMSNorm and its two adjoints, RoPE and AdamW's two
update ops use their kernels by default; matmul keeps cuBLAS
(``cupy.matmul``) unless ``use_kernel("matmul", True)`` asks for the teaching tiled kernel.
Nothing here loads the kernel machinery (CuPy, the emulator) before a kernel runs.
"""

from __future__ import annotations

import functools

import numpy as np

from ..backend import is_gpu

#: Op name -> whether ops of that name use their kernel on the GPU (one entry per hook).
_ENABLED = {"softmax": True, "causal_softmax": True, "softmax_grad": True, "matmul": False,
            "rms_norm": True, "rms_norm_grad_x": True, "rms_norm_grad_w": True, "rope": True,
            "adam_moment": True, "adamw_update": True}  # fmt: skip


def use_kernel(op: str, enabled: bool = True) -> None:
    """Switch the GPU kernel of the ops named ``op`` (``"softmax"``, ``"causal_softmax"``,
    ``"softmax_grad"``, ``"matmul"``, ``"rms_norm"``, ``"rms_norm_grad_x"``,
    ``"rms_norm_grad_w"``, ``"rope"``, ``"adam_moment"`` or ``"adamw_update"``) on or off."""
    if op not in _ENABLED:
        raise KeyError(f"no kernel hook for op {op!r}; hooks exist for {sorted(_ENABLED)}")
    _ENABLED[op] = bool(enabled)


def kernel_enabled(op: str) -> bool:
    """Whether ops named ``op`` use their CUDA kernel on the GPU."""
    return _ENABLED.get(op, False)


class Launcher:
    """The functions of :mod:`.launch` with ``mode`` filled in: ``Launcher("gpu").softmax(x)``.

    This is what an op's ``gpu_kernel`` receives; :mod:`.launch` (with CuPy or the emulator
    behind it) is imported when the first kernel is looked up, not before.
    """

    def __init__(self, mode: str):
        self.mode = mode

    def __getattr__(self, name: str):
        from . import launch  # noqa: PLC0415 (the kernel machinery loads on first use)

        return functools.partial(getattr(launch, name), mode=self.mode)


def kernel_result(op, *arrays, mode: str):
    """The result of ``op``'s kernel on ``arrays`` in ``mode`` (``"gpu"`` or ``"emulator"``),
    or None if it does not apply. The kernels compute in float32: other dtypes are left to
    the op's own code, so a float64 graph stays float64."""
    scalars = getattr(op, "kernel_scalar_inputs", 0)  # trailing 0-d inputs of their own dtype
    if not all(a.dtype == np.float32 for a in arrays[: len(arrays) - scalars]):
        return None
    return op.gpu_kernel(Launcher(mode), *arrays)


def run_on_gpu(op, xp, *arrays):
    """Called from ``op.compute``: the GPU kernel's result, or None to use ``xp`` code."""
    if not is_gpu(xp) or not kernel_enabled(op.name):
        return None
    return kernel_result(op, *arrays, mode="gpu")
