"""A CPU emulator of CUDA C: the same ``.cu`` text, compiled with g++, run on NumPy arrays.

``compile_module(source)`` puts :file:`emulator_prelude.hpp` in front of the CUDA source,
compiles it with ``g++ -std=c++20`` into a shared library (cached on disk by a hash of the
text), and returns an :class:`EmulatedModule`. Its kernels are called like CuPy's
``RawKernel``: ``kernel(grid, block, args, shared_mem=0)``, with NumPy arrays where CuPy
takes device arrays.

How it runs a launch: blocks one after another; inside a block, a kernel that never calls
``__syncthreads()`` runs its threads one after another, and a kernel that does runs each
CUDA thread as a *fiber* (a ``ucontext`` coroutine on one OS thread) that executes until its
next barrier, after which the next thread runs; when every thread waits at the same barrier
they all continue. Fibers rather than one OS thread per CUDA thread: the results are the
same (both give each CUDA thread its own stack and make the barrier a real barrier) and
fibers switch about ten times faster, because no OS scheduler is involved.

Limits, honestly: no warps and no timing (so nothing about coalescing, bank conflicts or
occupancy can be measured here), no race detection (threads never interleave between
barriers, so a missing ``__syncthreads()`` can go unnoticed), no out-of-bounds detection,
``float`` arithmetic is the host's (no fused multiply-add contraction, libm's ``expf``).
Barrier misuse *is* detected: threads waiting at different barriers, or a thread returning
while others wait. Warp intrinsics, inline PTX, textures and cooperative groups are
rejected with a clear error.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .errors import KernelCompileError, KernelLaunchError, UnsupportedConstructError
from .sources import KERNEL_DIR, blank_comments, kernel_names, read_source

CACHE_ENV = "COURSE_LIB_KERNEL_CACHE"
COMPILER_ENV = "COURSE_LIB_CXX"
FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing")
# For plain C++ loops compiled for this CPU (the fusion pass's CPU kernels): vectorised for
# the machine's SIMD units, without FMA contraction (results as NumPy computes them).
NATIVE_FLAGS = ("-O3", "-march=native", "-ffp-contract=off")
MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SHARED_BYTES = 48 * 1024  # CUDA's default limit without an opt-in attribute

_UNSUPPORTED = (
    (r"\b__shfl\w*|\b__syncwarp\b|\b__(ballot|any|all|match_\w+|reduce_\w+)_sync\b"
     r"|\b__activemask\b", "warp-level primitives (the emulator has no lock-step warps)",
     "reduce through shared memory with __syncthreads() instead"),
    (r"\b__syncthreads_(count|and|or)\b", "barrier reductions",
     "reduce through shared memory with __syncthreads() instead"),
    (r"\bcooperative_groups\b|\bthis_grid\b", "cooperative groups", "use __syncthreads()"),
    (r"\basm\b", "inline PTX assembly", "write the operation in CUDA C"),
    (r"\btex[123]D\w*\b|\btexture\s*<|\bsurf[123]D\w*\b|\bcudaTextureObject_t\b",
     "textures and surfaces", "read the array through a plain pointer"),
    (r"\b__half\w*\b|\b__nv_bfloat16\w*\b|\bhalf2\b", "16-bit floating point types",
     "use float"),
    (r"<<<", "launching kernels from the device (dynamic parallelism)",
     "launch from Python"),
    (r"^\s*#\s*include\s*<", "system headers", "the prelude already provides the math "
     "functions, vector types and atomics kernels need"),
    (r"\btemplate\b[^;{]*?__global__", "kernel templates",
     'write one extern "C" __global__ function per instance'),
)  # fmt: skip
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w ]*?)\s*"
    r"(?:__align__\s*\(\s*\d+\s*\)\s*)?\b([A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_POINTEE = {
    "float32": np.float32, "float32x2": np.float32, "float32x4": np.float32,
    "float64": np.float64, "int32": np.int32, "int32x2": np.int32, "int32x4": np.int32,
    "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
}  # fmt: skip
_ALIGNMENT = {"float32x2": 8, "float32x4": 16, "int32x2": 8, "int32x4": 16}
_SCALAR = {
    "float32": ctypes.c_float, "float64": ctypes.c_double, "int32": ctypes.c_int32,
    "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "uint64": ctypes.c_uint64,
}  # fmt: skip
_PYTHON_SCALAR = {int: "int64", float: "float64"}  # how CuPy passes Python numbers
_LAUNCH_LOCK = threading.Lock()  # a library's launch state is global: one launch at a time


def compiler() -> str | None:
    """Path of the C++ compiler the emulator uses (``$COURSE_LIB_CXX`` or ``g++``), or None."""
    return shutil.which(os.environ.get(COMPILER_ENV, "g++"))


def emulator_available() -> bool:
    """True when a C++ compiler is found (the emulator needs g++ or a compatible one)."""
    return compiler() is not None


def cache_dir() -> Path:
    """Directory of built libraries: ``$COURSE_LIB_KERNEL_CACHE``, else the user cache dir.

    Falls back to a directory under the system temp dir when the first choice is not writable.
    """
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        path = Path(chosen).expanduser()
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = base / "course_lib" / "emulator"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"course_lib-emulator-{os.getuid()}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def _check_supported(text: str, filename: str) -> None:
    for pattern, what, advice in _UNSUPPORTED:
        match = re.search(pattern, text, re.MULTILINE | re.DOTALL)
        if match:
            line = text.count("\n", 0, match.start()) + 1
            found = match.group(0).split("\n")[0].strip()
            raise UnsupportedConstructError(
                f"{filename}:{line}: the CPU emulator does not support {what} "
                f"(found {found!r}); {advice}"
            )
    if len(re.findall(r"\b__global__\b", text)) != len(kernel_names(text)):
        line = text.count("\n", 0, text.find("__global__")) + 1
        raise UnsupportedConstructError(
            f'{filename}:{line}: declare every kernel as extern "C" __global__ void name(...) '
            "so that CuPy and the emulator find it by name"
        )


def _rewrite_extern_shared(text: str, filename: str) -> str:
    """``extern __shared__ T name[];`` -> a pointer into the launch's dynamic shared buffer."""

    def replace(match: re.Match) -> str:
        before = text[: match.start()]
        if before.count("{") == before.count("}"):
            line = before.count("\n") + 1
            raise UnsupportedConstructError(
                f"{filename}:{line}: declare extern __shared__ arrays inside the kernel "
                "(the emulator gives each launch its own buffer)"
            )
        kind, name = match.group(1).strip(), match.group(2)
        return f"{kind}* {name} = reinterpret_cast<{kind}*>(::clemu::dynamic_shared);"

    return _EXTERN_SHARED.sub(replace, text)


