"""Which array module runs the numbers: NumPy on the CPU, CuPy on a GPU, or the strict
stand-in for a GPU that CI uses (:mod:`course_lib.strict_device`).

The device is detected once (CuPy importable *and* a GPU present), can be forced
with the environment variable ``COURSE_LIB_DEVICE=cpu|gpu|strict`` or changed at run time
with :func:`set_device` (for every thread) or :func:`use_device` (for a block, in the thread
that runs it: another thread's block neither changes this thread's device nor what it goes
back to). Besides this module only the GPU side of ``kernels`` (loading
and launching kernels, NVRTC) imports CuPy.

**One device boundary.** Every array a user hands in (feeds, constants, ``Tensor`` data,
model parameters, tokens) passes :func:`to_device` where it enters: host data (Python
numbers, lists, NumPy arrays) is copied to the current device, an array of another device
is refused with :class:`DeviceError`. Inside the engine every array is on the current
device; results leave it only through :func:`to_numpy` (``.numpy()``, printing, tables,
plots, pictures, exercise checks).
"""

from __future__ import annotations

import contextlib
import os
import threading
from types import ModuleType

import numpy

from .errors import DeviceError, ParameterError

_DEVICES = ("cpu", "gpu", "strict")
_state: dict = {"device": None}  # the device of every thread outside a use_device block
_block = threading.local()  # .device: this thread's device inside a use_device block
_modules: dict = {}  # device name -> its array module


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
    wanted = os.environ.get("COURSE_LIB_DEVICE", "")
    if wanted.strip():
        return _checked_device(wanted, "COURSE_LIB_DEVICE=")
    return "gpu" if gpu_available() else "cpu"


def _checked_device(name, where: str) -> str:
    """``name`` as a device name (case and surrounding blanks ignored, the same for the
    environment variable and :func:`set_device`), or a DeviceError saying what exists."""
    device = name.strip().lower() if isinstance(name, str) else name
    if device not in _DEVICES:
        raise DeviceError(f"{where}{name!r} is not a device; use one of {', '.join(_DEVICES)}")
    if device == "gpu" and not gpu_available():
        raise DeviceError(
            f"{where}'gpu' asks for the GPU, but CuPy is not installed or sees no CUDA device "
            "(pip install 'cupy-cuda12x[ctk]' on a GPU machine); use 'cpu'"
        )
    return device


def get_device() -> str:
    """The current device name: ``"cpu"``, ``"gpu"`` or ``"strict"`` (this thread's inside a
    :func:`use_device` block)."""
    device = getattr(_block, "device", None)
    if device is not None:
        return device
    if _state["device"] is None:
        _state["device"] = _detect()
    return _state["device"]


def set_device(device: str) -> None:
    """Run subsequent computations on ``device`` (``"cpu"``, ``"gpu"`` or ``"strict"``), in
    every thread; inside a :func:`use_device` block, until the block ends, in this thread.

    Arrays made before keep their device: feeding them afterwards is a :class:`DeviceError`
    (models move with ``model.to(device)``)."""
    device = _checked_device(device, "set_device: ")
    if getattr(_block, "device", None) is not None:
        _block.device = device
    else:
        _state["device"] = device


@contextlib.contextmanager
def use_device(device: str):
    """Run the block on ``device``, then go back: ``with use_device("cpu"):`` around a
    measurement of the CPU on purpose (the notebooks' cache and roofline experiments). The
    device is this thread's, as CuPy's ``with cupy.cuda.Device(...)`` is: other threads, and
    threads started inside the block, run on the device :func:`set_device` chose."""
    device = _checked_device(device, "use_device: ")
    before = getattr(_block, "device", None)
    _block.device = device
    try:
        yield
    finally:
        _block.device = before


def xp() -> ModuleType:
    """The array module of the current device (``numpy``, ``cupy`` or the strict one)."""
    device = get_device()
    module = _modules.get(device)
    if module is None:
        module = _modules[device] = array_module(device)
    return module


