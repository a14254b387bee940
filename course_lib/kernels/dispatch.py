"""Hooks through which ops use the CUDA kernels when course_lib runs on the GPU.

An op's ``compute(xp, ...)`` calls :func:`run_on_gpu`; it returns the kernel's result, or
``None`` when the op should fall back to its array-module code: on the CPU, when the kernel
is switched off, or when the arrays are not what the kernel handles (dtype, axis, rank).
Softmax uses its kernel by default; matmul keeps cuBLAS (``cupy.matmul``) unless
``use_kernel("matmul", True)`` asks for the teaching tiled kernel.
"""

from __future__ import annotations

import numpy as np

from . import launch

_ENABLED = {"softmax": True, "matmul": False, "rms_norm": True, "rope": True}


def use_kernel(op: str, enabled: bool = True) -> None:
    """Switch the GPU kernel of ``op`` (``"softmax"``, ``"matmul"``, ``"rms_norm"`` or
    ``"rope"``) on or off."""
    if op not in _ENABLED:
        raise KeyError(f"no kernel hook for op {op!r}; hooks exist for {sorted(_ENABLED)}")
    _ENABLED[op] = bool(enabled)


def kernel_enabled(op: str) -> bool:
    """Whether ops named ``op`` use their CUDA kernel on the GPU."""
    return _ENABLED.get(op, False)


def _float32(*arrays) -> bool:
    return all(a.dtype == np.float32 for a in arrays)


def kernel_result(op: str, *arrays, mode: str, **attrs):
    """The kernel's result for ``op`` on ``arrays`` in ``mode``, or None if it does not apply."""
    if op == "softmax":
        (x,) = arrays
        if _float32(x) and x.ndim >= 1 and attrs.get("axis", -1) in (-1, x.ndim - 1):
            return launch.softmax(x, mode=mode)
    elif op == "matmul":
        x, y = arrays
        if _float32(x, y) and x.ndim == y.ndim == 2:
            return launch.matmul_tiled(x, y, mode=mode)
    elif op == "rms_norm":
        x, w = arrays
        if _float32(x, w) and x.ndim >= 1:
            return launch.rmsnorm(x, w, eps=attrs["eps"], mode=mode)
    elif op == "rope":  # the kernel rotates x (..., seq_len, head_dim) by cos/sin tables
        x, cos, sin = arrays
        if _float32(x, cos, sin) and x.ndim >= 2 and attrs["seq_axis"] % x.ndim == x.ndim - 2:
            return launch.rope(x, cos, sin, mode=mode)
    return None


def run_on_gpu(op: str, xp, *arrays, **attrs):
    """Called from an op's ``compute``: the GPU kernel's result, or None to use ``xp`` code."""
    if xp is np or not kernel_enabled(op):
        return None
    return kernel_result(op, *arrays, mode="gpu", **attrs)
