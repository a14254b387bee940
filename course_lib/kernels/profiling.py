"""Count what emulated kernels do to memory, and bound their time on a real GPU.

``with profile() as p:`` makes every emulated launch inside the block run a second build of
its kernel that counts each load and store (see ``emulator_counting.hpp``), and adds one
:class:`Launch` to ``p``. The counts are exact for the model, which is:

- **Global memory** is a kernel's array arguments and its ``__device__`` variables.
  ``global_loads`` counts load instructions executed by all threads (what is left after g++
  -O2 merges repeated loads of one address, much as nvcc does), ``global_load_bytes`` their
  bytes. An atomic (``atomicAdd``) counts as a load and a store, its read and its write,
  where Nsight Compute counts atomics apart from loads and stores.
- **Warp-level requests**: the accesses of the 32 lanes of a warp to the same instruction in
  the same dynamic occurrence (each lane's k-th execution since the last synchronisation)
  form one request, as on a GPU. ``sectors`` counts the 32-byte sectors each request touches
  (4 for a coalesced warp of floats, 32 for a stride-32 one); ``global_wavefronts`` the
  128-byte lines (one L1 wavefront each).
- **No caches.** ``dram_bytes`` is the *compulsory* traffic: 32 bytes for every distinct
  sector the launch touches, i.e. DRAM traffic behind a perfect cache. A real GPU moves at
  least this; ``sectors * 32`` is what reaches L1 with no reuse between requests, an upper
  end. Where real DRAM traffic falls between depends on L1 and L2, which are not modelled.
- **Shared memory**: 32 banks of 4 bytes. A request is served in wavefronts (a phase of 32
  lanes for 4-byte accesses, 16 for 8-byte, 8 for 16-byte ones); in each phase, distinct
  words in the same bank are served one per wavefront, the same word is broadcast.
  ``bank_conflicts`` counts the wavefronts beyond one per phase.
- ``barriers`` counts ``__syncthreads()`` passed (per block, summed); ``warp_syncs`` the
  lanes' warp-level calls (``__shfl_*_sync``, ``__syncwarp``).
- ``flops`` are not observed: each launcher in :mod:`.launch` declares the flops of its
  algorithm (a multiply-add counts 2: matmul ``2*M*N*K``; ``vector_add`` ``n``; copies 0).

:meth:`Profile.predicted_seconds` turns the counts into a **roofline bound** on a named GPU
(:mod:`.gpus`): for each launch, the largest of flops / peak FP32 rate, compulsory DRAM
bytes / bandwidth, and L1/shared wavefronts / (SMs x clock), one wavefront per clock per SM
(the two on-chip roofs count only the SMs the grid can fill: a block runs on one SM; and
the L1 and shared memory are one SRAM, so their wavefronts add up). A real kernel takes longer
(latency, occupancy, L2, instruction issue, launch overhead): it is a bound, never a
measurement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .. import params
from ..errors import ParameterError
from ..tables import ShownAsTable, Table
from .gpus import GPU, get_gpu

SECTOR_BYTES = 32
_ACTIVE: list[Profile] = []  # the open profiles, innermost last
_LAST: list[Launch] = []  # the launch recorded last (its launcher declares its flops)


@dataclass
class Launch:
    """The counts of one emulated launch."""

    kernel: str
    filename: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    counters: dict[str, int]
    flops: int = 0  # declared by the launcher (see the module docstring)

    def roofs(self, gpu: GPU) -> dict[str, float]:
        """Seconds each roof allows at least: compute, DRAM, L1/shared. A block runs on one
        SM, so a grid of fewer blocks than SMs has only that many SMs' arithmetic and L1."""
        c = self.counters
        busy = min(1.0, self.grid[0] * self.grid[1] * self.grid[2] / gpu.sms)
        wavefronts = c["global_wavefronts"] + c["shared_wavefronts"]
        return {
            "compute": self.flops / (gpu.fp32_tflops * 1e12 * busy),
            "DRAM": c["unique_sectors"] * SECTOR_BYTES / (gpu.dram_gb_per_s * 1e9),
            "L1/shared": wavefronts / (gpu.wavefronts_per_s * busy),
        }


def _total(name: str, doc: str) -> property:
    return property(lambda self: self.total(name), doc=doc)


