"""Published specifications of a few NVIDIA GPUs, and the occupancy a kernel reaches on them.

The figures are the vendors' (datasheets, architecture whitepapers, the CUDA C++ Programming
Guide's table of compute capabilities); each is cited where it is written down. They are
peak rates: sustained rates are lower, so times computed from them are bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import params
from ..errors import ParameterError
from ..tables import ShownAsTable, Table

BANKS = 32  # shared memory: 32 banks of 4 bytes, each serving one word per clock
BANK_BYTES = 4
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256 (compute capability >= 7)
SHARED_UNIT = 128  # shared memory is allocated per block in units of 128 bytes


@dataclass(frozen=True)
class GPU:
    """One GPU model: what bounds the time of a kernel on it.

    ``fp32_tflops`` is the CUDA cores' peak (a fused multiply-add counts as 2 flops);
    ``tf32_tflops`` the tensor cores' dense TF32 peak (None: no TF32), which our kernels do
    not use but cuBLAS does; ``bf16_tflops`` their dense BF16 peak with FP32 accumulation
    (None: no BF16), the rate LLM training and serving are measured against (MFU);
    ``memory_gib`` the DRAM the driver exposes, ``nvidia-smi``'s total in GiB (the A100's
    "40 GB" are 40960 MiB, the H100's "80 GB" only 81559 MiB, the T4's "16 GB" 15360 MiB with
    ECC on); ``clock_ghz`` the boost clock the peaks are quoted at.
    """

    name: str
    architecture: str
    compute_capability: str
    sms: int
    clock_ghz: float
    fp32_tflops: float
    tf32_tflops: float | None
    dram_gb_per_s: float
    l2_mib: float
    shared_kib_per_sm: int  # the most a block may use, configurable with L1
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int = 65536
    reserved_shared_bytes: int = 1024  # per block, taken by the system (compute capability 8+)
    bf16_tflops: float | None = None
    memory_gib: float | None = None

    @property
    def shared_bytes_per_s(self) -> float:
        """Shared memory (and L1) bandwidth of the whole GPU: 32 banks x 4 bytes per clock
        per SM (one wavefront per clock)."""
        return self.sms * BANKS * BANK_BYTES * self.clock_ghz * 1e9

    @property
    def wavefronts_per_s(self) -> float:
        """L1/shared wavefronts the GPU serves per second: one per clock per SM."""
        return self.sms * self.clock_ghz * 1e9

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity at which the FP32 roof meets the DRAM roof."""
        return self.fp32_tflops * 1e12 / (self.dram_gb_per_s * 1e9)


GPUS: dict[str, GPU] = {
    # NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), table 3, and the A100 40 GB
    # SXM4 datasheet: 108 SMs at 1410 MHz, 19.5 TFLOPS FP32, 156 TFLOPS TF32 (dense),
    # 1555 GB/s HBM2, 40 MB L2, up to 164 KB shared memory per SM, 312 TFLOPS BF16 tensor
    # (dense; 624 with sparsity), 40 GB. (The 80 GB A100 has the same peaks, 2039 GB/s.)
    # CUDA C++ Programming Guide, compute capability 8.0: 2048 threads, 32 blocks per SM.
    "A100": GPU("A100", "Ampere", "8.0", sms=108, clock_ghz=1.41, fp32_tflops=19.5,
                tf32_tflops=156.0, dram_gb_per_s=1555.0, l2_mib=40.0, shared_kib_per_sm=164,
                max_threads_per_sm=2048, max_blocks_per_sm=32, bf16_tflops=312.0,
                memory_gib=40.0),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5) and Hopper architecture whitepaper (2022):
    # 132 SMs at 1980 MHz, 67 TFLOPS FP32, 495 TFLOPS TF32 (989 with sparsity), 3.35 TB/s
    # HBM3, 50 MB L2, up to 228 KB shared memory per SM, 1979 TFLOPS BF16 tensor with
    # sparsity (989.5 dense), 80 GB (nvidia-smi: 81559 MiB, 79.6 GiB). Compute capability 9.0:
    # 2048 threads, 32 blocks per SM.
    "H100": GPU("H100", "Hopper", "9.0", sms=132, clock_ghz=1.98, fp32_tflops=67.0,
                tf32_tflops=495.0, dram_gb_per_s=3350.0, l2_mib=50.0, shared_kib_per_sm=228,
                max_threads_per_sm=2048, max_blocks_per_sm=32, bf16_tflops=989.5,
                memory_gib=79.6),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100's GH100 chip (132 SMs at 1980 MHz,
    # 67 TFLOPS FP32, 494.7 TFLOPS TF32 and 989.5 TFLOPS BF16 dense, 228 KB shared memory per
    # SM) with 141 GB of HBM3e at 4.8 TB/s. nvidia-smi on the H200 that ran `make gpu-check`
    # (2026-11-26) showed 143771 MiB; CUDA reports 60 MB of L2 on it. Compute capability 9.0.
    "H200": GPU("H200", "Hopper", "9.0", sms=132, clock_ghz=1.98, fp32_tflops=67.0,
                tf32_tflops=494.7, dram_gb_per_s=4800.0, l2_mib=60.0, shared_kib_per_sm=228,
                max_threads_per_sm=2048, max_blocks_per_sm=32, bf16_tflops=989.5,
                memory_gib=140.4),
    # NVIDIA T4 datasheet and Turing architecture whitepaper (2018): 40 SMs at 1590 MHz,
    # 8.1 TFLOPS FP32, no TF32 (Turing's tensor cores take FP16/INT8), 320 GB/s GDDR6, 4 MB
    # L2, 64 KB shared memory per SM, 16 GB (15360 MiB with ECC on, its default: 15 GiB).
    # Compute capability 7.5: 1024 threads, 16 blocks per SM, no reserved shared memory.
    "T4": GPU("T4", "Turing", "7.5", sms=40, clock_ghz=1.59, fp32_tflops=8.1, tf32_tflops=None,
              dram_gb_per_s=320.0, l2_mib=4.0, shared_kib_per_sm=64, max_threads_per_sm=1024,
              max_blocks_per_sm=16, reserved_shared_bytes=0, memory_gib=15.0),
    # NVIDIA Ada Lovelace architecture whitepaper (2022), GeForce RTX 4090: 128 SMs at
    # 2520 MHz, 82.6 TFLOPS FP32, 82.6 TFLOPS TF32 (dense), 165.2 TFLOPS BF16 tensor with
    # FP32 accumulation (dense), 1008 GB/s GDDR6X, 72 MB L2, 24 GB.
    # Compute capability 8.9: 100 KB shared memory, 1536 threads, 24 blocks per SM.
    "RTX 4090": GPU("RTX 4090", "Ada Lovelace", "8.9", sms=128, clock_ghz=2.52,
                    fp32_tflops=82.6, tf32_tflops=82.6, dram_gb_per_s=1008.0, l2_mib=72.0,
                    shared_kib_per_sm=100, max_threads_per_sm=1536, max_blocks_per_sm=24,
                    bf16_tflops=165.2, memory_gib=24.0),
}  # fmt: skip