def synchronize() -> None:
    """Wait until the GPU has finished the work queued so far (nothing to wait for on the
    CPU or the strict device): a timer calls it before reading the clock, since kernel
    launches return before the kernels run."""
    if get_device() == "gpu":
        import cupy  # noqa: PLC0415

        cupy.cuda.get_current_stream().synchronize()


def array_module(device: str) -> ModuleType:
    """The array module of ``device`` (a DeviceError for a name that is not a device, or for
    ``"gpu"`` without CuPy and a GPU)."""
    device = _checked_device(device, "array_module: ")
    if device == "gpu":
        import cupy  # noqa: PLC0415

        return cupy
    if device == "strict":
        from . import strict_device  # noqa: PLC0415

        return strict_device
    return numpy


def on_host(xp_module: ModuleType) -> bool:
    """Whether ``xp_module`` computes on the CPU (NumPy), where the native code paths run."""
    return xp_module is numpy


def is_gpu(xp_module: ModuleType) -> bool:
    """Whether ``xp_module`` is CuPy, where the CUDA kernels run."""
    return xp_module.__name__ == "cupy"


def device_of(array) -> str | None:
    """The device an array lives on (``"cpu"`` for NumPy arrays and scalars), or None for
    what is not an array (numbers, lists)."""
    if isinstance(array, (numpy.ndarray, numpy.generic)):
        return "cpu"
    module = type(array).__module__
    if module.startswith("cupy"):
        return "gpu"
    if module == "course_lib.strict_device":
        return "strict"
    return None


def to_device(value, what: str = "an array"):
    """``value`` as an array of the current device: host data (a number, a list, a NumPy
    array) is copied there; an array already there (on the CPU, a NumPy array) is returned as
    it is; an array of another device is refused, naming both devices and ``what`` it was
    meant for. A list or tuple may hold arrays of the current device (losses collected step by
    step): it is gathered on the host, then copied. NumPy arrays of subclasses enter as plain
    ones and big-endian arrays in the native byte order, on every device as on CuPy
    (:func:`plain_array`)."""
    value = plain_array(value, what)
    device = get_device()
    found = device_of(value)
    if found == device:
        return value
    if type(value) in (list, tuple):
        value = _host_sequence(value, what, refuse_foreign)
    refuse_foreign(value, what)
    if device == "cpu":
        return _native(numpy.asarray(value))
    host = host_array(value, what)
    check_device_dtype(host, what, device)
    return xp().asarray(host)


def check_device_dtype(host: numpy.ndarray, what: str, device: str) -> None:
    """A DeviceError naming ``what`` unless ``device`` has arrays of ``host``'s dtype (CuPy,
    and so the strict device, has no long double, real or complex)."""
    if device != "cpu" and host.dtype.kind in "fc" and host.dtype.char not in "efdFD":
        raise DeviceError(
            f"{what} holds {host.dtype} values, which the {device!r} device cannot hold (CuPy "
            "has float16, float32, float64, complex64 and complex128 only); convert with "
            f".astype('{'complex128' if host.dtype.kind == 'c' else 'float64'}')"
        )


def plain_array(value, what: str = "an array"):
    """``value``, or a plain NumPy view of it when it is an array of a NumPy subclass: a
    subclass computes its own way (``np.matrix`` makes ``*`` a matrix product). A masked array
    with entries masked is refused with a ParameterError: its mask would be lost. An array in
    the other byte order (big-endian data read from a file) becomes a native copy, as CuPy
    makes it: its dtype (``>f4``) would differ from the one declared (``float32``)."""
    if not isinstance(value, numpy.ndarray):
        return value
    if type(value) is not numpy.ndarray:
        if numpy.ma.is_masked(value):
            raise ParameterError(
                f"{what} is a masked array, whose mask course_lib would ignore; pass "
                "array.filled(value) (masked entries set to value)"
            )
        value = numpy.asarray(value)  # a view: a memmap is read in place
    return _native(value)