def translate(source: str, filename: str = "module.cu") -> tuple[str, list[str], bool]:
    """The C++ translation unit for ``source``, its kernel names, and whether it uses barriers.

    Raises :class:`UnsupportedConstructError` naming file and line for CUDA features the
    emulator does not model.
    """
    text = blank_comments(source)
    _check_supported(text, filename)
    names = kernel_names(text)
    if not names:
        raise UnsupportedConstructError(
            f'{filename}: no kernel found; declare kernels as extern "C" __global__ void name(...)'
        )
    body = _rewrite_extern_shared(text, filename)
    if not body.lstrip().startswith("#line"):
        body = f'#line 1 "{filename}"\n{body}'
    prelude = (KERNEL_DIR / "emulator_prelude.hpp").read_text()
    exports = "\n".join(f"CLEMU_EXPORT({name})" for name in names)
    unit = f'#line 1 "emulator_prelude.hpp"\n{prelude}\n{body}\n#line 1 "<exports>"\n{exports}\n'
    return unit, names, bool(re.search(r"\b__syncthreads\s*\(", text))


@functools.cache
def _compiler_identity(path: str) -> str:
    result = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines()[0] if result.stdout else path


@functools.cache
def _native_target(path: str) -> str:
    """What ``-march=native`` means on this CPU (part of the cache key of native builds, so a
    cache shared between machines never hands one CPU's instructions to another)."""
    result = subprocess.run(
        [path, "-march=native", "-Q", "--help=target"], capture_output=True, text=True, check=False
    )
    return result.stdout


