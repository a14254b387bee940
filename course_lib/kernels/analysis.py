"""Coalescing on paper: the sectors a warp touches for a given access pattern.

This is the count a GPU programmer does by hand; :func:`course_lib.kernels.profile` measures
the same thing on the real kernels (the tests check that both agree).
"""

from __future__ import annotations

import numpy as np

SECTOR_BYTES = 32  # the unit in which a GPU's L2 cache moves data to and from DRAM
WARP = 32


def warp_addresses(stride: int, itemsize: int = 4, offset: int = 0) -> np.ndarray:
    """Byte addresses read by a warp's 32 threads when thread t reads ``x[offset + t * stride]``."""
    return (offset + np.arange(WARP) * stride) * itemsize


def sectors_touched(addresses, access_bytes: int = 4) -> int:
    """How many 32-byte sectors one warp-wide access to ``addresses`` touches (every sector
    from the first to the last byte of each read: a read wider than 32 bytes spans several)."""
    addresses = np.asarray(addresses).ravel()
    first = addresses // SECTOR_BYTES
    last = (addresses + access_bytes - 1) // SECTOR_BYTES
    spans = [np.arange(a, b + 1) for a, b in zip(first, last)]
    return len(np.unique(np.concatenate(spans))) if spans else 0
