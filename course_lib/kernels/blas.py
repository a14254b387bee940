"""GEMM's β through the BLAS NumPy ships: ``C ← A·B + C`` without a second output.

A BLAS matrix product is ``C ← α·A·B + β·C``. ``numpy.matmul`` always asks for β = 0, so a
sum of products ``A₁·B₁ + A₂·B₂`` (the adjoint of an input that several linear layers read,
as Q, K and V read one normalised x) costs an output per product, a zero-fill of each
(OpenBLAS clears C before a β = 0 product) and a pass to add them. :func:`add_product` calls
the same library's ``cblas_sgemm``/``cblas_dgemm`` with β = 1, so the second product is added
into C where it stands. The library is the one NumPy itself loaded (its wheels bundle OpenBLAS
built with 64-bit integers, symbols ``scipy_cblas_sgemm64_``); its threads are NumPy's, so
``perf.limit_threads`` and threadpoolctl set them. Where no such library is found (NumPy built
against another BLAS), :func:`add_product` says so and the caller adds a product instead.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enums
#: Symbols of OpenBLAS built with 64-bit integers (NumPy's wheels since 2.0, then 1.2x's).
SYMBOLS = ("scipy_cblas_{}gemm64_", "cblas_{}gemm64_")
_LETTERS = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}


def library_paths() -> list[str]:
    """The OpenBLAS libraries a NumPy wheel bundles (``numpy.libs`` on Linux and Windows,
    ``numpy/.dylibs`` on macOS)."""
    root = os.path.dirname(np.__file__)
    return sorted(glob.glob(os.path.join(root + ".libs", "*openblas*"))
                  + glob.glob(os.path.join(root, ".dylibs", "*openblas*")))  # fmt: skip


@functools.cache
def gemm(dtype: np.dtype):
    """``cblas_?gemm`` for float32 or float64 from NumPy's OpenBLAS, or None."""
    letter = _LETTERS.get(np.dtype(dtype))
    if letter is None:
        return None
    real = ctypes.c_float if letter == "s" else ctypes.c_double
    index, pointer, enum = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    for path in library_paths():
        try:
            library = ctypes.CDLL(path)  # NumPy's own copy: already loaded, the same handle
        except OSError:
            continue
        for symbol in SYMBOLS:
            function = getattr(library, symbol.format(letter), None)
            if function is not None:
                function.argtypes = [enum, enum, enum, index, index, index, real, pointer,
                                     index, pointer, index, real, pointer, index]  # fmt: skip
                function.restype = None
                return function
    return None


def available() -> bool:
    """Whether :func:`add_product` can call BLAS here (float32 and float64)."""
    return gemm(np.dtype(np.float32)) is not None and gemm(np.dtype(np.float64)) is not None


def _layout(a: np.ndarray) -> tuple[int, int] | None:
    """(CBLAS transpose flag, leading dimension) of a matrix stored row- or column-major."""
    if a.flags.c_contiguous:
        return NO_TRANS, max(1, a.shape[1])
    if a.flags.f_contiguous:
        return TRANS, max(1, a.shape[0])
    return None


def add_product(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """``out += a @ b`` in one BLAS call (β = 1), if it can: ``out`` a writable C-contiguous
    matrix, ``a`` and ``b`` matrices stored row- or column-major (a transpose is a flag), all
    aligned, all native float32 or all float64, none overlapping ``out``. Whether it did: if
    not, nothing was written and the caller adds the product itself."""
    if not all(isinstance(array, np.ndarray) for array in (out, a, b)):
        return False
    if not (out.ndim == a.ndim == b.ndim == 2 and out.dtype == a.dtype == b.dtype):
        return False
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or out.shape != (m, n):
        return False
    function = gemm(out.dtype)
    layouts = _layout(a), _layout(b)
    if function is None or None in layouts or not out.flags.c_contiguous:
        return False
    if not (out.flags.writeable and out.flags.aligned and a.flags.aligned and b.flags.aligned):
        return False
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return False
    if out.size and k:
        (trans_a, lda), (trans_b, ldb) = layouts
        function(ROW_MAJOR, trans_a, trans_b, m, n, k, 1.0, a.ctypes.data, lda,
                 b.ctypes.data, ldb, 1.0, out.ctypes.data, max(1, n))  # fmt: skip
    return True