def _compile_errors(stderr: str, filename: str) -> str:
    lines = [line for line in stderr.splitlines() if "error:" in line]
    shown = "\n".join(lines[:8]) or stderr[-2000:]
    return f"g++ could not compile {filename} for the emulator:\n{shown}"


def build_library(unit: str, filename: str = "module.cu", native: bool = False) -> Path:
    """Compile a translation unit into a shared library in :func:`cache_dir` (cached by hash).

    ``native=True`` adds :data:`NATIVE_FLAGS` (optimised for this CPU's vector units); the
    emulator's own units do not need it.
    """
    flags = FLAGS + NATIVE_FLAGS if native else FLAGS
    cxx = compiler()
    if cxx is None:
        raise KernelCompileError(
            "the CUDA emulator needs a C++ compiler: install g++ (Debian: apt-get install g++) "
            f"or set {COMPILER_ENV}"
        )
    identity = _compiler_identity(cxx) + (_native_target(cxx) if native else "")
    key = hashlib.sha256("\0".join([identity, *flags, unit]).encode()).hexdigest()
    directory = cache_dir()
    library = directory / f"{key[:32]}.so"
    if library.exists():
        return library
    partial = directory / f"{key[:32]}.{os.getpid()}.{threading.get_ident()}.tmp"
    result = subprocess.run(
        [cxx, *flags, "-x", "c++", "-", "-o", str(partial)],
        input=unit, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise KernelCompileError(_compile_errors(result.stderr, filename))
    os.replace(partial, library)
    return library


class EmulatedKernel:
    """One ``__global__`` function of an :class:`EmulatedModule`; call it like a RawKernel."""

    def __init__(self, library: ctypes.CDLL, name: str, uses_barriers: bool, filename: str):
        self.name = name
        self.filename = filename
        self.uses_barriers = uses_barriers
        self._launch = getattr(library, f"clemu_launch_{name}")
        self._launch.restype = ctypes.c_int
        signature = getattr(library, f"clemu_signature_{name}")
        signature.restype = ctypes.c_char_p
        text = signature().decode()
        self.param_types: tuple[str, ...] = tuple(text.split(",")) if text else ()

    def __repr__(self) -> str:
        return f"EmulatedKernel({self.name}({', '.join(self.param_types)}))"

    def __call__(
        self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence,
        shared_mem: int = 0,
    ) -> None:  # fmt: skip
        """Run the kernel on ``grid`` blocks of ``block`` threads (CuPy's call shape)."""
        grid3, block3 = self._dims(grid, "grid"), self._dims(block, "block")
        self._check_config(grid3, block3, shared_mem)
        values = self._marshal(args)
        pointers = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
        )
        # Fresh shared memory is filled with NaN bit patterns: reading it before writing shows.
        shared = np.full(max(shared_mem, 1) + 16, 0xFF, dtype=np.uint8)
        address = shared.ctypes.data + (-shared.ctypes.data) % 16
        error = ctypes.create_string_buffer(1024)
        with _LAUNCH_LOCK:
            status = self._launch(
                (ctypes.c_uint * 3)(*grid3), (ctypes.c_uint * 3)(*block3),
                ctypes.c_void_p(address), pointers, int(self.uses_barriers), error,
                ctypes.c_size_t(len(error)),
            )  # fmt: skip
        if status != 0:
            raise KernelLaunchError(f"{self.filename}: kernel {self.name}: {error.value.decode()}")

    def _dims(self, value, what: str) -> tuple[int, int, int]:
        dims = (value,) if isinstance(value, int | np.integer) else tuple(value)
        if not 1 <= len(dims) <= 3 or any(int(d) < 1 for d in dims):
            raise KernelLaunchError(
                f"kernel {self.name}: {what} must be 1 to 3 positive integers, got {value!r}"
            )
        return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))

    def _check_config(self, grid, block, shared_mem: int) -> None:
        threads = block[0] * block[1] * block[2]
        if threads > MAX_THREADS_PER_BLOCK or block[2] > 64:
            raise KernelLaunchError(
                f"kernel {self.name}: block {block} has {threads} threads; CUDA allows at most "
                f"{MAX_THREADS_PER_BLOCK} per block (and 64 along z)"
            )
        if grid[0] >= 2**31 or grid[1] > 65535 or grid[2] > 65535:
            raise KernelLaunchError(f"kernel {self.name}: grid {grid} exceeds CUDA's limits")
        if not 0 <= shared_mem <= MAX_DYNAMIC_SHARED_BYTES:
            raise KernelLaunchError(
                f"kernel {self.name}: shared_mem={shared_mem} bytes; the emulator allows 0 to "
                f"{MAX_DYNAMIC_SHARED_BYTES} bytes of dynamic shared memory (CUDA's default)"
            )

    def _marshal(self, args: Sequence) -> list:
        if len(args) != len(self.param_types):
            raise KernelLaunchError(
                f"kernel {self.name} takes {len(self.param_types)} arguments "
                f"({', '.join(self.param_types)}), got {len(args)}"
            )
        return [self._convert(i, kind, value) for i, (kind, value) in
                enumerate(zip(self.param_types, args))]  # fmt: skip

    def _convert(self, index: int, kind: str, value):
        where = f"kernel {self.name}, argument {index} ({kind})"
        if kind.endswith("*"):
            return self._pointer(where, kind[:-1], value)
        if isinstance(value, np.generic):
            if value.dtype != np.dtype(kind):
                raise KernelLaunchError(
                    f"{where}: got numpy.{value.dtype}; pass numpy.{kind}(value) so that the "
                    "bytes match the parameter, as CuPy requires"
                )
            return _SCALAR[kind](value.item())
        python_kind = _PYTHON_SCALAR.get(type(value))
        if python_kind != kind:
            raise KernelLaunchError(
                f"{where}: got {type(value).__name__} {value!r}; CuPy passes Python numbers "
                f"as 64-bit, so pass numpy.{kind}(value)"
            )
        return _SCALAR[kind](value)

    @staticmethod
    def _pointer(where: str, kind: str, value) -> ctypes.c_void_p:
        if not isinstance(value, np.ndarray):
            raise KernelLaunchError(
                f"{where}: the emulator runs on NumPy arrays, got {type(value).__name__}"
            )
        if value.dtype != _POINTEE[kind] or not value.flags.c_contiguous:
            raise KernelLaunchError(
                f"{where}: needs a C-contiguous {np.dtype(_POINTEE[kind])} array, got "
                f"{value.dtype} {'contiguous' if value.flags.c_contiguous else 'strided'} "
                f"shape {value.shape}; use numpy.ascontiguousarray(x, dtype=...)"
            )
        if value.ctypes.data % _ALIGNMENT.get(kind, 1):
            raise KernelLaunchError(
                f"{where}: the array's address is not {_ALIGNMENT[kind]}-byte aligned (a view "
                "into the middle of an array?); pass a fresh copy"
            )
        return ctypes.c_void_p(value.ctypes.data)


