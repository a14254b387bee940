"""Call the kernels like NumPy functions: pick a grid and a block, launch, return the result.

Every function takes ``mode``: ``"gpu"`` runs the CUDA source on the GPU through CuPy's
``RawModule`` (CuPy arrays in and out), ``"emulator"`` runs the *same* source in the CPU
emulator (NumPy arrays in and out); ``None`` picks ``"gpu"`` when course_lib's device is the
GPU and ``"emulator"`` otherwise. The signatures match :mod:`course_lib.kernels.reference`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import backend, params
from ..backend import host_array
from ..errors import ParameterError, ShapeError
from . import emulator, gpu, profiling
from .errors import KernelLaunchError
from .fused_template import FusedElementwise

MODES = ("gpu", "emulator")
MATMUL_TILE = 16  # TILE in matmul_tiled.cu
REGISTER_TILE = 128  # BM = BN in matmul_register_tiled.cu (16 x 16 threads, 8 x 8 outputs each)
TRANSPOSE_TILE, TRANSPOSE_ROWS = 32, 8  # TILE and ROWS in transpose.cu
TRANSPOSES = ("naive", "shared", "padded")
REDUCTIONS = ("tree", "shuffle")
MAX_HEAD_DIM = 128  # MAX_HEAD_DIM in attention.cu
ATTENTION_THREADS, ATTENTION_KEYS = 256, 32  # block and BC (keys per tile) in attention.cu
# Row elements per thread for the row kernels (VALUES in row_registers.cuh). Loading each value
# only when used, softmax at 8192 x 4096 reached 0.67 of an H200's copy with 16, 0.45 with 8,
# 0.24 with 4; with float4 loads an H100 gave 0.95-0.96 with 8, 16 or 32, and at 65536 x 256
# 0.88 with 8, 0.66 with 16 (a warp of 16 a thread holds 512: half of it padding).
ROW_VALUES = 16


def default_mode() -> str:
    """``"gpu"`` when course_lib's device is the GPU, else ``"emulator"``."""
    return "gpu" if backend.get_device() == "gpu" else "emulator"


def array_module():
    """The array module of the arrays the kernels take and return in the default mode:
    CuPy on a GPU, NumPy in the emulator (on the CPU and on the strict stand-in device, whose
    kernels run in the emulator on host memory)."""
    return _xp(default_mode())