class Profile(ShownAsTable):
    """The launches counted inside one ``with profile():`` block, and their totals."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []

    def total(self, counter: str) -> int:
        """One counter (see the module docstring), summed over the launches."""
        return sum(launch.counters[counter] for launch in self.launches)

    global_loads = _total("global_loads", "Global load instructions executed (all threads).")
    global_load_bytes = _total("global_load_bytes", "Bytes those loads read.")
    global_stores = _total("global_stores", "Global store instructions executed.")
    global_store_bytes = _total("global_store_bytes", "Bytes those stores wrote.")
    load_sectors = _total("load_sectors", "32-byte sectors touched by warp-level loads.")
    store_sectors = _total("store_sectors", "32-byte sectors touched by warp-level stores.")
    global_wavefronts = _total("global_wavefronts", "128-byte lines touched by requests.")
    unique_sectors = _total("unique_sectors", "Distinct sectors touched (per launch, summed).")
    shared_loads = _total("shared_loads", "Shared-memory load instructions executed.")
    shared_stores = _total("shared_stores", "Shared-memory store instructions executed.")
    shared_requests = _total("shared_requests", "Warp-level shared-memory requests.")
    shared_wavefronts = _total("shared_wavefronts", "Wavefronts serving those requests.")
    bank_conflicts = _total("bank_conflicts", "Wavefronts beyond one per request phase.")
    barriers = _total("barriers", "__syncthreads() passed, per block, summed.")
    warp_syncs = _total("warp_syncs", "Warp-level calls (__shfl_*_sync, __syncwarp) by lanes.")

    @property
    def global_requests(self) -> int:
        """Warp-level global memory requests (load and store instructions of whole warps)."""
        return self.total("global_load_requests") + self.total("global_store_requests")

    @property
    def sectors(self) -> int:
        """32-byte sectors touched by all warp-level global requests."""
        return self.load_sectors + self.store_sectors

    @property
    def sectors_per_request(self) -> float:
        """Sectors per warp-level global request: 4 when 32 lanes read 32 neighbouring floats."""
        return self.sectors / self.global_requests if self.global_requests else 0.0

    @property
    def dram_bytes(self) -> int:
        """Compulsory DRAM traffic: every distinct sector once (a perfect cache)."""
        return self.unique_sectors * SECTOR_BYTES

    @property
    def flops(self) -> int:
        """Floating-point operations declared by the launchers (a multiply-add counts 2)."""
        return sum(launch.flops for launch in self.launches)

    def scaled(self, factor: int) -> Profile:
        """The same launches with ``factor`` (an integer >= 1) times more blocks, each like the
        counted ones: every count and the flops times ``factor``. Exact for a problem
        ``factor`` times larger along the grid when every block does the same work (whole
        tiles) on memory no other block touches (``vector_add``), so a large problem's bound
        needs only a small problem's counts. Where blocks share data (a tiled matmul's blocks
        read the same rows of A), the distinct sectors, and so ``dram_bytes`` and the DRAM
        roof, come out too high: a shared sector counts once per copy of the blocks."""
        factor = params.count(factor, "Profile.scaled: factor", minimum=1)
        scaled = Profile()
        scaled.launches = [
            replace(launch, grid=(launch.grid[0] * factor, *launch.grid[1:]),
                    counters={k: v * factor for k, v in launch.counters.items()},
                    flops=launch.flops * factor)
            for launch in self.launches
        ]  # fmt: skip
        return scaled

    def roofs(self, gpu: GPU | str) -> dict[str, float]:
        """Seconds each roof allows at least, summed over the launches."""
        gpu = get_gpu(gpu)
        per_launch = [launch.roofs(gpu) for launch in self.launches]
        return {roof: sum(r[roof] for r in per_launch) for roof in ("compute", "DRAM", "L1/shared")}

    def predicted_seconds(self, gpu: GPU | str) -> float:
        """A roofline *bound* on the time of these launches on ``gpu`` (a lower bound, not a
        measurement): each launch takes at least its slowest roof; launches run in turn."""
        gpu = get_gpu(gpu)
        return sum(max(launch.roofs(gpu).values()) for launch in self.launches)

    def bound(self, gpu: GPU | str) -> str:
        """Which roof bounds the time: "compute", "DRAM" or "L1/shared" (for several
        launches, the roof that bounds most of the predicted time)."""
        gpu = get_gpu(gpu)
        if not self.launches:
            raise ParameterError("Profile.bound: no launch was counted, so no roof bounds "
                                 "anything (launch kernels in the emulator inside the with "
                                 "block)")  # fmt: skip
        share = {"compute": 0.0, "DRAM": 0.0, "L1/shared": 0.0}
        for launch in self.launches:
            roofs = launch.roofs(gpu)
            slowest = max(roofs, key=roofs.get)
            share[slowest] += roofs[slowest]
        return max(share, key=share.get)

    def table(self) -> Table:
        rows = [
            [launch.kernel, f"{launch.counters['global_loads']:,}",
             f"{launch.counters['global_stores']:,}",
             f"{launch.counters['load_sectors'] + launch.counters['store_sectors']:,}",
             f"{launch.counters['shared_loads'] + launch.counters['shared_stores']:,}",
             f"{launch.counters['bank_conflicts']:,}", f"{launch.counters['barriers']:,}",
             f"{launch.flops:,}"]
            for launch in self.launches
        ]  # fmt: skip
        headers = ["kernel", "global loads", "global stores", "sectors", "shared accesses",
                   "bank conflicts", "barriers", "flops"]  # fmt: skip
        return Table(headers, rows, "counted by the CPU emulator")


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Count the memory accesses of every emulated launch inside the ``with`` block.

    >>> with profile() as p:                                    # doctest: +SKIP
    ...     launch.matmul_naive(a, b, mode="emulator")
    >>> p.global_loads == 2 * M * N * K                         # doctest: +SKIP
    True

    Launches on a GPU are not counted (only the emulator sees each access).
    """
    counted = Profile()
    _ACTIVE.append(counted)
    try:
        yield counted
    finally:
        _ACTIVE.remove(counted)


def counting() -> bool:
    """True inside ``with profile():`` (launches then run the counting build)."""
    return bool(_ACTIVE)


def record(launch: Launch) -> None:
    """Add an emulated launch to every open profile (called by the emulator)."""
    for counted in _ACTIVE:
        counted.launches.append(launch)
    _LAST[:] = [launch]


def add_flops(flops: int) -> None:
    """Declare the flops of the launch just recorded (called by the launchers)."""
    if _ACTIVE and _LAST:
        _LAST[0].flops += int(flops)
