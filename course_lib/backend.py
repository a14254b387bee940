"""Which array module runs the numbers: NumPy on the CPU, CuPy on a GPU.

The device is detected once (CuPy importable *and* a GPU present), can be forced
with the environment variable ``COURSE_LIB_DEVICE=cpu|gpu`` or changed at run time
with :func:`set_device`. Besides this module only the GPU side of ``kernels`` (loading
and launching kernels, NVRTC) imports CuPy.
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy

from .errors import DeviceError

_DEVICES = ("cpu", "gpu")
_state: dict = {"device": None, "xp": None}  # the device name and its array module


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy  # noqa: PLC0415
    except Exception:  # ImportError, or a broken CUDA install
        return False
    try:
        return bool(cupy.is_available())
    except Exception:
        return False


def _detect() -> str:
    wanted = os.environ.get("COURSE_LIB_DEVICE", "").strip().lower()
    if wanted:
        if wanted not in _DEVICES:
            raise DeviceError(
                f"COURSE_LIB_DEVICE={wanted!r} is not a device; use one of {', '.join(_DEVICES)}"
            )
        if wanted == "gpu" and not gpu_available():
            raise DeviceError("COURSE_LIB_DEVICE=gpu but CuPy sees no GPU; unset it to use the CPU")
        return wanted
    return "gpu" if gpu_available() else "cpu"


def get_device() -> str:
    """The current device name, ``"cpu"`` or ``"gpu"``."""
    if _state["device"] is None:
        _state["device"] = _detect()
    return _state["device"]


def set_device(device: str) -> None:
    """Run subsequent computations on ``device`` (``"cpu"`` or ``"gpu"``)."""
    if device not in _DEVICES:
        raise DeviceError(f"unknown device {device!r}; use one of {', '.join(_DEVICES)}")
    if device == "gpu" and not gpu_available():
        raise DeviceError("no GPU is available (CuPy missing or no CUDA device); stay on 'cpu'")
    _state["device"] = device
    _state["xp"] = None


def xp() -> ModuleType:
    """The array module of the current device (``numpy`` or ``cupy``)."""
    module = _state["xp"]
    if module is None:
        if get_device() == "gpu":
            import cupy as module  # noqa: PLC0415
        else:
            module = numpy
        _state["xp"] = module
    return module


def to_numpy(array):
    """A NumPy copy (or the array itself) of a NumPy or CuPy array or a scalar."""
    if hasattr(array, "get") and not isinstance(array, numpy.ndarray):
        return array.get()
    return numpy.asarray(array)


def describe_device() -> str:
    """A one-line description for the first cell of every notebook."""
    if get_device() == "gpu":
        import cupy  # noqa: PLC0415

        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        name = name.decode() if isinstance(name, bytes) else name
        return f"device: GPU ({name}) via CuPy {cupy.__version__}"
    return f"device: CPU via NumPy {numpy.__version__}"


def scatter_add(xp_module: ModuleType, target, index, values) -> None:
    """``target[index] += values`` with repeated indices accumulated (in place)."""
    if xp_module is numpy:
        numpy.add.at(target, index, values)
    else:
        import cupyx  # noqa: PLC0415

        cupyx.scatter_add(target, index, values)
