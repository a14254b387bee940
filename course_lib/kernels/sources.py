"""The CUDA C sources shipped in this package, and small text utilities on CUDA C.

Every kernel file is ordinary CUDA C: NVRTC, CuPy's ``RawModule`` and the CPU emulator all
read the same text. Local headers (``#include "block_reduce.cuh"``) are expanded here with
``#line`` markers, so compilers still report errors against the right file and line.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from .errors import KernelCompileError

KERNEL_DIR = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[ \t]*$', re.MULTILINE)
_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"  # optional, between void and the name
_KERNEL = re.compile(rf'extern\s+"C"\s+__global__\s+void\s+{_BOUNDS}(\w+)\s*\(')
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.DOTALL)


def kernel_files() -> list[str]:
    """File names of the kernel sources (``*.cu``), sorted."""
    return sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


def expand_includes(text: str, filename: str, directory: Path = KERNEL_DIR) -> str:
    """Inline ``#include "name"`` directives found in ``directory``, keeping line numbers."""

    def inline(match: re.Match) -> str:
        header = directory / match.group(1)
        if not header.is_file():
            line = text.count("\n", 0, match.start()) + 1
            raise KernelCompileError(
                f"{filename}:{line}: included file {match.group(1)!r} not found in {directory}"
            )
        after = text.count("\n", 0, match.end()) + 2
        body = expand_includes(header.read_text("utf-8"), header.name, directory)
        return f'#line 1 "{header.name}"\n{body}\n#line {after} "{filename}"'

    return f'#line 1 "{filename}"\n' + _INCLUDE.sub(inline, text)


@functools.cache
def read_source(filename: str) -> str:
    """The text of a packaged kernel file with its local includes expanded (read once per
    process: a launch looks its kernel up without touching the file system)."""
    path = KERNEL_DIR / filename
    if path.suffix != ".cu" or not path.is_file():
        raise KernelCompileError(
            f"no kernel file {filename!r}; the package ships {', '.join(kernel_files())}"
        )
    return expand_includes(path.read_text("utf-8"), filename)


def blank_comments(text: str) -> str:
    """``text`` with its comments replaced by spaces (newlines and string literals kept)."""
    return _COMMENT_OR_STRING.sub(
        lambda m: m.group(0) if m.group(0).startswith('"') else re.sub(r"[^\n]", " ", m.group(0)),
        text,
    )


def kernel_source(filename: str, name: str | None = None) -> str:
    """The source of one kernel (with the comment block above it) for display; the whole file
    when ``name`` is None."""
    text = (KERNEL_DIR / filename).read_text("utf-8")
    if name is None:
        return text
    match = re.search(rf'extern\s+"C"\s+__global__\s+void\s+{_BOUNDS}{re.escape(name)}\s*\(', text)
    if match is None:
        raise KernelCompileError(f"{filename} has no kernel {name!r}")
    lines = text[: match.start()].split("\n")
    start = len(lines) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("//"):
        start -= 1
    depth, end = 0, text.index("{", match.end())
    while True:
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth == 0:
            return "\n".join(lines[start:]) + text[match.start() : end + 1]
        end += 1


def kernel_names(text: str) -> list[str]:
    """Names of the ``extern "C" __global__`` functions defined in ``text``, in order."""
    return _KERNEL.findall(blank_comments(text))
