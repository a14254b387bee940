"""Notebook 07's two assignments: a shared-memory tiled matmul (C = A B^T, B stored N x K)
and a warp-shuffle row sum.

Both answers are CUDA C source, checked like :mod:`.gpu_kernels`' (on the GPU, or in the CPU
emulator; ragged sizes; a marker-filled padded output). Besides the numbers, the verdict rests
on what the emulator counts (:func:`course_lib.kernels.profile`): global loads per output,
sectors per load request, barriers, warp shuffles. Only the emulator counts, so the counted
launch runs in the emulator on every machine, a GPU's too, before the other launches; its
results are checked as well, so a race the emulator makes deterministic (a missing
``__syncthreads()``) fails the same way everywhere. Where there is no g++ (a GPU without
one) the verdict says that the counters were not checked.
"""

from __future__ import annotations

import itertools

import numpy as np

from .core import Mistake, Wrong, first_match, mismatch, require
from .gpu_kernels import INPUT_WRITTEN, MARK, MISSED, NO_GUARD, SIGNATURE, _Device
from .gpu_kernels import _kernel_exercise as kernel_exercise
from .gpu_kernels import _launch as launch_padded

NO_EMULATOR = "counters not checked (no g++ here for the CPU emulator)"


def _counted(device: _Device, kernel, source: str, name: str, params: tuple[str, ...]):
    """The emulator (a device) and the answer compiled for it, or (None, None) without g++."""
    emulator = device.emulator()
    if emulator is None:
        return None, None
    if emulator is device:  # no GPU: the answer is compiled for the emulator already
        return emulator, kernel
    return emulator, emulator.compile(source, name, params)


# -- tiled_matmul -----------------------------------------------------------------------------
TILE = 16
EPS32 = float(np.finfo(np.float32).eps)

NOT_TILED = Mistake(
    "not-tiled",
    "every thread reads its whole row of A and row of B from global memory (2K loads per "
    "output). Copy a TILE x TILE tile of A and of B into __shared__ arrays (one element per "
    "thread), __syncthreads(), and take the TILE products of each step from shared memory.",
)
UNCOALESCED = Mistake(
    "uncoalesced",
    "neighbouring threads (threadIdx.x, x+1, ...) must read neighbouring addresses: k, the "
    "index along a row of A and of B, grows with threadIdx.x in the loads of both tiles, and "
    "the row with threadIdx.y. For B that is B[(blockIdx.x * TILE + threadIdx.y) * K + k0 + "
    "threadIdx.x], stored transposed, into b_tile[threadIdx.x][threadIdx.y]; "
    "B[col * K + k0 + threadIdx.y] reads down a column of B, its lanes K floats apart.",
)
MISSING_BARRIER = Mistake(
    "missing-barrier",
    "two __syncthreads() per step: one after storing the tiles (before anyone reads them) and "
    "one after the products (before the next step overwrites them). Without them a thread "
    "reads tile elements another thread has not written yet, or has already replaced.",
)
RAGGED = Mistake(
    "ragged-edges",
    "right when M, N and K are multiples of TILE, wrong otherwise: a tile element outside A "
    "or B (a row >= M of A, a row >= N of B, a k >= K) must be stored as 0.0f, and only "
    "threads with row < M and col < N write C.",
)
A_TIMES_B = Mistake(
    "a-times-b",
    "C is A @ B, with B's N x K floats read as a K x N matrix (B[k * N + col]). Here B is "
    "N x K, like attention's keys in Q K^T: C[row][col] = sum over k of A[row * K + k] * "
    "B[col * K + k], a row of A times a row of B.",
)
TILE_NOT_TRANSPOSED = Mistake(
    "tile-not-transposed",
    "the tile of B is read the way it was stored: the load puts B[n][k] (k growing with "
    "threadIdx.x) at b_tile[n][k], and the products then take b_tile[k][threadIdx.x], an "
    "element of another row of B. Store it transposed, b_tile[threadIdx.x][threadIdx.y], or "
    "read b_tile[threadIdx.x][k].",
)