def _mode(mode: str | None) -> str:
    mode = default_mode() if mode is None else mode
    if mode not in MODES:
        raise KernelLaunchError(f"unknown kernel mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def get_kernel(filename: str, name: str, mode: str | None = None):
    """The kernel ``name`` of a packaged file, as a CuPy ``RawKernel`` or an emulated one.

    Both are called the same way: ``kernel(grid, block, args, shared_mem=0)``. Looked up
    once per process: later calls find it in a cache (no file read, no compilation).
    """
    return _kernel(_mode(mode), filename, name)


@functools.cache
def _kernel(mode: str, filename: str, name: str):
    module = gpu.load_module(filename) if mode == "gpu" else emulator.load_module(filename)
    return module.get_function(name)


def _declare_flops(mode: str, flops: int) -> None:
    """The flops of the launch just made, for :func:`course_lib.kernels.profile` (emulator)."""
    if mode == "emulator":
        profiling.add_flops(flops)


@functools.cache
def _xp(mode: str):
    """NumPy for the emulator; CuPy for the GPU, checked once to see one (else a clear
    KernelError, a DeviceError, instead of CuPy's own error from deep inside a launch)."""
    return gpu._cupy() if mode == "gpu" else np


def _inputs(name: str, mode: str, *arrays):
    """Contiguous float32 copies (or the arrays themselves) in the mode's array module."""
    xp = _xp(mode)
    if mode == "emulator":  # the emulator runs on the CPU: host arrays only
        arrays = [host_array(a, f"an emulated kernel's input ({name})") for a in arrays]
    return [a if _ready(xp, a) else _float32(name, xp, a) for a in arrays]


def _float32(name: str, xp, array):
    """A contiguous float32 copy of real numbers; complex, text or object arrays are refused
    (the cast would drop an imaginary part, or turn None into NaN)."""
    if not hasattr(getattr(array, "dtype", None), "kind"):  # a list, a torch tensor
        array = xp.asarray(array)
    params.numeric_array(array, f"{name}'s input of shape {array.shape}")
    return xp.ascontiguousarray(xp.asarray(array, dtype=xp.float32))


def _ready(xp, array) -> bool:
    """Whether ``array`` can be handed to a kernel as it is (the fast path of a launch)."""
    return type(array) is xp.ndarray and array.dtype == np.float32 and array.flags.c_contiguous


def _address(array) -> int:
    return array.data.ptr if hasattr(array.data, "ptr") else array.ctypes.data


def _aligned(*arrays):
    """The arrays, each copied if it does not start on 16 bytes (float4 loads need that)."""
    return [a if _address(a) % 16 == 0 else a.copy() for a in arrays]


def _blocks(count: int, block: int) -> int:
    """Blocks of ``block`` threads (a whole number from 1 to 1024) that cover ``count``."""
    if type(block) is not int or not 1 <= block <= 1024:  # checked only when unusual: a launch
        block = params.count(block, "a kernel launch's block (threads per block)", 1, 1024)
    return max(1, -(-count // block))


def _int_loop(name: str, n: int, threads: int) -> None:
    """Refuse a grid-stride loop whose 32-bit int index would overflow: a thread's last step
    goes from up to n - 1 to n - 1 + grid * block, which must stay below 2**31 (past it the
    index wraps negative and the kernel writes before its output)."""
    if n - 1 + threads >= 2**31:
        raise ShapeError(
            f"{name} indexes with 32-bit ints: {n:,} elements plus {threads:,} threads (grid "
            f"times block) must stay below 2**31; use fewer blocks or split the array"
        )


def _power_of_two_block(block: int) -> int:
    if block < 1 or block & (block - 1) or block > 1024:
        raise KernelLaunchError(
            f"reduce_sum's tree: block must be a power of two <= 1024, got {block}"
        )
    return block


def _row_block(name: str, cols: int, block: int | None) -> int:
    """Threads per row for the row kernels: whole warps, about ROW_VALUES elements each."""
    if block is None:
        return min(1024, 32 * _blocks(cols, 32 * ROW_VALUES))
    if block % 32 or not 32 <= block <= 1024:
        raise KernelLaunchError(
            f"{name} reduces with warp shuffles: block must be a multiple of 32 up to 1024, "
            f"got {block}"
        )
    return block


def vector_add(a, b, *, mode: str | None = None, block: int = 256):
    """``a + b`` with one thread per element (``vector_add.cu``)."""
    return _vector_add("vector_add", a, b, mode, block, per_thread=1)


def vector_add_float4(a, b, *, mode: str | None = None, block: int = 256):
    """``a + b`` with four elements per thread and float4 loads (``vector_add.cu``)."""
    return _vector_add("vector_add_float4", a, b, mode, block, per_thread=4)


def _vector_add(name: str, a, b, mode, block: int, per_thread: int):
    mode = _mode(mode)
    a, b = _inputs(name, mode, a, b)
    if a.ndim != 1 or a.shape != b.shape:
        raise ShapeError(f"{name} needs two vectors of equal length, got {a.shape} and {b.shape}")
    if per_thread == 4:
        a, b = _aligned(a, b)
    c = _xp(mode).empty_like(a)
    if a.size:
        groups = math.ceil(a.size / per_thread)
        get_kernel("vector_add.cu", name, mode)(
            (_blocks(groups, block),), (block,), (a, b, c, np.int32(a.size))
        )
        _declare_flops(mode, a.size)
    return c


INT_INDEXED = ("matmul_naive", "matmul_tiled")  # they index with int: 2**31 elements at most


def _matmul_shapes(name: str, a_shape, b_shape) -> tuple[int, int, int]:
    if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[0]:
        raise ShapeError(f"{name} needs (M, K) @ (K, N) matrices, got {a_shape} @ {b_shape}")
    (m, k), n = a_shape, b_shape[1]
    if name in INT_INDEXED and max(m * k, k * n, m * n) > 2**31:
        raise ShapeError(
            f"{name} indexes with 32-bit ints: A, B and C may hold 2**31 elements at most, got "
            f"{a_shape} @ {b_shape}; use matmul_register_tiled"
        )
    return m, n, k


def _matmul(name: str, a, b, mode, tile: tuple[int, int], block: tuple[int, int]):
    """Launch ``<name>.cu`` with one block per ``tile`` (columns, rows) of C = a @ b."""
    mode = _mode(mode)
    m, n, k = _matmul_shapes(name, np.shape(a), np.shape(b))  # before any copy is made
    a, b = _aligned(*_inputs(name, mode, a, b))
    c = _xp(mode).empty((m, n), dtype=np.float32)
    if c.size:
        grid = (_blocks(n, tile[0]), _blocks(m, tile[1]))
        args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
        get_kernel(f"{name}.cu", name, mode)(grid, tuple(block), args)
        _declare_flops(mode, 2 * m * n * k)
    return c


def matmul_naive(a, b, *, mode: str | None = None, block: tuple[int, int] = (16, 16)):
    """``a @ b`` with one thread per output element reading from global memory."""
    if np.shape(block) != (2,):
        raise ParameterError(f"matmul_naive needs a block of two sizes (x, y), got {block!r}")
    return _matmul("matmul_naive", a, b, mode, block, block)


def matmul_tiled(a, b, *, mode: str | None = None):
    """``a @ b`` with 16 x 16 tiles staged in shared memory (``matmul_tiled.cu``)."""
    return _matmul("matmul_tiled", a, b, mode, (MATMUL_TILE,) * 2, (MATMUL_TILE,) * 2)


def matmul_register_tiled(a, b, *, mode: str | None = None):
    """``a @ b`` with 128 x 128 block tiles, 8 x 8 outputs per thread held in registers and
    float4 loads (``matmul_register_tiled.cu``)."""
    return _matmul("matmul_register_tiled", a, b, mode, (REGISTER_TILE,) * 2, (16, 16))


def _one_array(name: str, mode: str, x, ndim: int, variant=None, variants=()):
    """``x`` as a float32 array of ``ndim`` axes (a vector or a matrix) in the mode's array
    module, after checking that ``variant`` is one of ``variants`` (when there are some)."""
    if variants and variant not in variants:
        raise ParameterError(f"{name} variant must be one of {variants}, got {variant!r}")
    (x,) = _inputs(name, mode, x)
    if x.ndim != ndim:
        raise ShapeError(f"{name} needs a {('vector', 'matrix')[ndim - 1]}, got shape {x.shape}")
    return x


def copy_strided(x, stride: int, *, mode: str | None = None, block: int = 256,
                 grid: int | None = None):  # fmt: skip
    """``x[::stride]`` with one thread per output element (``copy_strided.cu``); ``grid``
    blocks (default: enough for one element per thread, at most 65,535) cover any length by
    a grid-stride loop."""
    mode = _mode(mode)
    x = _one_array("copy_strided", mode, x, 1)
    if isinstance(stride, bool) or not isinstance(stride, int | np.integer) or stride < 1:
        raise ParameterError(f"copy_strided needs a positive integer stride, got {stride!r}")
    n = math.ceil(x.size / stride)
    y = _xp(mode).empty(n, dtype=np.float32)
    if n:
        default = _grid(n, block)  # checks block
        grid = default if grid is None else params.count(grid, "copy_strided's grid", 1, 2**31 - 1)
        _int_loop("copy_strided", n, grid * block)
        get_kernel("copy_strided.cu", "copy_strided", mode)(
            (grid,), (block,), (x, y, np.int32(n), np.int32(stride))
        )
    return y


def transpose(x, *, variant: str = "padded", mode: str | None = None):
    """``x.T`` of a matrix (``transpose.cu``): ``"naive"`` (strided writes), ``"shared"``
    (through a shared tile, with bank conflicts) or ``"padded"`` (a padded tile, none)."""
    mode = _mode(mode)
    x = _one_array("transpose", mode, x, 2, variant, TRANSPOSES)
    rows, cols = x.shape
    y = _xp(mode).empty((cols, rows), dtype=np.float32)
    if x.size:
        grid = (_blocks(cols, TRANSPOSE_TILE), _blocks(rows, TRANSPOSE_TILE))
        get_kernel("transpose.cu", f"transpose_{variant}", mode)(
            grid, (TRANSPOSE_TILE, TRANSPOSE_ROWS), (x, y, np.int32(rows), np.int32(cols))
        )
    return y


def reduce_sum(x, *, variant: str = "shuffle", mode: str | None = None, block: int = 256,
               blocks: int | None = None):  # fmt: skip
    """The sum of a vector (``reduce.cu``) in two launches: ``blocks`` blocks (default: one
    per ``block`` elements, at most 1024) each add a slice, then one block adds their totals.
    ``variant`` ``"tree"`` reduces through shared memory, ``"shuffle"`` with warp shuffles.
    Returns a 0-d array."""
    mode = _mode(mode)
    x = _one_array("reduce_sum", mode, x, 1, variant, REDUCTIONS)
    if variant == "tree":
        block = _power_of_two_block(block)
    elif block % 32 or not 32 <= block <= 1024:
        raise KernelLaunchError(
            f"the shuffle reduction needs whole warps: block must be a multiple of 32 up to "
            f"1024, got {block}"
        )
    xp = _xp(mode)
    if x.size == 0:
        return xp.zeros((), dtype=np.float32)
    if blocks is None:
        blocks = min(_blocks(x.size, block), 1024)
    blocks = params.count(blocks, "reduce_sum's blocks", 1, 2**31 - 1)
    kernel = get_kernel("reduce.cu", f"reduce_sum_{variant}", mode)
    partial, total = xp.empty(blocks, dtype=np.float32), xp.empty(1, dtype=np.float32)
    for values, out, grid in ((x, partial, blocks), (partial, total, 1)):
        shared = 4 * block if variant == "tree" else 0
        _int_loop(f"reduce_sum_{variant}", values.size, grid * block)
        kernel((grid,), (block,), (values, out, np.int32(values.size)), shared_mem=shared)
        _declare_flops(mode, values.size)  # one addition per element
    return total.reshape(())


def _rows(name: str, x) -> tuple[int, int]:
    if x.ndim == 0:
        raise ShapeError(f"{name} works on rows: it needs an array of 1 or more axes, got a scalar")
    cols = x.shape[-1]
    return (x.size // cols if cols else 0), cols


def _launch_rows(filename: str, kernel: str, mode: str, block: int | None, arrays, scalars,
                 flops: int):  # fmt: skip
    """A row kernel: one block (of ``block`` threads, or :func:`_row_block`'s choice) per row
    of ``arrays[0]``'s last axis, called as ``kernel(*arrays, out, rows, *scalars)``. Returns
    ``out``, shaped like ``arrays[0]``."""
    rows, cols = _rows(kernel, arrays[0])
    out = _xp(mode).empty_like(arrays[0])
    if out.size:
        block = _row_block(kernel, cols, block)
        args = (*arrays, out, np.int32(rows), *scalars)
        get_kernel(filename, kernel, mode)((rows,), (block,), args)
        _declare_flops(mode, flops)
    return out


def softmax(x, *, mode: str | None = None, block: int | None = None):
    """Softmax over the last axis, one block of ``block`` threads per row, the row held in
    registers (``softmax.cu``)."""
    mode = _mode(mode)
    (x,) = _inputs("softmax", mode, x)
    _, cols = _rows("softmax", x)
    flops = 7 * x.size  # max; subtract, exp, add; subtract, exp, divide
    return _launch_rows("softmax.cu", "softmax_rows", mode, block, (x,), (np.int32(cols),), flops)


def causal_softmax(s, scale: float, *, mode: str | None = None, block: int | None = None):
    """``softmax(scale * s + M)`` of (..., T, S) attention scores, ``M = -inf`` for keys after
    each query (queries aligned with the last keys), one block per row (``softmax.cu``)."""
    mode = _mode(mode)
    (s,) = _inputs("causal_softmax", mode, s)
    if s.ndim < 2 or s.shape[-2] > s.shape[-1]:
        raise ShapeError(f"causal_softmax needs (..., T, S) scores with T <= S, got {s.shape}")
    scalars = (np.int32(s.shape[-2]), np.int32(s.shape[-1]), np.float32(scale))
    flops = 9 * s.size  # softmax's 7, the scale and the mask
    return _launch_rows("softmax.cu", "causal_softmax_rows", mode, block, (s,), scalars, flops)


def softmax_grad(g, p, scale: float = 1.0, *, mode: str | None = None, block: int | None = None):
    """``scale * p * (g - sum(g * p))`` over the last axis: a softmax's adjoint from its
    output p, one block per row, both rows held in registers (``softmax.cu``)."""
    mode = _mode(mode)
    g, p = _inputs("softmax_grad", mode, g, p)
    if g.shape != p.shape or g.ndim == 0:
        raise ShapeError(f"softmax_grad needs g and p of one shape (1-d or more), got "
                         f"{g.shape} and {p.shape}")  # fmt: skip
    scalars = (np.int32(g.shape[-1]), np.float32(scale))
    flops = 5 * g.size  # product, sum; subtract, two products
    return _launch_rows("softmax.cu", "softmax_grad_rows", mode, block, (g, p), scalars, flops)


def rms_norm(x, weight, eps: float = 1e-6, *, mode: str | None = None, block: int | None = None):
    """``weight * x / sqrt(mean(x**2) + eps)`` over the last axis (``rms_norm.cu``)."""
    mode = _mode(mode)
    x, weight = _inputs("rms_norm", mode, x, weight)
    rows, cols = _rows("rms_norm", x)
    if weight.shape != (cols,):
        raise ShapeError(f"rms_norm weight must have shape ({cols},) like x's last axis, "
                         f"got {weight.shape}")  # fmt: skip
    flops = 4 * x.size + 3 * rows  # square, add; two products; per row 3
    return _launch_rows("rms_norm.cu", "rms_norm_rows", mode, block, (x, weight),
                        (np.int32(cols), np.float32(eps)), flops)  # fmt: skip


def rms_norm_grad_x(g, x, weight, eps: float = 1e-6, *, mode: str | None = None,
                    block: int | None = None):  # fmt: skip
    """RMSNorm's input adjoint ``r * (g*w - x * mean(g*w*x) * r**2)``, ``r = 1/rms(x)``, over
    the last axis, one block per row (``rms_norm.cu``)."""
    mode = _mode(mode)
    g, x, weight = _inputs("rms_norm_grad_x", mode, g, x, weight)
    rows, cols = _rows("rms_norm_grad_x", x)
    if g.shape != x.shape or weight.shape != (cols,):
        raise ShapeError(f"rms_norm_grad_x needs g and x of one shape and a weight of shape "
                         f"({cols},), got {g.shape}, {x.shape} and {weight.shape}")  # fmt: skip
    flops = 8 * x.size + 4 * rows  # g*w, x^2, g*w*x, sums; 3 per output
    return _launch_rows("rms_norm.cu", "rms_norm_grad_x_rows", mode, block, (g, x, weight),
                        (np.int32(cols), np.float32(eps)), flops)  # fmt: skip


RMS_NORM_CHUNKS = 128  # row chunks of rms_norm_grad_w: 128 x (cols / 256) blocks


def rms_norm_grad_w(g, x, eps: float = 1e-6, *, mode: str | None = None, block: int = 256):
    """RMSNorm's weight adjoint ``sum over rows of g * x * r``, ``r = 1/rms(x)`` of each row
    (``rms_norm.cu``): the rows' r, then partial column sums over chunks of rows, added here
    (one partial row per chunk)."""
    mode = _mode(mode)
    g, x = _inputs("rms_norm_grad_w", mode, g, x)
    if g.shape != x.shape or x.ndim == 0:
        raise ShapeError(f"rms_norm_grad_w needs g and x of one shape (1-d or more), got "
                         f"{g.shape} and {x.shape}")  # fmt: skip
    rows, cols = _rows("rms_norm_grad_w", x)
    xp = _xp(mode)
    if not rows or not cols:
        return xp.zeros(cols, dtype=np.float32)
    r, chunks = xp.empty(rows, dtype=np.float32), min(rows, RMS_NORM_CHUNKS)
    chunk = -(-rows // chunks)
    chunks = -(-rows // chunk)
    partial = xp.empty((chunks, cols), dtype=np.float32)
    get_kernel("rms_norm.cu", "rms_norm_inv_rms_rows", mode)(
        (rows,), (_row_block("rms_norm_inv_rms_rows", cols, None),),
        (x, r, np.int32(rows), np.int32(cols), np.float32(eps)),
    )
    get_kernel("rms_norm.cu", "rms_norm_grad_w_columns", mode)(
        (_blocks(cols, block), chunks), (block,),
        (g, x, r, partial, np.int32(rows), np.int32(cols), np.int32(chunk)),
    )
    _declare_flops(mode, 5 * x.size + 3 * rows)  # x^2, sum; x*r, g*, sum; per row 3
    return partial.sum(axis=0)


def rope(x, cos, sin, *, axis: int = -2, mode: str | None = None, block: int = 256):
    """Half-split rotary embedding of x (..., head_dim) with positions along ``axis`` (any
    axis but the last; default the second-to-last: (..., seq_len, head_dim)) (``rope.cu``)."""
    mode = _mode(mode)
    x, cos, sin = _inputs("rope", mode, x, cos, sin)
    if x.ndim < 2 or x.shape[-1] % 2 or not -x.ndim <= axis < x.ndim or axis % x.ndim == x.ndim - 1:
        raise ShapeError(f"rope needs x of shape (..., even head_dim) with positions on an "
                         f"axis before the last, got {x.shape} and axis {axis}")  # fmt: skip
    axis %= x.ndim
    seq_len, head_dim = x.shape[axis], x.shape[-1]
    if cos.shape != (seq_len, head_dim // 2) or sin.shape != cos.shape:
        raise ShapeError(
            f"rope tables must be ({seq_len}, {head_dim // 2}) for x {x.shape}, got cos "
            f"{cos.shape} and sin {sin.shape}; see reference.rope_tables"
        )
    y = _xp(mode).empty_like(x)
    rows = x.size // head_dim if head_dim else 0
    inner = math.prod(x.shape[axis + 1 : -1])  # rows per position within each outer block
    if x.size:
        args = (x, cos, sin, y, np.int32(rows), np.int32(seq_len), np.int32(inner),
                np.int32(head_dim))  # fmt: skip
        get_kernel("rope.cu", "rope", mode)((_blocks(rows * head_dim // 2, block),), (block,), args)
        _declare_flops(mode, 3 * x.size)  # per pair: 4 products, 2 sums
    return y


def _grid(count: int, block: int) -> int:
    """Blocks for a grid-stride loop over ``count`` elements (at most 65,535: each thread
    then takes several)."""
    return min(_blocks(count, block), 65535)


def adam_moment(m, g, beta: float, power: int, *, mode: str | None = None, block: int = 256):
    """AdamW's new moment ``beta * m + (1 - beta) * g**power`` (``adamw.cu``): power 1 for
    the first moment, 2 for the second."""
    mode = _mode(mode)
    m, g = _inputs("adam_moment", mode, m, g)
    if m.shape != g.shape or power not in (1, 2):
        raise ShapeError(f"adam_moment needs m and g of one shape and power 1 or 2, got "
                         f"{m.shape}, {g.shape}, power {power}")  # fmt: skip
    out = _xp(mode).empty_like(m)
    if m.size:
        args = (m, g, out, np.float32(beta), np.float32(1.0 - beta), np.int32(power),
                np.int64(m.size))  # fmt: skip
        get_kernel("adamw.cu", "adam_moment", mode)((_grid(m.size, block),), (block,), args)
        _declare_flops(mode, (power + 2) * m.size)
    return out


def adamw_update(param, m, v, lr, step, beta1: float, beta2: float, eps: float,
                 weight_decay: float, *, mode: str | None = None, block: int = 256):  # fmt: skip
    """AdamW's new parameter from the new moments (``adamw.cu``); ``lr`` (float64) and
    ``step`` (int64) are 0-d arrays read by the kernel, never by the host."""
    mode = _mode(mode)
    param, m, v = _inputs("adamw_update", mode, param, m, v)
    if not param.shape == m.shape == v.shape:
        raise ShapeError(f"adamw_update needs θ, m and v of one shape, got {param.shape}, "
                         f"{m.shape}, {v.shape}")  # fmt: skip
    xp = _xp(mode)
    lr = xp.ascontiguousarray(xp.asarray(lr, dtype=np.float64))
    step = xp.ascontiguousarray(xp.asarray(step, dtype=np.int64))
    if lr.size != 1 or step.size != 1:
        raise ShapeError(f"adamw_update needs one lr and one step (0-d arrays), got {lr.size} "
                         f"and {step.size} values")  # fmt: skip
    out = xp.empty_like(param)
    if param.size:
        args = (param, m, v, lr, step, out, np.float64(beta1), np.float64(beta2),
                np.float32(eps), np.float64(weight_decay), np.int64(param.size))  # fmt: skip
        get_kernel("adamw.cu", "adamw_update", mode)((_grid(param.size, block),), (block,), args)
        _declare_flops(mode, 7 * param.size)
    return out


def attention_rows(head_dim: int) -> int:
    """Query rows per block of ``attention.cu`` (BR): 64 up to head_dim 64, else 32, so its
    tiles fit in 48 KiB of shared memory."""
    return 64 if head_dim <= 64 else 32


def attention_shared_bytes(head_dim: int) -> int:
    """Dynamic shared memory of an ``attention.cu`` block: Q, K^T (then V) and P tiles."""
    rows, keys = attention_rows(head_dim), ATTENTION_KEYS
    return 4 * (rows * (head_dim + 1) + head_dim * (keys + 1) + rows * (keys + 1))


def attention(q, k, v, causal: bool = True, scale: float | None = None, *,
              mode: str | None = None):  # fmt: skip
    """Attention of q (B, H, T, D) over k, v (B, KV, T, D), tiled with an online softmax
    (``attention.cu``, FlashAttention's recurrence); H must be a multiple of KV
    (grouped-query attention). With ``causal``, a NaN or inf in v at key j reaches the outputs
    of queries >= j and of the earlier queries in j's block of :func:`attention_rows` queries
    (their masked 0 times it: NaN), not of earlier blocks; in reference.attention, all rows."""
    mode = _mode(mode)
    q, k, v = _inputs("attention", mode, q, k, v)
    scale = None if scale is None else float(scale)  # a hashable key, whatever number it was
    grid, shared, scalars, flops = _attention_plan(q.shape, k.shape, v.shape, bool(causal), scale)
    o = _xp(mode).empty_like(q)
    if q.size:
        get_kernel("attention.cu", "attention", mode)(
            grid, (ATTENTION_THREADS,), (q, k, v, o, *scalars), shared_mem=shared
        )
        _declare_flops(mode, flops)
    return o


@functools.lru_cache(maxsize=256)
def _attention_plan(q_shape, k_shape, v_shape, causal, scale):
    """Grid, shared bytes, scalar arguments and FLOPs of an attention launch, worked out once
    per shape (a launch then costs little more than CuPy's own call); refuses bad shapes."""
    same = len(q_shape) == len(k_shape) == 4 and k_shape == v_shape
    if not same or q_shape[::2] + q_shape[3:] != k_shape[::2] + k_shape[3:]:
        raise ShapeError(
            f"attention needs q (B, H, T, D) and k, v (B, KV, T, D), got {q_shape}, {k_shape}, "
            f"{v_shape}"
        )
    batch, heads, seq_len, head_dim = q_shape
    kv_heads = k_shape[1]
    if kv_heads == 0 or heads % kv_heads or head_dim > MAX_HEAD_DIM:
        raise ShapeError(
            f"attention needs n_heads ({heads}) a multiple of n_kv_heads ({kv_heads}) and "
            f"head_dim ({head_dim}) <= {MAX_HEAD_DIM}"
        )
    if scale is None:
        scale = head_dim**-0.5 if head_dim else 1.0  # head_dim 0: nothing to launch
    scalars = (np.int32(heads), np.int32(kv_heads), np.int32(seq_len), np.int32(head_dim),
               np.float32(scale), np.int32(bool(causal)))  # fmt: skip
    grid = (_blocks(seq_len, attention_rows(head_dim)), heads, batch)
    pairs = seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len
    flops = 4 * batch * heads * pairs * head_dim  # q.k and p*v: 2 + 2 per d
    return grid, attention_shared_bytes(head_dim), scalars, flops


def fused(kernel: FusedElementwise, *inputs, mode: str | None = None, block: int = 256):
    """Run a generated fused elementwise kernel; returns its outputs as a tuple of arrays.

    All inputs must have the same shape (broadcast them first); outputs have that shape.
    """
    mode = _mode(mode)
    if len(inputs) != len(kernel.inputs):
        raise ShapeError(
            f"fused kernel {kernel.name} takes inputs {kernel.inputs}, got {len(inputs)} arrays"
        )
    arrays = _inputs(kernel.name, mode, *inputs)
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ShapeError(
            f"fused kernel {kernel.name}: inputs {kernel.inputs} have shapes "
            f"{[a.shape for a in arrays]}; broadcast them to one shape first"
        )
    xp = _xp(mode)
    outputs = tuple(xp.empty_like(arrays[0]) for _ in kernel.outputs)
    size = arrays[0].size
    if size:
        if mode == "gpu":  # rounded as the unfused ops round (no multiply-add contraction)
            module = gpu.compile_module(kernel.source, f"{kernel.name}.cu", contract=False)
        else:
            module = emulator.compile_module(kernel.source, f"{kernel.name}.cu")
        function = module.get_function(kernel.name)
        grid = (_grid(size, block),)
        _int_loop(kernel.name, size, grid[0] * block)
        function(grid, (block,), (*arrays, *outputs, np.int32(size)))
    return outputs