def _native(array: numpy.ndarray) -> numpy.ndarray:
    """``array``, or a copy in the machine's byte order if it is in the other one."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def refuse_foreign(value, what: str = "an array") -> None:
    """Raise :class:`DeviceError` if ``value`` is an array of a device that is neither the
    host nor the current one."""
    found, device = device_of(value), get_device()
    if found not in (None, "cpu", device):
        raise DeviceError(
            f"{what} is on the {found!r} device, but course_lib runs on {device!r}; "
            f"move it with course_lib.to_numpy(...) first, or set_device({found!r})"
        )


def host_array(value, what: str = "an array") -> numpy.ndarray:
    """Host data as a NumPy array (a torch CPU tensor too); a device array is refused, in a
    list or tuple too.

    The one check of what is CPU-only by nature and takes NumPy arrays on every device:
    :class:`~course_lib.strides.StridedView` (it reads the host memory of its buffer), the
    CPU emulator of the kernels, and the native loops of ``perf``.
    """
    if type(value) in (list, tuple):
        return _host_sequence(value, what, _refuse_device)
    _refuse_device(value, what)
    return numpy.asarray(value)


def _refuse_device(value, what: str) -> None:
    if device_of(value) not in (None, "cpu"):
        raise DeviceError(
            f"{what} is on the {device_of(value)!r} device, but this runs on the CPU only "
            "(host memory); pass course_lib.to_numpy(array)"
        )


def _host_sequence(values, what: str, refuse=None) -> numpy.ndarray:
    """A list or tuple as a NumPy array. NumPy reads host data itself; a device array in it
    refuses that (TypeError: no implicit conversion), so then each element passes
    ``refuse(element, what)`` (which raises for a device it may not come from) and the
    device arrays are copied to the host one by one."""
    try:
        return numpy.asarray(values)  # host data only: the fast path
    except TypeError:
        if refuse is not None:
            for v in _elements(values):
                refuse(v, f"an element of {what}")
        return numpy.asarray(to_host(values))


def _elements(values):
    """The elements of nested lists and tuples."""
    for v in values:
        if type(v) in (list, tuple):
            yield from _elements(v)
        else:
            yield v


def to_host(value):
    """``value`` with its device arrays copied to the host (NumPy), inside lists and tuples
    too; everything else as it is. What a display edge (a check, a plot, a test's
    comparison) calls on results that may live on a device."""
    if type(value) in (list, tuple):
        return type(value)(to_host(v) for v in value)
    return to_numpy(value) if device_of(value) not in (None, "cpu") else value


def to_numpy(array):
    """A NumPy array on the host from any device's array (a copy from a device; a NumPy
    array itself), a number, or a list or tuple of these: the way out of the device boundary."""
    if isinstance(array, numpy.ndarray):
        return array
    if device_of(array) in ("gpu", "strict"):
        return array.get()
    if type(array) in (list, tuple):
        return _host_sequence(array, "to_numpy")  # any device's arrays, as above
    return numpy.asarray(array)


def describe_device() -> str:
    """A one-line description for the first cell of every notebook."""
    if get_device() == "strict":
        return f"device: strict stand-in for a GPU (NumPy {numpy.__version__} inside)"
    if get_device() == "gpu":
        import cupy  # noqa: PLC0415

        index = cupy.cuda.runtime.getDevice()  # the current GPU, where arrays are made
        name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
        name = name.decode() if isinstance(name, bytes) else name
        return f"device: GPU ({name}) via CuPy {cupy.__version__}"
    return f"device: CPU via NumPy {numpy.__version__}"


def scatter_add(xp_module: ModuleType, target, index, values) -> None:
    """``target[index] += values`` with repeated indices accumulated (in place)."""
    if xp_module is numpy:
        numpy.add.at(target, index, values)
    elif getattr(xp_module, "scatter_add", None) is not None:  # the strict device
        xp_module.scatter_add(target, index, values)
    else:
        import cupyx  # noqa: PLC0415

        cupyx.scatter_add(target, index, values)
