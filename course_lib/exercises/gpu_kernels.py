"""Notebook 07: CUDA kernels, run in the CPU emulator (or on the GPU when there is one).

The answer is CUDA C source. It is compiled (by g++ for the emulator, by NVRTC on a GPU), run
on ragged sizes with several launch shapes, and its output compared with NumPy; the verdict
reads the same on either (nbval compares it on every machine). The output
array is longer than ``n`` and filled with a marker value, so elements never written and
writes past the end both show. The kernel machinery is imported only when a kernel is checked.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re

import numpy as np

from .core import Mistake, NotDone, Wrong, call, close, exercise, first_match, mismatch, require

PAD = 64  # extra elements after the end of every array: writes there are out of bounds
MARK = np.float32(-12345.0)  # what the output holds before the kernel runs
LAUNCH_SECONDS = 5.0  # the watchdog of each emulated launch (and of loading the kernel)

NO_GUARD = Mistake(
    "no-bounds-check",
    "the grid is rounded up to whole blocks, so the last threads are past the end (i >= n, or "
    "a row or column past the matrix): they must not touch memory. Guard the work with the "
    "bound of the index each thread owns (if (i < n), if (row < rows && col < cols)).",
)
MISSED = Mistake(
    "missed-elements",
    "some elements were never written. Each thread computes its own global index, "
    "i = blockIdx.x * blockDim.x + threadIdx.x (threadIdx.x alone repeats 0 … blockDim.x − 1 "
    "in every block), and the guard keeps every index below the end, the last partial block's "
    "too (i < n, not i < n − 1, and no assumption that n is a multiple of the block).",
)
SIGNATURE = Mistake(
    "signature",
    "keep the signature the exercise gives (the launch passes exactly those arguments).",
)
INPUT_WRITTEN = Mistake(
    "input-written",
    "the inputs are const float*: read them, write only to out. A caller's arrays must be "
    "the same after the launch as before it.",
)


@contextlib.contextmanager
def _launch_timeout(seconds: float):
    """A short watchdog for each emulated launch (an endless loop is stopped, not waited for)."""
    from ..kernels.emulator import TIMEOUT_ENV  # noqa: PLC0415

    saved = os.environ.get(TIMEOUT_ENV)
    os.environ[TIMEOUT_ENV] = str(seconds)
    try:
        yield
    finally:
        if saved is None:
            del os.environ[TIMEOUT_ENV]
        else:
            os.environ[TIMEOUT_ENV] = saved


class _Device:
    """Where the answer runs: the GPU (CuPy) when course_lib uses one, else the emulator."""

    def __init__(self):
        from .. import kernels  # noqa: PLC0415  (the kernel machinery loads here, not on import)

        self.kernels = kernels
        self.gpu = kernels.default_mode() == "gpu"
        if not self.gpu and not kernels.emulator_available():
            raise Wrong(
                "cannot run CUDA here: there is no GPU and no C++ compiler for the emulator"
            )

    def compile(self, source: str, name: str, params: tuple[str, ...]):
        require(
            isinstance(source, str),
            f"the answer must be CUDA C source (a str), got {type(source).__name__}",
        )
        k = self.kernels
        try:
            module = k.gpu.compile_module(source) if self.gpu else self._emulated(source, name)
        except (k.KernelError, RuntimeError) as error:  # CuPy's compile errors are RuntimeErrors
            stage = "load" if isinstance(error, k.KernelLaunchError) else "compile"
            raise Wrong(f"the kernel does not {stage}:\n{_first_lines(str(error))}") from None
        try:
            kernel = module.get_function(name)
        except Exception:
            raise Wrong(
                f"the source defines no kernel named {name}: write "
                f'extern "C" __global__ void {name}(...)'
            ) from None
        # the emulator reports the compiled signature; CuPy's kernels do not: read the source
        declared = declared_params(source, name) if self.gpu else kernel.param_types
        if declared is not None:
            require(
                declared == params,
                f"{name} takes ({', '.join(declared)}); the exercise asks for "
                f"({', '.join(params)})",
                SIGNATURE,
            )
        return kernel

    def emulator(self) -> _Device | None:
        """The CPU emulator as a device: this one where it is the emulator, a twin of it on a
        GPU, ``None`` where there is no g++ (only the emulator counts memory accesses)."""
        if not self.gpu:
            return self
        if not self.kernels.emulator_available():
            return None
        twin = copy.copy(self)
        twin.gpu = False
        return twin

    def _emulated(self, source: str, name: str):
        """The emulated module; loading it (file-scope code runs then) gets the launches'
        short watchdog."""
        with _launch_timeout(LAUNCH_SECONDS):
            return self.kernels.compile_module(source, f"{name}.cu")

    def launch(
        self, kernel, label: str, grid: int | tuple, block: int | tuple, arrays: list,
        scalars: tuple,
    ) -> list:
        """Run the kernel on copies of ``arrays``; return the arrays afterwards (NumPy). The
        grid and the block are a number of blocks and threads, or tuples of them (x, y)."""
        grid, block = _dims(grid), _dims(block)
        if self.gpu:
            import cupy  # noqa: PLC0415

            device = [cupy.asarray(a) for a in arrays]
            call(label, kernel, grid, block, (*device, *scalars), errors=_LAUNCH_ERRORS)
            return [cupy.asnumpy(a) for a in device]
        copies = [a.copy() for a in arrays]
        with _launch_timeout(LAUNCH_SECONDS):
            call(label, kernel, grid, block, (*copies, *scalars), errors=_LAUNCH_ERRORS)
        return copies


def _dims(size: int | tuple) -> tuple:
    return size if isinstance(size, tuple) else (size,)


#: A kernel that crashed or touched memory outside its arrays (the emulator's guard pages, a
#: GPU's "illegal memory access"): most often the threads past the end, unguarded.
_LAUNCH_ERRORS = [(Exception, "crashed", NO_GUARD), (Exception, "illegal memory access", NO_GUARD),
                  (Exception, "out-of-bounds", NO_GUARD)]  # fmt: skip

_C_TYPES = {
    "float": "float32", "double": "float64", "int": "int32", "unsigned int": "uint32",
    "unsigned": "uint32", "long long": "int64", "size_t": "uint64", "bool": "bool",
}  # fmt: skip
_QUALIFIERS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict)\b")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def declared_params(source: str, name: str) -> tuple[str, ...] | None:
    """The parameter types of kernel ``name`` in ``source``, named as the emulator names them
    (``float32*``, ``int32``; qualifiers dropped), or ``None`` when the text is not plain
    enough to read (a macro, a template, a type not listed)."""
    found = re.search(rf"__global__\s+void\s+{re.escape(name)}\s*\(([^)]*)\)",
                      _COMMENTS.sub(" ", source))  # fmt: skip
    if found is None:
        return None
    text = found.group(1).strip()
    if text in ("", "void"):
        return ()
    types = []
    for param in text.split(","):
        param = _QUALIFIERS.sub(" ", param)
        words = param.replace("*", " ").split()[:-1]  # the last word is the parameter's name
        base = _C_TYPES.get(" ".join(words))
        if base is None:
            return None
        types.append(base + "*" * param.count("*"))
    return tuple(types)


def _kernel_exercise(
    exercise_id: str, task: str, mistakes: tuple[Mistake, ...], points: float = 1.0
):
    """Register a CUDA exercise: the answer is source text, not a function, and compiling it
    (g++ or NVRTC) takes far longer than a Python answer may."""
    return exercise(exercise_id, task, mistakes, function=False, time_limit=120.0, points=points)


def _launch_text(grid: int, block: int) -> str:
    return f"{grid} block{'s' if grid > 1 else ''} of {block} threads"


def _first_lines(text: str, count: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[:count])


def _padded(values: np.ndarray, pad: int = PAD, fill: float = MARK) -> np.ndarray:
    return np.concatenate([values.astype(np.float32), np.full(pad, fill, np.float32)])


def _launch(
    device, kernel, label: str, shape: tuple, inputs: dict, size: int, scalars, first: bool,
    pad: int = PAD, past_end: Mistake | None = NO_GUARD, fill: float = MARK,
):
    """Run ``kernel`` on copies of ``inputs`` (name -> array) followed by ``pad`` elements of
    ``fill`` (NaN: a read past the end shows in the result, even times 0) and an output of
    ``size`` elements (plus padding) filled with the marker; return the output after checking
    that exactly its first ``size`` elements were written (a stub that writes nothing on the
    ``first`` launch is not done yet; a write past the end is ``past_end``) and that no input
    changed."""
    padded = [_padded(a.ravel(), pad, fill) for a in inputs.values()]
    *after, out = device.launch(kernel, label, *shape, [*padded, np.full(size + pad, MARK,
                                np.float32)], scalars)  # fmt: skip
    _check_written(out, size, label, first, past_end)
    for name, before, now in zip(inputs, padded, after):
        require(np.array_equal(before, now, equal_nan=True),
                f"{label} changed its input {name}", INPUT_WRITTEN)  # fmt: skip
    return out[:size]


def _check_written(
    out: np.ndarray, n: int, label: str, first: bool, past_end: Mistake | None = NO_GUARD
) -> None:
    """The output was written exactly in its first ``n`` elements."""
    if first and np.all(out == MARK):
        raise NotDone("the kernel writes nothing to out yet (is its body still the stub?)")
    require(
        np.all(out[n:] == MARK),
        f"{label} wrote past the end of out (index {n} and beyond)",
        past_end,
    )
    missed = np.flatnonzero(out[:n] == MARK)
    require(
        missed.size == 0,
        f"{label} never wrote out[{missed[0] if missed.size else 0}] "
        f"({missed.size} of {n} elements untouched)",
        MISSED,
    )


# -- scale_add --------------------------------------------------------------------------------
FORMULA = Mistake("formula", "each thread computes out[i] = a * x[i] + y[i].")

_SCALE_ADD = ("float32*", "float32*", "float32*", "float32", "int32")


@_kernel_exercise(
    "07.scale_add", "CUDA scale_add(x, y, out, a, n): out = a*x + y",
    mistakes=(NO_GUARD, MISSED, FORMULA, SIGNATURE, INPUT_WRITTEN),
)
def check_scale_add(answer) -> str:
    device = _Device()
    kernel = device.compile(answer, "scale_add", _SCALE_ADD)
    rng = np.random.default_rng(70)
    # n = 1000 first: only a stub writes nothing there; at n = 1 so does a kernel that skips
    # the last element (i < n − 1) or the last partial block, wrong rather than "not done"
    cases = [
        (n, b, spare)
        for n in (1000, 1, 31, 32, 33, 4097)
        for b in (32, 128, 256)
        for spare in (0, 1)
    ]
    for count, (n, block, spare) in enumerate(cases):
        grid = -(-n // block) + spare
        x, y = rng.standard_normal((2, n), dtype=np.float32)
        a = np.float32(rng.choice([2.5, -1.0, 0.0]))
        label = f"scale_add with n = {n}, a = {a:g}, on {_launch_text(grid, block)}"
        inputs, scalars = {"x": x, "y": y}, (a, np.int32(n))
        out = _launch(device, kernel, label, (grid, block), inputs, n, scalars, count == 0)
        want = a * x + y
        if not close(out, want, rtol=1e-6, atol=1e-6):
            wrong = [a * (x + y), x + a * y, a * x, x * y + a]
            mistake = FORMULA if any(close(out, w, rtol=1e-6, atol=1e-6) for w in wrong) else None
            raise Wrong(f"{label}: out {mismatch(out, want)}", mistake)
    return (
        f"right on {len(cases)} launches: n from 1 to 4097, blocks of 32 to 256 "
        "threads, spare blocks"
    )


# -- softmax_rows -----------------------------------------------------------------------------
UNSTABLE = Mistake(
    "overflow",
    "expf(100) overflows float32 (inf, then inf/inf = NaN): subtract the row's maximum first, "
    "out[j] = expf(x[j] − m) / Σ expf(x[k] − m).",
)
MAX_START = Mistake(
    "max-start",
    "start the running maximum at the row's first element (or at minus infinity, "
    "__int_as_float(0xff800000): NVRTC has no math.h, so no INFINITY), not at 0: on a row "
    "whose entries are all below about −104, expf(x − 0) underflows to 0 and the row becomes "
    "0/0 = NaN.",
)
SHIFT_MISMATCH = Mistake(
    "shift-mismatch",
    "subtract the same maximum in the sum as in the numerator: "
    "out[j] = expf(x[j] − m) / Σ expf(x[k] − m).",
)
NOT_NORMALISED = Mistake(
    "not-normalised", "divide by the row's sum of exponentials, so that the row sums to 1."
)

_SOFTMAX_ROWS = ("float32*", "float32*", "int32", "int32")


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_mistake(got: np.ndarray, x: np.ndarray) -> Mistake | None:
    if not np.isfinite(got).all():
        return MAX_START if x.max() < -104 else UNSTABLE
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    wrong = [
        (NOT_NORMALISED, lambda: shifted),
        (SHIFT_MISMATCH, lambda: shifted / np.exp(x).sum(axis=-1, keepdims=True)),
    ]
    return first_match(got, wrong, lambda a, b: close(a, b, rtol=1e-5, atol=1e-6))


@_kernel_exercise(
    "07.softmax_rows", "CUDA softmax_rows(x, out, rows, cols): one thread per row",
    mistakes=(UNSTABLE, MAX_START, NOT_NORMALISED, SHIFT_MISMATCH, NO_GUARD, MISSED,
              INPUT_WRITTEN),  # fmt: skip
)
def check_softmax_rows(answer) -> str:
    device = _Device()
    kernel = device.compile(answer, "softmax_rows", _SOFTMAX_ROWS)
    rng = np.random.default_rng(71)
    shapes = [(4, 8, 1.0), (1, 1, 1.0), (33, 7, 3.0), (130, 64, 1.0), (5, 300, 100.0), (7, 3, 1e4),
              (6, 16, -110.0)]  # fmt: skip  (a negative scale: every entry below −104)
    cases = [(rows, cols, scale, b) for rows, cols, scale in shapes for b in (32, 64)]
    for count, (rows, cols, scale, block) in enumerate(cases):
        grid = -(-rows // block)
        x = _softmax_input(rng, rows, cols, scale)
        label = (
            f"softmax_rows on {rows} rows of {cols}, x ~ {scale:g}, {_launch_text(grid, block)}"
        )
        scalars = (np.int32(rows), np.int32(cols))
        got = _launch(device, kernel, label, (grid, block), {"x": x}, rows * cols, scalars,
                      count == 0)  # fmt: skip
        got, want = got.reshape(rows, cols), _softmax(x.astype(np.float64))
        if not close(got, want, rtol=1e-5, atol=1e-6):
            raise Wrong(
                f"{label}: out {mismatch(got, want)}", _softmax_mistake(got, x.astype(np.float64))
            )
    return (f"right on {len(cases)} launches: one row or column, ragged rows, |x| up to 1e4, "
            "rows all below −104")  # fmt: skip


def _softmax_input(rng, rows: int, cols: int, scale: float) -> np.ndarray:
    """Normal values of size ``scale``; a negative scale: every value at or below it (where
    expf underflows to 0 in float32)."""
    if scale < 0:
        return (scale - 10 * np.abs(rng.standard_normal((rows, cols)))).astype(np.float32)
    return (scale * rng.standard_normal((rows, cols))).astype(np.float32)
