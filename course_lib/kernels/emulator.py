"""A CPU emulator of CUDA C: the same ``.cu`` text, compiled with g++, run on NumPy arrays.

``compile_module(source)`` puts :file:`emulator_prelude.hpp` in front of the CUDA source,
compiles it with ``g++ -std=c++20`` into a shared library (cached on disk by a hash of the
text), and returns an :class:`EmulatedModule`. Its kernels are called like CuPy's
``RawKernel``: ``kernel(grid, block, args, shared_mem=0)``, with NumPy arrays where CuPy
takes device arrays.

How it runs a launch: blocks one after another; inside a block, a kernel that never
synchronises runs its threads one after another, and a kernel that calls ``__syncthreads()``
or a warp-level function (``__shfl_down_sync`` and friends, ``__syncwarp``) runs each CUDA
thread as a *fiber* (a coroutine on one OS thread) that executes until its next barrier or
warp-level call, after which the next thread runs. When the lanes of a warp all wait at
warp-level calls they exchange values and continue; when every thread waits at the same
barrier they all continue. Fibers rather than one OS thread per CUDA thread: the results are
the same (both give each CUDA thread its own stack and make the barrier a real barrier) and
fibers switch about ten times faster, because no OS scheduler is involved.

Where the OS can fork, the compiled library is never loaded into this interpreter: loading
runs the source's code at file scope (static initialisers), which may crash or loop. A
short-lived child process reads the kernels' signatures, and each launch loads the library in
its own child, under the launch time limit; a library that crashes or hangs while loading
raises :class:`KernelLaunchError`. Arrays passed for ``const T*`` parameters may be read-only; for
other pointers they are refused (the kernel's writes would be lost). The kernel works on copies
of the arrays (arguments that share memory, an array passed twice, share their copy), each
between two pages no access may touch: an index past either end of an array faults, and the
error names the block and thread (not the array nor the index). A copy keeps its array's
address modulo 16, so the bytes up to the next 16-byte boundary after the end (and those
before the start, on its first page) are no fault: they hold 0xFF bytes, so a read there gives
NaN (or -1), and a write there is reported naming the argument and the index.

Inside :func:`course_lib.kernels.profile`, launches run a second build of the same source
that counts every global and shared memory access (see :mod:`.profiling`); outside it, the
plain build runs and nothing is counted. An atomic (``atomicAdd``, ``atomicCAS``, ...) runs as
a plain read and write of its address, and is counted as such: one global load and one global
store per thread (``global_loads``, ``global_stores``), one load request and one store request
per warp (``global_load_requests``, ``global_store_requests``) with their sectors. Nsight
Compute counts it as one atomic request instead (``l1tex__t_requests_pipe_lsu_mem_global_op_atom``,
or ``..._op_red`` when the result is unused) and as neither a load nor a store; and g++ may
merge a thread's successive atomics to one address into one read and one write.

Limits, honestly: no timing, no caches, no race detection (threads never interleave between
synchronisations, so a missing ``__syncthreads()`` can go unnoticed), bounds checked only as
said above (and not where the OS cannot fork), ``float`` arithmetic is the host's (no fused
multiply-add contraction, libm's ``expf``). Barrier and warp-call misuse *is* detected: threads
waiting at different barriers (told apart even on one line), a thread returning while others
wait, a shuffle mask naming lanes that never come, a lane at ``__syncwarp()`` while another
shuffles.
Warp votes, inline PTX, textures and cooperative groups are rejected with a clear error.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import mmap
import os
import re
import select
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import backend
from . import profiling
from .errors import KernelLaunchError, UnsupportedConstructError
from .native import build_library, compiler
from .sources import KERNEL_DIR, blank_comments, expand_includes, kernel_names, read_source

TIMEOUT_ENV = "COURSE_LIB_KERNEL_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 60.0

MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SHARED_BYTES = 48 * 1024  # CUDA's default limit without an opt-in attribute

_UNSUPPORTED = (
    (r"\b__shfl(_up|_down|_xor)?\s*\(", "warp shuffles without a mask (removed in CUDA 9)",
     "use __shfl_sync, __shfl_up_sync, __shfl_down_sync or __shfl_xor_sync"),
    (r"\b__(ballot|any|all|match_\w+|reduce_\w+)_sync\b|\b__activemask\b",
     "warp votes, matches and reductions", "use __shfl_*_sync, or shared memory"),
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
# a __device__ variable (not a function, nor const): ";", "=" or "[" before any "(" or "{"
# (but those of __align__(n))
_DECLARED = r"(?:[^;{}()=\[]|__align__\s*\(\s*\d+\s*\))*"
_DEVICE_VARIABLE = re.compile(rf"\b__device__\b(?={_DECLARED}[;=\[])(?!{_DECLARED}\bconst\b)")
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
_MESSAGE_BYTES = 1024
_MAX_COUNTERS = 64
# What the child writes back: status (4 bytes), error message, counters (8 bytes each).
_REPORT_BYTES = 4 + _MESSAGE_BYTES + 8 * _MAX_COUNTERS
_SYNCHRONISES = re.compile(r"\b__syncthreads\s*\(|\b__shfl_(up_|down_|xor_)?sync\b|\b__syncwarp\b")
_FAILED_BEFORE_REPORT = -(2**31)
_STRING_BYTES = 4096  # room for each string a library reports to the parent


def launch_timeout() -> float:
    """Seconds a launch may run: ``$COURSE_LIB_KERNEL_TIMEOUT``, default 60."""
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        seconds = float(text) if text else DEFAULT_TIMEOUT_SECONDS
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise KernelLaunchError(f"{TIMEOUT_ENV}={text!r}: give a positive number of seconds")
    return seconds


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two C-contiguous arrays of one dtype and shape hold the same bytes (NaNs too)."""
    return a.tobytes() == b.tobytes()