_MATMUL = ("float32*", "float32*", "float32*", "int32", "int32", "int32")
_MATMUL_COUNTED = (48, 48, 48)  # whole tiles: the counts are exact multiples of the ideal
_MATMUL_SIZES = [(48, 48, 48), (16, 32, 80), (1, 1, 1), (15, 20, 37), (33, 47, 19),
                 (50, 3, 70), (7, 64, 16)]  # fmt: skip  (M, N, K: whole tiles first)


def _product(a: np.ndarray, b: np.ndarray, pattern: str | None = None):
    """``a @ b`` (or ``einsum(pattern, a, b)``) and the same of ``|a|`` and ``|b|``."""
    if pattern is None:
        return a @ b, np.abs(a) @ np.abs(b)
    return np.einsum(pattern, a, b), np.einsum(pattern, np.abs(a), np.abs(b))


def _close(got: np.ndarray, want: tuple, k: int) -> bool:
    """``got`` is ``want`` (sums of K products, and of their sizes) within the float32 rounding
    of K products: K·eps·Σ|products|. NaN is never close."""
    value, size = want
    return bool(np.all(np.abs(got - value) <= k * EPS32 * size + 1e-30))


def _layout_mistake(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> Mistake | None:
    """The mistake about B's layout whose C is ``got``, for A (M, K) and B (N, K)."""
    (m, k), n = a.shape, b.shape[0]
    wrong = [(A_TIMES_B, lambda: _product(a, b.reshape(k, n)))]  # B's floats read as K x N
    if not (m % TILE or n % TILE or k % TILE):
        # b_tile[i][j] = B[bx * TILE + i][k0 + j], read as b_tile[k][threadIdx.x]
        strips, tiles = a.reshape(m, k // TILE, TILE), b.reshape(n // TILE, TILE, k // TILE, TILE)
        wrong.append((TILE_NOT_TRANSPOSED, lambda: tuple(
            c.reshape(m, n) for c in _product(strips, tiles, "rsi,xisj->rxj"))))  # fmt: skip
    return first_match(got, wrong, lambda got, want: _close(got, want, k))


def _run_matmul(device: _Device, kernel, size: tuple, rng, first: bool, mistake) -> None:
    """One launch of ``tiled_matmul`` on random A (M, K) and B (N, K); a wrong C = A B^T is
    a mistake about B's layout, or the one ``mistake()`` names."""
    m, n, k = size
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k), dtype=np.float32)
    grid = (-(-n // TILE), -(-m // TILE))
    label = (f"tiled_matmul with M, N, K = {m}, {n}, {k} on {grid[0]} x {grid[1]} blocks of "
             f"{TILE} x {TILE} threads")  # fmt: skip
    pad = TILE * (max(size) + TILE)  # room for every index a kernel without guards reaches
    # after A and B NaN: a tile loaded without its k < K guard reads past A's end, and 0 · NaN
    # is NaN, where a finite marker times B's zeroed tile would be a silent 0
    got = launch_padded(device, kernel, label, (grid, (TILE, TILE)), {"A": a, "B": b}, m * n,
                        (np.int32(m), np.int32(n), np.int32(k)), first, pad=pad,
                        fill=np.nan)  # fmt: skip
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want, got = _product(a64, b64.T), got.reshape(m, n).astype(np.float64)
    if not _close(got, want, k):
        raise Wrong(f"{label}: C {mismatch(got, want[0])}",
                    _layout_mistake(got, a64, b64) or mistake())  # fmt: skip


def _count_matmul(device: _Device, kernel, source: str, rng) -> str:
    """Run whole tiles in the emulator, counting; check C and the counts; say what was counted."""
    emulator, kernel = _counted(device, kernel, source, "tiled_matmul", _MATMUL)
    if emulator is None:
        return NO_EMULATOR
    m, n, k = _MATMUL_COUNTED
    blocks, steps = (m // TILE) * (n // TILE), k // TILE
    with device.kernels.profile() as counts:
        _run_matmul(emulator, kernel, _MATMUL_COUNTED, rng, True,
                    lambda: MISSING_BARRIER if counts.barriers < 2 * steps * blocks else None)
    (launch,) = counts.launches
    loads, naive, tiled = counts.global_loads / (m * n), 2 * k, 2 * k // TILE
    where = f"counted in the emulator on M = N = K = {k}"
    require(loads < k, f"{where}: {loads:g} global loads per element of C (a naive kernel "
            f"makes {naive}, tiles of {TILE}: {tiled})", NOT_TILED)  # fmt: skip
    require(loads <= 1.5 * tiled, f"{where}: {loads:g} global loads per element of C, more "
            f"than tiles of {TILE} need ({tiled}): load each tile element once per step")
    per_request = launch.counters["load_sectors"] / max(launch.counters["global_load_requests"], 1)
    require(per_request <= 6, f"{where}: {per_request:.1f} sectors per global load request "
            "(a warp reading two rows of 16 neighbouring floats touches 4)", UNCOALESCED)
    return (f"counted in the CPU emulator at M = N = K = {k}: {loads:g} global loads per "
            f"element of C (naive: {naive}), {per_request:.1f} sectors per load request, "
            f"{counts.barriers / blocks:g} barriers and {counts.bank_conflicts / blocks:g} bank "
            "conflicts per block")  # fmt: skip


@kernel_exercise(
    "07.tiled_matmul",
    "CUDA tiled_matmul(A, B, C, M, N, K): C = A @ B^T, B stored N x K, through shared tiles",
    mistakes=(NOT_TILED, UNCOALESCED, MISSING_BARRIER, RAGGED, A_TIMES_B, TILE_NOT_TRANSPOSED,
              NO_GUARD, MISSED, SIGNATURE, INPUT_WRITTEN),  # fmt: skip
    points=5.0,
)
def check_tiled_matmul(answer) -> str:
    device = _Device()
    kernel = device.compile(answer, "tiled_matmul", _MATMUL)
    rng = np.random.default_rng(72)
    counted = _count_matmul(device, kernel, answer, rng)
    for count, size in enumerate(_MATMUL_SIZES):
        ragged = any(d % TILE for d in size)
        _run_matmul(device, kernel, size, rng, count == 0 and counted == NO_EMULATOR,
                    lambda ragged=ragged: RAGGED if ragged else None)  # fmt: skip
    return (f"right on {len(_MATMUL_SIZES)} launches, M, N, K from 1 to 80 (ragged); "
            f"{counted}")


# -- warp_sum ---------------------------------------------------------------------------------
WARP = 32
OFFSETS = (16, 8, 4, 2, 1)

NO_SHUFFLE = Mistake(
    "no-shuffle",
    "the emulator counted no warp shuffle: this is a tree through shared memory (a barrier per "
    "step). Add up each warp's 32 values in registers with __shfl_down_sync (or "
    "__shfl_xor_sync) at offsets 16, 8, 4, 2, 1; only one value per warp goes through shared "
    "memory.",
)
SHUFFLE_OFFSETS = Mistake(
    "shuffle-offsets",
    "the sum misses lanes: lane 0 holds the warp's total only after the shuffles at offsets "
    "16, 8, 4, 2 and 1, all five (for (int offset = 16; offset > 0; offset /= 2)).",
)
WARPS_NOT_COMBINED = Mistake(
    "warps-not-combined",
    "the result is one warp's total. Each warp's lane 0 stores its total in a __shared__ array, "
    "__syncthreads(), then the first warp adds those totals (lanes past the number of warps "
    "contribute 0) and lane 0 writes out[row].",
)
NO_COLUMN_GUARD = Mistake(
    "no-column-guard",
    "a lane whose column is >= cols must contribute 0: what lies after the row is the next "
    "row (or past the end of x), not yours. Loop for (j = threadIdx.x; j < cols; "
    "j += blockDim.x).",
)
UNWRITTEN_SHARED = Mistake(
    "unwritten-shared",
    "out holds NaN for finite x: a thread read shared memory that no thread wrote (the "
    "emulator fills it with NaN before each block; a GPU leaves stale data there). With 96 "
    "threads there are 3 warp totals: lanes 3 to 31 of the first warp must take 0, not "
    "t[lane] (threadIdx.x < blockDim.x / 32 ? t[threadIdx.x] : 0.0f).",
)
ADDS_TO_OUT = Mistake(
    "adds-to-out",
    "out is not zeroed before the launch (here it holds a marker value): write out[row] once, "
    "from one thread, with the block's total, instead of adding to it (atomicAdd, +=).",
)

_ROW_SUM = ("float32*", "float32*", "int32", "int32")
_ROW_SUM_COUNTED = (3, 1000, 256)  # rows, cols, threads a block
_ROW_SUM_SIZES = [(4, 256, 256), (3, 1000, 256), (5, 1, 32), (7, 33, 32), (2, 95, 96),
                  (6, 300, 96), (1, 4097, 64), (3, 2000, 128)]  # fmt: skip
_ROW_SUM_PAD = 1024  # at least the largest block: a lane past the row reads markers


def _reduced(partials: np.ndarray, offsets: tuple[int, ...]) -> np.ndarray:
    """Lane 0 of each warp after shuffles at ``offsets`` (down or xor, in any order): the sum
    of the lanes whose index is a sum of some of the offsets. ``partials``: (..., lanes)."""
    lanes = sorted({sum(c) for r in range(len(offsets) + 1)
                    for c in itertools.combinations(offsets, r)})  # fmt: skip
    warps = partials.reshape(*partials.shape[:-1], -1, WARP)
    return warps[..., lanes].sum(axis=-1)


def _block_sum(x: np.ndarray, block: int, offsets=OFFSETS) -> np.ndarray:
    """A row sum as the shuffle kernel computes it, with shuffles at ``offsets``: lane t adds
    columns t, t + block, ...; each warp reduces, then the first warp reduces the warps' totals."""
    rows, cols = x.shape
    strided = np.zeros((rows, -(-cols // block) * block), np.float64)
    strided[:, :cols] = x
    totals = _reduced(strided.reshape(rows, -1, block).sum(axis=1), offsets)
    lanes = np.zeros((rows, WARP))
    lanes[:, : totals.shape[1]] = totals
    return _reduced(lanes, offsets)[:, 0]


def _row_sum_mistake(got: np.ndarray, x: np.ndarray, block: int) -> Mistake | None:
    """The mistake whose result ``got`` is, on integer-valued ``x`` (every order exact)."""
    rows, cols = x.shape
    width = -(-cols // block) * block
    flat = np.concatenate([x.ravel(), np.full(width, MARK, np.float64)])  # the padding
    warps = _reduced(np.pad(x, ((0, 0), (0, width - cols))).reshape(rows, -1, block).sum(axis=1),
                     OFFSETS)  # fmt: skip
    wrong = [
        (ADDS_TO_OUT, lambda: x.sum(axis=1) + MARK),
        (NO_COLUMN_GUARD, lambda: np.array([flat[r * cols : r * cols + width].sum()
                                            for r in range(rows)])),  # fmt: skip
        *[(WARPS_NOT_COMBINED, lambda w=w: warps[:, w]) for w in range(warps.shape[1])],
        *[(SHUFFLE_OFFSETS, lambda s=s: _block_sum(x, block, s))
          for r in range(len(OFFSETS)) for s in itertools.combinations(OFFSETS, r)],
    ]  # fmt: skip
    return first_match(got, wrong, np.array_equal)


def _run_row_sum(device: _Device, kernel, shape: tuple, rng, first: bool, integers: bool):
    """One launch of ``row_sum``, one block per row; integer values (exact in every order)
    name the mistake of a wrong sum."""
    rows, cols, block = shape
    if integers:
        x = rng.integers(-9, 10, (rows, cols)).astype(np.float32)
    else:
        x = rng.standard_normal((rows, cols), dtype=np.float32)
    label = f"row_sum on {rows} rows of {cols}, {rows} block{'s' * (rows > 1)} of {block} threads"
    got = launch_padded(device, kernel, label, (rows, block), {"x": x}, rows,
                        (np.int32(rows), np.int32(cols)), first, pad=_ROW_SUM_PAD,
                        past_end=None).astype(np.float64)  # fmt: skip
    x64 = x.astype(np.float64)
    want = x64.sum(axis=1)
    bound = cols * EPS32 * np.abs(x64).sum(axis=1)
    if not np.all(np.abs(got - want) <= bound):
        if np.isnan(got).any():
            mistake = UNWRITTEN_SHARED
        else:
            mistake = _row_sum_mistake(got, x64, block) if integers else None
        raise Wrong(f"{label}: out {mismatch(got, want)}", mistake)


def _count_row_sum(device: _Device, kernel, source: str, rng) -> str:
    emulator, kernel = _counted(device, kernel, source, "row_sum", _ROW_SUM)
    if emulator is None:
        return NO_EMULATOR
    rows, cols, block = _ROW_SUM_COUNTED
    try:
        with device.kernels.profile() as counts:
            _run_row_sum(emulator, kernel, _ROW_SUM_COUNTED, rng, True, True)
    except Wrong as error:  # NaN read from shared memory, and no barrier: read before stored
        if error.mistake is not UNWRITTEN_SHARED or counts.barriers:
            raise
        raise Wrong(f"{error.message}, and the emulator counted no __syncthreads(): the first "
                    "warp read the warp totals before the other warps stored them (store them, "
                    "__syncthreads(), then read them)") from None  # fmt: skip
    shuffles = counts.warp_syncs / WARP / rows
    barriers = counts.barriers / rows
    shared = (counts.shared_loads + counts.shared_stores) / rows
    stores = counts.global_stores / rows
    where = f"counted in the emulator with {block} threads a block"
    require(shuffles > 0, f"{where}: no warp shuffle, {barriers:g} barriers and {shared:g} "
            "shared-memory accesses per block", NO_SHUFFLE)  # fmt: skip
    # the emulator runs a block's threads in order; on a GPU unordered stores race
    require(barriers > 0 or stores <= 1, f"{where}: {stores:g} stores to out per block and no "
            "__syncthreads() to order them (on a GPU a warp's atomicAdd can land before another "
            "warp zeroes out[row])", ADDS_TO_OUT)  # fmt: skip
    require(barriers <= 2, f"{where}: {barriers:g} barriers per block; one value per warp "
            "through shared memory needs one")  # fmt: skip
    return (f"counted in the CPU emulator with {block} threads a block: {shuffles:g} warp "
            f"shuffles, {barriers:g} barrier{'s' * (barriers != 1)} and {shared:g} shared-memory "
            "accesses per block")  # fmt: skip


@kernel_exercise(
    "07.warp_sum", "CUDA row_sum(x, out, rows, cols): one block per row, warp shuffles",
    mistakes=(NO_SHUFFLE, SHUFFLE_OFFSETS, WARPS_NOT_COMBINED, NO_COLUMN_GUARD, ADDS_TO_OUT,
              UNWRITTEN_SHARED, MISSED, SIGNATURE, INPUT_WRITTEN),  # fmt: skip
    points=4.0,
)
def check_warp_sum(answer) -> str:
    device = _Device()
    kernel = device.compile(answer, "row_sum", _ROW_SUM)
    rng = np.random.default_rng(73)
    counted = _count_row_sum(device, kernel, answer, rng)
    for count, shape in enumerate(_ROW_SUM_SIZES):
        _run_row_sum(device, kernel, shape, rng, count == 0 and counted == NO_EMULATOR,
                     integers=count % 2 == 0)  # fmt: skip
    return (f"right on {len(_ROW_SUM_SIZES)} launches: rows of 1 to 4097, blocks of 32 to 256 "
            f"threads (96 too); {counted}")
