"""Compile kernels with NVRTC for real GPU architectures, without a GPU.

CuPy's ``RawModule.compile()`` needs a device, but NVRTC itself does not: the low-level
``cupy.cuda.nvrtc`` API (``createProgram``, ``compileProgram``, ``getPTX``/``getCUBIN``) runs
anywhere the NVRTC library is installed (the ``nvidia-cuda-nvrtc-cu12`` wheel in the test
extra). For a real architecture (``sm_80``) ptxas also runs and reports each kernel's
registers and static shared memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import KernelCompileError
from .sources import read_source

ARCHITECTURES = ("sm_80", "sm_90")  # Ampere (A100) and Hopper (H100)
_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_USAGE = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reports for one kernel on one architecture."""

    registers: int
    shared_bytes: int  # static __shared__ memory; dynamic shared memory comes at launch
    stack_bytes: int
    spill_bytes: int


@dataclass(frozen=True)
class Compiled:
    """The result of one NVRTC compilation."""

    filename: str
    arch: str
    ptx: str
    cubin: bytes | None  # machine code, for a real architecture (sm_XX) only
    log: str
    resources: dict[str, ResourceUsage] = field(default_factory=dict)


def _nvrtc():
    try:
        from cupy.cuda import nvrtc  # noqa: PLC0415

        nvrtc.getVersion()
    except Exception as exc:  # CuPy missing, or no NVRTC library found
        raise KernelCompileError(
            "NVRTC is not available: install the test extra (cupy-cuda12x and "
            f"nvidia-cuda-nvrtc-cu12) to compile kernels without a GPU ({exc})"
        ) from exc
    return nvrtc


def _text(value: str | bytes) -> str:
    """NVRTC returns bytes or str depending on the CuPy version; both end in a NUL."""
    return (value.decode() if isinstance(value, bytes) else value).rstrip("\0")


def nvrtc_available() -> bool:
    """True when CuPy's NVRTC bindings and the NVRTC library are installed."""
    try:
        _nvrtc()
    except KernelCompileError:
        return False
    return True


def parse_resources(log: str) -> dict[str, ResourceUsage]:
    """Registers, shared memory, stack and spills per kernel from a ``ptxas -v`` log."""
    usage, name, stack = {}, None, (0, 0)
    for line in log.splitlines():
        if entry := _ENTRY.search(line):
            name, stack = entry.group(1), (0, 0)
        elif (frame := _STACK.search(line)) and name:
            stack = (int(frame.group(1)), int(frame.group(2)))
        elif (used := _USAGE.search(line)) and name:
            usage[name] = ResourceUsage(
                registers=int(used.group(1)), shared_bytes=int(used.group(2) or 0),
                stack_bytes=stack[0], spill_bytes=stack[1],
            )  # fmt: skip
    return usage


def compile_source(source: str, filename: str = "module.cu", arch: str = "sm_80") -> Compiled:
    """Compile CUDA C for ``arch`` (``compute_XX``: PTX only; ``sm_XX``: PTX, cubin, usage).

    Raises :class:`KernelCompileError` with NVRTC's log (``file.cu(line): error: ...``).
    """
    if not re.fullmatch(r"(sm|compute)_\d+a?", arch):
        raise KernelCompileError(f"architecture {arch!r} should look like 'sm_80' or 'compute_80'")
    nvrtc = _nvrtc()
    program = nvrtc.createProgram(source, filename, [], [])
    options = [f"--gpu-architecture={arch}", "--std=c++17"]
    if arch.startswith("sm_"):
        options.append("--ptxas-options=-v")
    try:
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError as exc:
            log = _text(nvrtc.getProgramLog(program)).strip()
            raise KernelCompileError(
                f"NVRTC could not compile {filename} for {arch}:\n{log}"
            ) from exc
        log = _text(nvrtc.getProgramLog(program))
        cubin = nvrtc.getCUBIN(program) if arch.startswith("sm_") else None
        return Compiled(filename, arch, _text(nvrtc.getPTX(program)), cubin, log,
                        parse_resources(log))  # fmt: skip
    finally:
        nvrtc.destroyProgram(program)


def compile_file(filename: str, arch: str = "sm_80") -> Compiled:
    """Compile a packaged kernel file, e.g. ``compile_file("softmax.cu", "sm_90")``."""
    return compile_source(read_source(filename), filename, arch)