def get_gpu(gpu: GPU | str) -> GPU:
    """``gpu`` itself, or the GPU of that name in :data:`GPUS`."""
    if isinstance(gpu, GPU):
        return gpu
    if not isinstance(gpu, str) or gpu not in GPUS:
        raise ParameterError(f"unknown GPU {gpu!r}; the table has {', '.join(GPUS)}")
    return GPUS[gpu]


class SpecTable(ShownAsTable):
    """The GPUs of :data:`GPUS` side by side (a table for notebooks)."""

    def table(self) -> Table:
        rows = [
            [g.name, g.compute_capability, str(g.sms), f"{g.fp32_tflops:g}",
             "-" if g.tf32_tflops is None else f"{g.tf32_tflops:g}", f"{g.dram_gb_per_s:g}",
             f"{g.shared_bytes_per_s / 1e12:.1f}", f"{g.l2_mib:g}", f"{g.shared_kib_per_sm}",
             f"{g.ridge_flop_per_byte:.1f}"]
            for g in GPUS.values()
        ]  # fmt: skip
        headers = ["GPU", "cc", "SMs", "FP32 TFLOP/s", "TF32 TFLOP/s", "DRAM GB/s",
                   "shared TB/s", "L2 MiB", "shared KiB/SM", "ridge flop/B"]  # fmt: skip
        return Table(headers, rows, "published peaks (bounds, not measurements)")


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of a kernel fit on one SM at once, and what stops more from fitting."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # active warps / the SM's maximum
    limit: str  # "threads", "registers", "shared memory" or "blocks"


def occupancy(
    gpu: GPU | str, threads_per_block: int, registers_per_thread: int, shared_bytes: int = 0
) -> Occupancy:
    """Blocks per SM allowed by each resource (the CUDA occupancy calculator's rules, without
    its per-architecture allocation details: registers in units of 256 per warp, shared memory
    in units of 128 bytes plus the reserved bytes per block)."""
    gpu = get_gpu(gpu)
    threads_per_block = params.integer(threads_per_block, "occupancy: threads_per_block")
    registers_per_thread = params.integer(registers_per_thread, "occupancy: registers_per_thread")
    shared_bytes = params.integer(shared_bytes, "occupancy: shared_bytes")
    if not 1 <= threads_per_block <= 1024 or not 1 <= registers_per_thread <= 255:
        raise ParameterError(
            f"occupancy needs 1..1024 threads per block and 1..255 registers per thread, got "
            f"{threads_per_block} and {registers_per_thread}"
        )
    if shared_bytes < 0:
        raise ParameterError(f"occupancy: shared_bytes must be >= 0, got {shared_bytes}")
    warps = math.ceil(threads_per_block / 32)
    registers_per_warp = math.ceil(registers_per_thread * 32 / REGISTER_UNIT) * REGISTER_UNIT
    shared = math.ceil((shared_bytes + gpu.reserved_shared_bytes) / SHARED_UNIT) * SHARED_UNIT
    limits = {
        "threads": gpu.max_threads_per_sm // (warps * 32),
        "registers": gpu.registers_per_sm // registers_per_warp // warps,
        "blocks": gpu.max_blocks_per_sm,
    }
    if shared:  # a block that needs no shared memory is not limited by it
        limits["shared memory"] = gpu.shared_kib_per_sm * 1024 // shared
    limit = min(limits, key=limits.get)
    blocks = limits[limit]
    return Occupancy(blocks, blocks * warps, blocks * warps * 32 / gpu.max_threads_per_sm, limit)
