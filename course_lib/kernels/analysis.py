"""Back-of-the-envelope memory traffic of kernels: coalescing and arithmetic intensity.

These are the counts a GPU programmer does on paper (the emulator has no timing), so that
a notebook can show *why* coalescing, float4, tiling and fusion help.
"""

from __future__ import annotations

import numpy as np

SECTOR_BYTES = 32  # the unit in which a GPU's L2 cache moves data to and from DRAM
WARP = 32


def warp_addresses(stride: int, itemsize: int = 4, offset: int = 0) -> np.ndarray:
    """Byte addresses read by a warp's 32 threads when thread t reads ``x[offset + t * stride]``."""
    return (offset + np.arange(WARP) * stride) * itemsize


def sectors_touched(addresses, access_bytes: int = 4) -> int:
    """How many 32-byte sectors one warp-wide access to ``addresses`` touches."""
    addresses = np.asarray(addresses)
    first = addresses // SECTOR_BYTES
    last = (addresses + access_bytes - 1) // SECTOR_BYTES
    return len(np.unique(np.concatenate([first, last])))


def matmul_traffic(m: int, n: int, k: int, tile: int = 1) -> dict:
    """Flops, global-memory bytes and arithmetic intensity of C = A @ B (float32).

    ``tile = 1`` is the naive kernel (each thread reads a row of A and a column of B);
    a ``tile x tile`` shared-memory tiling loads each A and B value once per tile, so the
    loads shrink by the factor ``tile``. Writes of C are counted once.
    """
    flops = 2 * m * n * k
    loaded = 2 * m * n * k / tile * 4
    stored = m * n * 4
    return {"flops": flops, "bytes": loaded + stored, "intensity": flops / (loaded + stored)}


def elementwise_intensity(ops: int, loads: int, stores: int) -> float:
    """Operations per memory access, as the lecture counts it (``C = A + B``: 1 / 3)."""
    return ops / (loads + stores)