class EmulatedModule:
    """CUDA C compiled for the CPU; the emulator's counterpart of ``cupy.RawModule``."""

    def __init__(self, source: str, filename: str = "module.cu"):
        unit, names, uses_barriers = translate(source, filename)
        self.filename = filename
        self.source = source
        self.library_path = build_library(unit, filename)
        library = ctypes.CDLL(str(self.library_path))
        self._kernels = {n: EmulatedKernel(library, n, uses_barriers, filename) for n in names}

    @property
    def kernel_names(self) -> list[str]:
        """Names of the kernels in the module, in source order."""
        return list(self._kernels)

    def get_function(self, name: str) -> EmulatedKernel:
        """The kernel called ``name`` (like ``RawModule.get_function``)."""
        if name not in self._kernels:
            raise KernelLaunchError(
                f"{self.filename} has no kernel {name!r}; it defines {', '.join(self._kernels)}"
            )
        return self._kernels[name]


@functools.lru_cache(maxsize=64)
def compile_module(source: str, filename: str = "module.cu") -> EmulatedModule:
    """Compile CUDA C ``source`` for the CPU emulator (memoised; the library is cached on disk)."""
    return EmulatedModule(source, filename)


def load_module(filename: str) -> EmulatedModule:
    """The emulated module of a packaged kernel file, e.g. ``load_module("softmax.cu")``."""
    return compile_module(read_source(filename), filename)
