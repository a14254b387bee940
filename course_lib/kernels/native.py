"""C++ compiled into shared libraries and loaded into this process, cached on disk safely.

Loading a library runs its code in the process that loads it (the fusion pass's loops and
``perf``'s in this one; the emulator only builds here and loads in child processes), so the
cache must hold only libraries this user built:

* the cache directory is created with mode 0700, and any directory that is a symlink, is not
  owned by this user or is writable by group or others, or lies in a folder that another user
  owns or may write to without the sticky bit (who could swap the cache for theirs), is refused
  (``$COURSE_LIB_KERNEL_CACHE``) or, for the default location, replaced by a fresh private
  temporary directory;
* a library is named by the hash of everything that went into it (compiler, flags, source),
  built under a temporary name and renamed into place, and stored next to a record of its own
  SHA-256 (both made private whatever the umask); it is loaded only when it is a regular file
  owned by this user, not writable by others, and its bytes still match the record. Anything
  else (a truncated or corrupted file) is rebuilt.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..backend import host_array
from ..errors import GraphError, ParameterError, ShapeError
from .errors import KernelCompileError, UnsafeCacheError

CACHE_ENV = "COURSE_LIB_KERNEL_CACHE"
COMPILER_ENV = "COURSE_LIB_CXX"
FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing")
# For plain C++ loops compiled for this CPU (the fusion pass's CPU kernels): vectorised for
# the machine's SIMD units, without FMA contraction (results as NumPy computes them).
NATIVE_FLAGS = ("-O3", "-march=native", "-ffp-contract=off")
# The counting variant of an emulator library (``kernels.profile()``): g++'s ThreadSanitizer
# instrumentation calls a hook before every load and store; the emulator's prelude defines the
# hooks (no sanitizer runtime is linked, so compiling and linking are two steps). Without
# vectorisation and scalar replacement of aggregates, each access keeps the width the source
# wrote: a float4 load stays one 16-byte access instead of four 4-byte ones.
#: Keep every operation scalar: loop and straight-line (SLP) vectorisation off.
SCALAR_FLAGS = ("-fno-tree-vectorize", "-fno-tree-slp-vectorize")
COUNTING_FLAGS = (
    "-DCLEMU_COUNT", "-fsanitize=thread", "--param=tsan-instrument-func-entry-exit=0",
    *SCALAR_FLAGS, "-fno-tree-sra",
)  # fmt: skip


def compiler() -> str | None:
    """Path of the C++ compiler (``$COURSE_LIB_CXX`` or ``g++``), or None."""
    return shutil.which(os.environ.get(COMPILER_ENV, "g++"))


def _unsafe(path: Path, kind: str) -> str | None:
    """Why ``path`` (a directory or a file, not followed if a symlink) is unsafe, or None."""
    info = os.lstat(path)
    is_kind = stat.S_ISDIR(info.st_mode) if kind == "directory" else stat.S_ISREG(info.st_mode)
    if not is_kind:
        return f"it is not a plain {kind} (a symlink?)"
    if info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}, not to you ({os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _unsafe_above(path: Path) -> str | None:
    """Why a folder above ``path`` (a real path: no symlinks) would let another user rename
    ``path`` and put a folder of theirs in its place, or None. The owner of a folder may, and
    so may anyone who can write to it, unless it has the sticky bit (as ``/tmp`` has)."""
    for folder in path.parents:
        info = os.stat(folder)
        if info.st_uid not in (0, os.getuid()):
            return f"the folder {folder} above it belongs to user id {info.st_uid}"
        writers = stat.S_IWOTH | (0 if _own_group(info.st_gid) else stat.S_IWGRP)
        if info.st_mode & writers and not info.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(info.st_mode)
            return f"others may write to the folder {folder} above it (mode {mode:o})"
    return None


def _own_group(gid: int) -> bool:
    """Whether ``gid`` is this user's private group (named as the user, no other members:
    where the umask is 002, as on Ubuntu, ``~/.cache`` is group-writable by it alone)."""
    try:
        import grp  # noqa: PLC0415  (POSIX only)
        import pwd  # noqa: PLC0415

        user, group = pwd.getpwuid(os.getuid()), grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == user.pw_gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {
        user.pw_name
    }


def _private_directory(path: Path) -> Path:
    """``path`` as a real path, created 0700 (missing folders above it too) if missing; raises
    UnsafeCacheError if others could plant files in it or swap it for a folder of theirs."""
    try:
        for folder in reversed((path, *path.parents)):  # mkdir(parents=True) obeys the umask
            if not os.path.lexists(folder):
                folder.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise UnsafeCacheError(f"cannot create the kernel cache {path}: {exc}") from None
    real = Path(os.path.realpath(path))  # absolute: a later chdir changes nothing
    reason = _unsafe(path, "directory") or _unsafe(real, "directory") or _unsafe_above(real)
    if reason is not None:
        raise UnsafeCacheError(
            f"refusing the kernel cache {path}: {reason}; libraries there would run in this "
            f"process. Use a directory only you can write (chmod 700), in folders no other user "
            f"can write, or set {CACHE_ENV}"
        )
    return real


@functools.cache
def _temporary_cache() -> Path:
    path = tempfile.mkdtemp(prefix="course_lib-kernels-")  # 0700, unpredictable name
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return _private_directory(Path(path))  # $TMPDIR, too, may be another user's folder


def cache_dir() -> Path:
    """Directory of built libraries: ``$COURSE_LIB_KERNEL_CACHE`` (refused if unsafe), else
    ``$XDG_CACHE_HOME/course_lib/emulator`` (where absolute, as the XDG specification asks) or
    ``~/.cache/course_lib/emulator``, else a fresh private temporary directory."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return _private_directory(Path(chosen).expanduser())
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    try:
        return _private_directory(base / "course_lib" / "emulator")
    except UnsafeCacheError:
        return _temporary_cache()