@dataclass
class _Guarded:
    """One region of host memory (the arguments that overlap in it), copied into memory
    shared with forked children between two pages no access may touch. The bytes between the
    copy and those pages hold 0xFF; ``body`` is everything between the pages."""

    body: np.ndarray  # uint8
    first: int  # the copy's first byte in body
    last: int  # one past its last byte
    members: list[int]  # the arguments in the region


def _guarded_copies(args: Sequence) -> tuple[list, list[_Guarded]]:
    """``args`` with each array replaced by a copy in memory shared with forked children, each
    between two inaccessible pages, so that an index past either end faults. Arguments that
    share memory (an array passed twice, overlapping views) share their copy too, as they
    would on a GPU. A copy keeps its address modulo 16 (vector loads, alignment checks)."""
    spans = sorted((a.ctypes.data, a.ctypes.data + a.nbytes, k) for k, a in enumerate(args)
                   if isinstance(a, np.ndarray))  # fmt: skip
    regions: list[tuple[int, int, list[int]]] = []
    for begin, end, k in spans:
        if regions and begin < regions[-1][1]:
            regions[-1] = (regions[-1][0], max(end, regions[-1][1]), regions[-1][2] + [k])
        else:
            regions.append((begin, end, [k]))
    copies, guarded = list(args), []
    for begin, end, members in regions:
        tail = -end % 16  # so that the copy starts where ``begin`` does modulo 16
        pages = max(1, -(-(end - begin + tail) // mmap.PAGESIZE))
        buffer = mmap.mmap(-1, (pages + 2) * mmap.PAGESIZE)
        body = np.frombuffer(buffer, np.uint8, pages * mmap.PAGESIZE, mmap.PAGESIZE)
        body[...] = 0xFF
        last = body.size - tail
        first = last - (end - begin)
        for k in members:
            start = first + args[k].ctypes.data - begin
            copies[k] = body[start : start + args[k].nbytes].view(args[k].dtype)
            copies[k] = copies[k].reshape(args[k].shape)
            copies[k][...] = args[k]
        for page in (0, pages + 1):
            _protect(body.ctypes.data + (page - 1) * mmap.PAGESIZE)
        guarded.append(_Guarded(body, first, last, members))
    return copies, guarded


def _protect(address: int) -> None:
    """Make the page at ``address`` inaccessible (``mprotect``; where there is none, it stays
    readable and an overrun into it goes unnoticed)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mprotect(ctypes.c_void_p(address), ctypes.c_size_t(mmap.PAGESIZE), 0)


def _overrun(guarded: list[_Guarded], args: Sequence, kinds: Sequence[str]) -> str | None:
    """Where a launch wrote outside its arrays (between a copy and its guard pages): which
    argument, and the index written, or None."""
    for region in guarded:
        written = np.flatnonzero(region.body[: region.first] != 0xFF)
        after = np.flatnonzero(region.body[region.last :] != 0xFF)
        if not (written.size or after.size):
            continue
        byte = int(written[0]) if written.size else region.last + int(after[0])
        starts = {k: args[k].ctypes.data - args[region.members[0]].ctypes.data
                  for k in region.members}  # fmt: skip
        lowest = min(starts.values())
        if written.size:  # before the region: the argument that starts it
            k = next(k for k in region.members if starts[k] == lowest)
        else:  # after it: the argument that ends it
            k = max(region.members, key=lambda k: starts[k] + args[k].nbytes)
        index = (byte - region.first - (starts[k] - lowest)) // args[k].itemsize
        return (f"out-of-bounds write to argument {k} ({kinds[k]}, {args[k].size} elements) "
                f"at index {index}")  # fmt: skip
    return None


def _wait_for(pid: int, timeout: float) -> int | None:
    """The wait status of child ``pid``, or None if it ran past ``timeout`` seconds (then it
    is killed; so it is on Ctrl-C or any other exception while waiting)."""
    deadline, pause = time.monotonic() + timeout, 1e-4
    exited = _exit_notice(pid)
    try:
        while time.monotonic() <= deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if exited is None:
                time.sleep(pause)
                pause = min(2 * pause, 0.02)
            else:  # woken the moment the child exits
                select.select([exited], [], [], max(deadline - time.monotonic(), 0))
    except BaseException:  # Ctrl-C (KeyboardInterrupt), or an exercise's time limit
        _kill(pid)
        raise
    finally:
        if exited is not None:
            os.close(exited)
    _kill(pid)
    return None


def _exit_notice(pid: int) -> int | None:
    """A file descriptor that becomes readable when child ``pid`` exits (Linux's pidfd), or
    None where there is none (then the waiting polls)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """In a launch child: be killed when the parent dies (a notebook kernel restarted while
    a kernel spins), instead of spinning on, orphaned, at 100 % of a core. Linux's
    ``PR_SET_PDEATHSIG``; where there is none, the parent's watchdog is the only limit."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _in_child(work: Callable[[], int]) -> int:
    """Fork a child that runs ``work`` and exits with its result (1 if it raised: the traceback
    goes to stderr); the child dies with this process. Returns the child's pid."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # leave without Python's exit handlers, whatever happens
        faulthandler.disable()  # a crash is reported by the parent, not dumped here
        _die_with(parent)
        code = work()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


@functools.cache
def _loaded(library: Path) -> ctypes.CDLL:
    """``library`` loaded into this process, which runs its static initialisers (user code at
    file scope). Called in launch and probe children only, or in-process where there is no
    ``fork``."""
    return ctypes.CDLL(str(library))


def _strings_of(library: ctypes.CDLL, functions: Sequence[str]) -> list[str]:
    """What the library's ``const char* f()`` functions return."""
    results = []
    for name in functions:
        function = getattr(library, name)
        function.restype = ctypes.c_char_p
        results.append(function().decode())
    return results


@functools.cache
def _library_strings(library: Path, functions: tuple[str, ...], filename: str) -> tuple[str, ...]:
    """What ``functions`` of ``library`` return, asked in a short-lived child under the launch
    time limit, so that the library's static initialisers never run in this interpreter: one
    that crashes or hangs raises :class:`KernelLaunchError` here. Cached per library."""
    if not hasattr(os, "fork"):
        return tuple(_strings_of(_loaded(library), functions))
    report = mmap.mmap(-1, _STRING_BYTES * len(functions) + 1)  # the last byte: finished

    def ask() -> int:
        for k, text in enumerate(_strings_of(_loaded(library), functions)):
            data = text.encode()[: _STRING_BYTES - 1]
            report[k * _STRING_BYTES : k * _STRING_BYTES + len(data)] = data
        report[-1] = 1
        return 0

    timeout = launch_timeout()
    _check_loaded(_wait_for(_in_child(ask), timeout), report[-1] == 1, filename, timeout)
    return tuple(report[k * _STRING_BYTES : (k + 1) * _STRING_BYTES].split(b"\0", 1)[0].decode()
                 for k in range(len(functions)))  # fmt: skip


def _check_loaded(wait_status: int | None, finished: bool, filename: str, timeout: float) -> None:
    """Raise :class:`KernelLaunchError` unless the child that loaded the library finished."""
    at_load = (
        "Code at file scope runs whenever the library is loaded (a static initialiser: a "
        "global variable initialised by calling a function or a lambda); it ran in a separate "
        "process, so Python is unharmed. Initialise globals with constants"
    )
    if wait_status is None:
        raise KernelLaunchError(
            f"{filename}: loading the compiled kernels did not finish within {timeout:g} s and "
            f"was stopped, before any kernel ran. {at_load}, and never loop there (allow longer "
            f"with {TIMEOUT_ENV}=seconds)"
        )
    if os.WIFSIGNALED(wait_status):
        name = signal.Signals(os.WTERMSIG(wait_status)).name
        raise KernelLaunchError(
            f"{filename}: the compiled kernels crashed ({name}) while loading, before any "
            f"kernel ran. {at_load}"
        )
    if not finished:
        raise KernelLaunchError(
            f"{filename}: the compiled kernels could not be loaded (the loading process exited "
            f"with status {os.WEXITSTATUS(wait_status)}; see stderr). {at_load}"
        )


def emulator_available() -> bool:
    """True when a C++ compiler is found (the emulator needs g++ or a compatible one)."""
    return compiler() is not None


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
        return f"{kind}* {name} = reinterpret_cast<{kind}*>(::clemu::builtin.dynamic_shared);"

    return _EXTERN_SHARED.sub(replace, text)


_STATIC_SHARED = re.compile(r"\b__shared__\b([^;{}]*);")
# g++ leaves the static variables of a template out of their section (clemu_shared), so the
# prelude's poison_shared misses a template's __shared__ arrays: the first thread of each block
# to reach the declaration fills them with 0xFF bytes instead (a call the counting build does
# not count, since the helper is not instrumented).
_POISON_ONCE = """namespace clemu {
CLEMU_PLAIN inline void poison_once(void* variable, std::size_t bytes, unsigned long long& seen) {
    const dim3 b = builtin.block_idx, g = builtin.grid_dim;
    const unsigned long long block = 1 + b.x + 1ull * g.x * (b.y + 1ull * g.y * b.z);
    if (seen != block) std::memset(variable, 0xFF, bytes);
    seen = block;
}
}  // namespace clemu"""


def _in_template(text: str, position: int) -> bool:
    """Whether ``position`` lies in a template: in a block whose head (the text since the
    previous ``;``, ``{`` or ``}``) has a line starting with ``template``."""
    depth = 0
    for k in range(position - 1, -1, -1):
        if text[k] in "{}" and (depth := depth + (1 if text[k] == "}" else -1)) < 0:
            depth = 0
            head = text[max(text.rfind(c, 0, k) for c in ";{}") + 1 : k]
            if re.search(r"(?m)^\s*template\s*<", head):
                return True
    return False


def _poison_template_shared(text: str) -> str:
    """After each ``__shared__`` declaration in a template (function or class), a call that
    fills the variables with 0xFF bytes once per block (see ``_POISON_ONCE``); no line is
    added."""

    def replace(match: re.Match) -> str:
        if not _in_template(text, match.start()):
            return match.group(0)
        declarators = re.sub(r"\[[^\]]*\]|\([^)]*\)|=.*", "", match.group(1)).split(",")
        calls = []
        for declarator in declarators:
            name = re.findall(r"[A-Za-z_]\w*", declarator)[-1]
            calls.append(
                f"static unsigned long long clemu_seen_{name} = 0; "
                f"::clemu::poison_once(&{name}, sizeof {name}, clemu_seen_{name});"
            )
        return f"{match.group(0)} {' '.join(calls)}"

    return _STATIC_SHARED.sub(replace, text)


def translate(source: str, filename: str = "module.cu") -> tuple[str, list[str], bool]:
    """The C++ translation unit for ``source``, its kernel names, and whether it synchronises
    (barriers or warp-level calls: then its threads run as fibers). File-scope ``__device__``
    variables are put in a section of their own, so that the counting build counts them as
    global memory.

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
    body = _poison_template_shared(_rewrite_extern_shared(text, filename))
    body = _DEVICE_VARIABLE.sub("__device__ CLEMU_DEVICE_VARIABLE", body)
    if not body.lstrip().startswith("#line"):
        body = f'#line 1 "{filename}"\n{body}'
    prelude = expand_includes((KERNEL_DIR / "emulator_prelude.hpp").read_text("utf-8"),
                              "emulator_prelude.hpp")  # fmt: skip
    exports = "\n".join(f"CLEMU_EXPORT({name})" for name in names)
    unit = f'{prelude}\n{_POISON_ONCE}\n{body}\n#line 1 "<exports>"\n{exports}\n'
    return unit, names, bool(_SYNCHRONISES.search(text))


@dataclass(frozen=True)
class Build:
    """A compiled library a launch runs, and the names of the counters it reports (none for
    the plain build; the counting build's, inside :func:`course_lib.kernels.profile`)."""

    library: Path
    counter_names: tuple[str, ...] = ()


class EmulatedKernel:
    """One ``__global__`` function of an :class:`EmulatedModule`; call it like a RawKernel."""

    def __init__(self, module: EmulatedModule, name: str, signature: str, uses_barriers: bool):
        self.name = name
        self.filename = module.filename
        self.uses_barriers = uses_barriers  # barriers or warp-level calls: threads are fibers
        self._module = module
        kinds = signature.split(",") if signature else []
        self.param_types: tuple[str, ...] = tuple(k.removeprefix("const ") for k in kinds)
        #: Positions of the ``const T*`` parameters: arrays the kernel only reads.
        self.const_params = tuple(k for k, kind in enumerate(kinds) if kind.startswith("const "))
        self._written = tuple(k for k, kind in enumerate(kinds)
                              if kind.endswith("*") and k not in self.const_params)  # fmt: skip
        self._read = tuple(k for k in self.const_params if kinds[k].endswith("*"))

    def __repr__(self) -> str:
        return f"EmulatedKernel({self.name}({', '.join(self.param_types)}))"

    def __call__(
        self, grid: int | Sequence[int], block: int | Sequence[int], args: Sequence,
        shared_mem: int = 0,
    ) -> None:  # fmt: skip
        """Run the kernel on ``grid`` blocks of ``block`` threads (CuPy's call shape).

        Where the OS can fork, the launch runs in a child process under a watchdog: a kernel
        that hangs (threads spinning on each other's flags), takes longer than
        ``$COURSE_LIB_KERNEL_TIMEOUT`` seconds (default 60) or crashes raises
        :class:`KernelLaunchError` here instead of freezing or killing Python; Ctrl-C stops it.
        Inside :func:`course_lib.kernels.profile` the launch's memory accesses are counted.
        """
        grid3, block3 = self._dims(grid, "grid"), self._dims(block, "block")
        self._check_config(grid3, block3, shared_mem)
        self._marshal(args)  # bad arguments are reported here, before anything runs
        build = self._module.build(profiling.counting())  # compiled here, not in the child
        run = self._run_in_child if hasattr(os, "fork") else self._run
        with _LAUNCH_LOCK:
            status, message, counters = run(build, grid3, block3, args, shared_mem)
        if status != 0:
            raise KernelLaunchError(f"{self.filename}: kernel {self.name}: {message}")
        if build.counter_names:
            profiling.record(profiling.Launch(self.name, self.filename, grid3, block3,
                                              shared_mem, counters))  # fmt: skip

    def _run(self, build: Build, grid3, block3, args: Sequence, shared_mem: int):
        """The launch, in this process: (status, error message, counters or None)."""
        library = _loaded(build.library)
        values = self._marshal(args)
        pointers = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
        )
        # The dynamic shared buffer starts on a 128-byte boundary, so its first word sits in
        # bank 0, as on a GPU. The library fills it (and the static __shared__ variables) with
        # 0xFF bytes before each block: a word read before any thread wrote it is NaN (or -1).
        shared = np.full(max(shared_mem, 1) + 128, 0xFF, dtype=np.uint8)
        address = shared.ctypes.data + (-shared.ctypes.data) % 128
        counting = bool(build.counter_names)
        if counting:
            arrays = [a for a in args if isinstance(a, np.ndarray)]
            self._begin_counting(library, arrays, address, shared_mem)
        error = ctypes.create_string_buffer(_MESSAGE_BYTES)
        launch = getattr(library, f"clemu_launch_{self.name}")
        launch.restype = ctypes.c_int
        status = launch(
            (ctypes.c_uint * 3)(*grid3), (ctypes.c_uint * 3)(*block3),
            ctypes.c_void_p(address), ctypes.c_size_t(shared_mem), pointers,
            int(self.uses_barriers), error,
            ctypes.c_size_t(len(error)),
        )  # fmt: skip
        counters = None
        if counting and status == 0:
            counters = _read_counters(library, build.counter_names)
        return status, error.value.decode(errors="replace"), counters

    def _begin_counting(self, library, arrays, shared_address: int, shared_mem: int) -> None:
        """Tell the counting library where global memory (the arrays) and shared memory are
        (it finds the ``__device__`` variables, global too, and the ``__shared__`` ones
        itself)."""
        ranges = [(a.ctypes.data, a.nbytes, 0) for a in arrays] + [(shared_address, shared_mem, 1)]
        begins, sizes, spaces = zip(*ranges)
        n = len(ranges)
        status = library.clemu_count_begin(
            (ctypes.c_size_t * n)(*begins), (ctypes.c_size_t * n)(*sizes),
            (ctypes.c_int * n)(*spaces), n,
        )  # fmt: skip
        if status != 0:
            raise KernelLaunchError(f"kernel {self.name}: cannot count this launch (too many "
                                    "arrays, or out of memory)")  # fmt: skip

    def _run_in_child(self, build: Build, grid3, block3, args: Sequence, shared_mem: int):
        """The launch in a forked child, the only process that loads the library. The kernel
        works on guarded copies of the arrays (see :func:`_guarded_copies`) in memory shared
        with the child: an index past either end of an array faults, and a write to the bytes
        between the array and the guard pages is reported with its index. The copies of
        non-``const`` arrays are copied back after; so are those of ``const`` arrays the kernel
        changed all the same (casting ``const`` away writes on a GPU too: an exercise's
        input-written check must see it)."""
        copies, guarded = _guarded_copies(args)
        report = mmap.mmap(-1, _REPORT_BYTES)
        report[:4] = _FAILED_BEFORE_REPORT.to_bytes(4, "little", signed=True)

        def launch() -> int:
            _write_report(report, *self._run(build, grid3, block3, copies, shared_mem))
            return 0

        self._check_finished(_wait_for(_in_child(launch), launch_timeout()))
        status, message, counters = _read_report(report, build.counter_names)
        if status != _FAILED_BEFORE_REPORT:
            for k in self._written:
                args[k][...] = copies[k]
            for k in self._read:
                if args[k].flags.writeable and not _same_bytes(args[k], copies[k]):
                    args[k][...] = copies[k]
            overrun = _overrun(guarded, args, self.param_types)
            if overrun:
                status, message, counters = 1, overrun, None
        return status, message, counters

    def _check_finished(self, wait_status: int | None) -> None:
        """Raise :class:`KernelLaunchError` if the launch child hung or crashed."""
        if wait_status is None:
            raise KernelLaunchError(
                f"{self.filename}: kernel {self.name} did not finish within "
                f"{launch_timeout():g} s and was stopped. Do its threads wait for each other "
                "without __syncthreads() (the emulator runs them one after another until a "
                f"barrier), or loop forever? Allow longer with {TIMEOUT_ENV}=seconds"
            )
        if os.WIFSIGNALED(wait_status):
            name = signal.Signals(os.WTERMSIG(wait_status)).name
            raise KernelLaunchError(
                f"{self.filename}: kernel {self.name} crashed ({name}); look for an index "
                "out of bounds of an array"
            )

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
            return self._pointer(where, kind[:-1], value, read_only=index in self.const_params)
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
    def _pointer(where: str, kind: str, value, read_only: bool) -> ctypes.c_void_p:
        """The address of array ``value``; ``read_only``: the parameter is ``const``."""
        if not isinstance(value, np.ndarray):
            device = backend.device_of(value)
            found = f"an array of the {device!r} device" if device else type(value).__name__
            raise KernelLaunchError(
                f"{where}: the emulator runs on NumPy arrays in host memory, got {found}; "
                "pass course_lib.to_numpy(array)"
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
        if not (read_only or value.flags.writeable):
            raise KernelLaunchError(
                f"{where}: the array is read-only (a broadcast view, or writeable=False) but the "
                "parameter is not const, so the kernel's writes would be lost; declare it "
                "const (const float* x) if the kernel only reads it, or pass a writable copy"
            )
        return ctypes.c_void_p(value.ctypes.data)


def _counter_names(text: str) -> tuple[str, ...]:
    """The counters a counting library reports, in its order (it names them itself)."""
    names = tuple(text.strip(",").split(","))
    if len(names) > _MAX_COUNTERS:
        raise KernelLaunchError(f"the counting library reports {len(names)} counters; the "
                                f"launch report holds {_MAX_COUNTERS}")  # fmt: skip
    return names


def _read_counters(library: ctypes.CDLL, names: tuple[str, ...]) -> dict[str, int]:
    values = (ctypes.c_ulonglong * len(names))()
    library.clemu_count_read(values)
    return dict(zip(names, values))


def _write_report(report: mmap.mmap, status: int, message: str, counters) -> None:
    """In a launch child: its status, error message and counters, for the parent."""
    text = message.encode()[:_MESSAGE_BYTES]
    report[4 : 4 + len(text)] = text
    values = np.array(list((counters or {}).values()), dtype=np.uint64)
    report[4 + _MESSAGE_BYTES : 4 + _MESSAGE_BYTES + values.nbytes] = values.tobytes()
    report[:4] = status.to_bytes(4, "little", signed=True)


def _read_report(report: mmap.mmap, counter_names: tuple[str, ...]):
    """What a launch child reported: (status, error message, counters or None)."""
    status = int.from_bytes(report[:4], "little", signed=True)
    if status == _FAILED_BEFORE_REPORT:
        return status, "the launch failed before it could report (see stderr)", None
    message = report[4 : 4 + _MESSAGE_BYTES].split(b"\0", 1)[0].decode(errors="replace")
    counters = None
    if counter_names and status == 0:
        values = np.frombuffer(report, np.uint64, len(counter_names), 4 + _MESSAGE_BYTES)
        counters = dict(zip(counter_names, values.tolist()))
    return status, message, counters


class EmulatedModule:
    """CUDA C compiled for the CPU; the emulator's counterpart of ``cupy.RawModule``.

    The compiled library is never loaded into this process: a short-lived child reads the
    kernels' signatures, and each launch loads it in its own child (where ``fork`` exists).
    """

    def __init__(self, source: str, filename: str = "module.cu"):
        self._unit, names, uses_barriers = translate(source, filename)
        self.filename = filename
        self.source = source
        self.library_path = build_library(self._unit, filename)
        self._plain = Build(self.library_path)
        self._counting: Build | None = None
        signatures = _library_strings(
            self.library_path, tuple(f"clemu_signature_{n}" for n in names), filename
        )
        self._kernels = {n: EmulatedKernel(self, n, signature, uses_barriers)
                         for n, signature in zip(names, signatures)}  # fmt: skip

    def build(self, counting: bool = False) -> Build:
        """The library a launch runs: the plain build, or the one that counts memory accesses
        (compiled on first use, then cached) with its counters' names."""
        if not counting:
            return self._plain
        if self._counting is None:
            library = build_library(self._unit, self.filename, counting=True)
            (names,) = _library_strings(library, ("clemu_count_names",), self.filename)
            self._counting = Build(library, _counter_names(names))
        return self._counting

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