_building: dict[str, threading.Lock] = {}  # cache key -> the lock of the threads building it
if hasattr(os, "register_at_fork"):  # a forked child's locks: none held by a thread it lacks
    os.register_at_fork(after_in_child=_building.clear)

#: The compiler's input and output as UTF-8 whatever the locale (the sources' comments are
#: UTF-8: an ASCII locale's codec raised UnicodeError, which no caller expects)
_TEXT = {"capture_output": True, "encoding": "utf-8", "errors": "replace", "check": False}


@functools.cache
def _compiler_identity(path: str) -> str:
    result = subprocess.run([path, "--version"], **_TEXT)
    return result.stdout.splitlines()[0] if result.stdout else path


@functools.cache
def _native_target(path: str) -> str:
    """What ``-march=native`` means on this CPU (part of the cache key of native builds, so a
    cache shared between machines never hands one CPU's instructions to another)."""
    result = subprocess.run([path, "-march=native", "-Q", "--help=target"], **_TEXT)
    return result.stdout


def _compile_errors(result: subprocess.CompletedProcess, cxx: str, filename: str) -> str:
    stderr = result.stderr or ""
    lines = [line for line in stderr.splitlines() if "error:" in line]
    shown = "\n".join(lines[:8]) or stderr[-2000:].strip() or "(it printed nothing)"
    return f"{cxx} could not compile {filename} (exit status {result.returncode}):\n{shown}"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(library: Path) -> bool:
    """Is ``library`` one this user built, unchanged since (see the module docstring)?"""
    record = library.with_suffix(".sha256")
    try:
        if _unsafe(library, "file") or _unsafe(record, "file"):
            return False
        return record.read_text().strip() == _digest(library)
    except OSError:
        return False


def _compile(cxx: str, flags: tuple[str, ...], unit: str, output: Path, counting: bool):
    """Run the compiler on ``unit``; a counting build compiles, then links without -fsanitize."""
    run = functools.partial(subprocess.run, **_TEXT)
    if not counting:
        return run([cxx, *flags, "-x", "c++", "-", "-o", str(output)], input=unit)
    objects = output.with_suffix(".o")
    try:
        result = run([cxx, *flags, "-c", "-x", "c++", "-", "-o", str(objects)], input=unit)
        if result.returncode == 0:
            result = run([cxx, "-shared", str(objects), "-o", str(output)])
        return result
    finally:
        objects.unlink(missing_ok=True)


def build_library(
    unit: str,
    filename: str = "module.cu",
    native: bool = False,
    counting: bool = False,
    extra_flags: tuple[str, ...] = (),
) -> Path:
    """Compile a C++ translation unit into a shared library in :func:`cache_dir`.

    Cached by hash and verified before reuse (rebuilt if it does not verify); threads of
    this process that miss it together build it once.
    ``native=True`` adds :data:`NATIVE_FLAGS` (optimised for this CPU's vector units);
    ``counting=True`` adds :data:`COUNTING_FLAGS` (every memory access calls a hook);
    ``extra_flags`` come last, so they override the others (``-fno-tree-vectorize``
    builds the same source without SIMD instructions). All flags are part of the cache key.
    """
    flags = (
        FLAGS
        + (NATIVE_FLAGS if native else ())
        + (COUNTING_FLAGS if counting else ())
        + tuple(extra_flags)
    )
    cxx = compiler()
    if cxx is None:
        wanted = os.environ.get(COMPILER_ENV, "g++")
        raise KernelCompileError(
            f"compiling kernels for the CPU needs a C++ compiler: {wanted!r} "
            f"({COMPILER_ENV if COMPILER_ENV in os.environ else 'the default'}) is not an "
            f"executable found on PATH; install g++ (Debian: apt-get install g++) or set "
            f"{COMPILER_ENV} to one"
        )
    identity = _compiler_identity(cxx) + (_native_target(cxx) if native else "")
    key = hashlib.sha256("\0".join([identity, *flags, unit]).encode()).hexdigest()
    directory = cache_dir()
    library = directory / f"{key[:32]}.so"
    if _verified(library):
        return library
    with _building.setdefault(key, threading.Lock()):  # threads that miss together: one builds
        if _verified(library):
            return library
        partial = directory / f"{key[:32]}.{os.getpid()}.{threading.get_ident()}.tmp"
        result = _compile(cxx, flags, unit, partial, counting)
        if result.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise KernelCompileError(_compile_errors(result, cxx, filename))
        partial.chmod(0o700)  # under a umask of 002 or 000 it would never verify: always rebuilt
        record = partial.with_suffix(".sha256tmp")
        record.write_text(_digest(partial))
        record.chmod(0o600)
        os.replace(partial, library)  # the library first: a reader sees a record only after it
        os.replace(record, library.with_suffix(".sha256"))
    return library


def load_library(
    unit: str,
    filename: str = "module.cu",
    native: bool = False,
    counting: bool = False,
    extra_flags: tuple[str, ...] = (),
) -> ctypes.CDLL:
    """Build (or reuse) the library of ``unit`` (see :func:`build_library`) and load it."""
    library = build_library(unit, filename, native, counting, extra_flags)
    try:
        return ctypes.CDLL(str(library))
    except OSError as exc:  # verified bytes that do not load: the compiler's fault, not ours
        raise KernelCompileError(f"the library built for {filename} does not load: {exc}") from None


#: g++ flags of loops whose ``<math.h>`` calls may vectorise: ``#pragma omp simd`` without an
#: OpenMP runtime, and math functions that need not set ``errno`` (results unchanged).
SIMD_FLAGS = ("-fopenmp-simd", "-fno-math-errno")
#: Link glibc's libmvec, whose SIMD versions :data:`VECTOR_MATH` declares.
VECTOR_MATH_FLAGS = ("-DVECTOR_MATH", "-Wl,--no-as-needed", "-lmvec")
#: Source lines (after ``#include <math.h>``) declaring libmvec's SIMD ``expf``, ``logf``,
#: ``sinf``, ``cosf`` and, from glibc 2.35, ``tanhf`` as ``<math.h>`` declares them under
#: ``-ffast-math``: a vectorised loop then computes 8 of them per AVX2 call, each within 4 ulp
#: (glibc's bound; NumPy's float32 functions are not exact either).
VECTOR_MATH = """\
#ifdef VECTOR_MATH
#define SIMD_MATH extern "C" __attribute__((simd("notinbranch")))
SIMD_MATH float expf(float);
SIMD_MATH float logf(float);
SIMD_MATH float sinf(float);
SIMD_MATH float cosf(float);
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35)
SIMD_MATH float tanhf(float);
#endif
#endif
"""


@functools.cache
def libmvec_links() -> bool:
    """Does code declaring :data:`VECTOR_MATH` link against libmvec here (x86-64 glibc)?
    Asked once per process, so where it does not, no later build tries it again."""
    function = 'extern "C" float probe(float x) { return expf(x); }\n'
    probe = f"#include <math.h>\n{VECTOR_MATH}{function}"
    try:
        build_library(probe, "libmvec_probe.cpp", True, extra_flags=SIMD_FLAGS + VECTOR_MATH_FLAGS)
    except KernelCompileError:
        return False
    return True


def load_simd_library(
    unit: str, filename: str, extra_flags: tuple[str, ...] = ()
) -> tuple[ctypes.CDLL, bool]:
    """``unit`` (which includes :data:`VECTOR_MATH`) built for this CPU with libmvec's SIMD
    math where it links, else with the scalar functions (``extra_flags`` last, as
    :func:`build_library` puts them); and whether libmvec's were used."""
    if libmvec_links():
        try:
            flags = SIMD_FLAGS + VECTOR_MATH_FLAGS + tuple(extra_flags)
            return load_library(unit, filename, native=True, extra_flags=flags), True
        except KernelCompileError:
            pass  # this unit's own error: the scalar build below reports it, or succeeds
    flags = SIMD_FLAGS + tuple(extra_flags)
    return load_library(unit, filename, native=True, extra_flags=flags), False


def loop_arrays(arrays: Sequence, what: str) -> list:
    """``arrays`` (the output last) if a compiled C loop over ``float*`` may take them: host
    float32 arrays of one shape, C-contiguous and aligned to 4 bytes, the output writeable and
    overlapping no input (the loops read through ``__restrict__`` pointers), else an error
    naming ``what``: ShapeError for the shapes, GraphError (a TypeError) for the rest."""
    arrays = [host_array(a, f"an array of {what}") for a in arrays]
    if len({a.shape for a in arrays}) != 1:
        raise ShapeError(f"{what} runs on arrays of one shape (out included), got shapes "
                         f"{[a.shape for a in arrays]}")  # fmt: skip
    if not all(a.dtype == np.float32 and a.flags.c_contiguous and a.flags.aligned for a in arrays):
        raise GraphError(
            f"{what} runs on C-contiguous float32 arrays (out included), aligned to 4 bytes, "
            f"got (dtype, C-contiguous, aligned) "
            f"{[(str(a.dtype), a.flags.c_contiguous, a.flags.aligned) for a in arrays]}; use "
            "numpy.array(x, dtype=numpy.float32) (a fresh copy)"
        )
    *inputs, out = arrays
    if not out.flags.writeable or any(np.may_share_memory(out, a) for a in inputs):
        raise ParameterError(
            f"{what}: out must be writeable and overlap no input (the C loop reads its inputs "
            "through __restrict__ pointers); pass a fresh array"
        )
    return arrays


def bind_loop(function: Callable, arrays: Sequence, *extra) -> Callable[[], None]:
    """The compiled C loop ``function(array pointers..., n, *extra)`` bound to ``arrays``
    (checked by :func:`loop_arrays`, the output last, ``n`` its size) and ``extra`` (ctypes
    values): each call of the result runs the loop and nothing else, and keeps the arrays
    alive while it points into them."""
    pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
    size = ctypes.c_longlong(arrays[-1].size)

    def loop() -> None:
        function(*pointers, size, *extra)

    loop.arrays = arrays  # the arrays live as long as the loop that points into them
    return loop
