"""Pictures of memory traffic: the sectors one warp's loads touch (``plot_warp_sectors``), and
when a decoding step stops waiting for memory (``plot_decode_steps``).

Both draw numbers computed by the package, not by the plot: the sector counts of
:mod:`course_lib.kernels.analysis` and the roofline bounds of
:mod:`course_lib.models.inference`, so a figure agrees with the tables printed next to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from .. import params
from ..errors import ParameterError
from ..kernels.analysis import SECTOR_BYTES, WARP, sectors_touched, warp_addresses
from ..kernels.gpus import GPU, get_gpu
from ..models.config import LlamaConfig
from ..models.inference import decode_crossover_batch, decode_step
from .plots import CourseFigure, plot_curve

MAX_SECTORS = 128  # a strip of more sectors than this is too thin to read
BATCHES = tuple(2**k for k in range(11))  # 1 to 1024


def plot_warp_sectors(strides: Sequence[int] = (1, 2, 8), itemsize: int = 4) -> Figure:
    """One row per stride: where a warp's 32 threads read (thread t reads ``x[t * stride]``,
    a mark each) over a strip of memory in 32-byte sectors, the sectors they touch shaded,
    and how many that is per request (:func:`course_lib.kernels.analysis.sectors_touched`).

    ``itemsize`` is the bytes each thread reads (4: a float). Every row shares one byte axis,
    so a wider stride spreads the same 32 loads over more of memory.
    """
    strides = [params.positive_size(s, "plot_warp_sectors: stride") for s in strides]
    itemsize = params.positive_size(itemsize, "plot_warp_sectors: itemsize")
    if not strides:
        raise ParameterError("plot_warp_sectors needs at least one stride")
    addresses = [warp_addresses(stride, itemsize) for stride in strides]
    n_sectors = -(-int(max(a[-1] for a in addresses) + itemsize) // SECTOR_BYTES)
    if n_sectors > MAX_SECTORS:
        raise ParameterError(
            f"plot_warp_sectors draws at most {MAX_SECTORS} sectors, but stride "
            f"{max(strides)} of {itemsize}-byte items spans {n_sectors}; draw smaller strides"
        )
    fig = plt.figure(figsize=(9.6, 0.8 * len(strides) + 1.4), layout="constrained",
                     FigureClass=CourseFigure)  # fmt: skip
    plt.close(fig)
    ax = fig.add_subplot()
    counts = [sectors_touched(reads, itemsize) for reads in addresses]
    for row, (reads, count) in enumerate(zip(addresses, counts)):
        touched = _sectors_read(reads, itemsize)
        ax.broken_barh([(s * SECTOR_BYTES, SECTOR_BYTES) for s in range(n_sectors)],
                       (row - 0.3, 0.6), edgecolor="grey", linewidth=0.5,
                       facecolors=["#fdbf6f" if s in touched else "white"
                                   for s in range(n_sectors)])  # fmt: skip
        ax.scatter(reads + itemsize / 2, np.full(WARP, row), marker="|", s=150, color="black")
        ax.text(1.01, row, f"{count} sectors\nper request", va="center", fontsize=8,
                transform=ax.get_yaxis_transform())  # fmt: skip
    ax.set_yticks(range(len(strides)), [f"stride {s}" for s in strides])
    ax.set_ylim(len(strides) - 0.5, -0.5)
    ax.set_xlim(0, n_sectors * SECTOR_BYTES)
    ax.set_xlabel(f"byte address (strip: {SECTOR_BYTES}-byte sectors, shaded where a thread reads)")
    ax.set_title(f"One warp's {WARP} loads of {itemsize} bytes: thread t reads x[t · stride]")
    fig.summary = "sectors per request: " + ", ".join(
        f"stride {s}: {c}" for s, c in zip(strides, counts)
    )
    return fig


def _sectors_read(addresses, itemsize: int) -> set[int]:
    """The sectors holding some byte of the reads of ``itemsize`` bytes at ``addresses``."""
    first, last = addresses // SECTOR_BYTES, (addresses + itemsize - 1) // SECTOR_BYTES
    return {int(s) for a, b in zip(first, last) for s in range(a, b + 1)}


def plot_decode_steps(
    config: LlamaConfig,
    gpu: GPU | str = "A100",
    contexts: Sequence[int] = (0, 4096),
    batches: Sequence[int] = BATCHES,
) -> Figure:
    """Tokens per second of a decoding step against the batch, one line per context length
    (:func:`~course_lib.models.inference.decode_step`, bf16, the roofline bound), with a
    dotted line at the batch where the step turns compute-bound
    (:func:`~course_lib.models.inference.decode_crossover_batch`), if it ever does."""
    gpu = get_gpu(gpu)
    if not contexts or not batches or list(batches) != sorted(set(batches)):
        raise ParameterError(
            f"plot_decode_steps needs contexts and increasing batches, got contexts "
            f"{list(contexts)} and batches {list(batches)}"
        )
    turns = {context: decode_crossover_batch(config, context, gpu) for context in contexts}
    xs = sorted({*batches, *(t for t in turns.values() if t is not None)})  # the knees drawn
    lines = {}
    for context, turn in turns.items():
        where = (
            "memory-bound at every batch" if turn is None else f"compute-bound from batch {turn}"
        )
        lines[f"context {context}: {where}"] = [
            decode_step(config, b, context, gpu).tokens_per_second for b in xs
        ]
    fig = plot_curve(
        xs,
        lines,
        "batch (sequences decoded together)",
        "new tokens per second",
        f"Decoding on the {gpu.name}: roofline bound (bf16)",
        logy=True,
        logx=True,
    )
    ax = fig.axes[0]
    for colour, turn in enumerate(turns.values()):
        if turn is not None:
            ax.axvline(turn, color=f"C{colour}", linestyle=":", linewidth=1.5)
    ax.legend(fontsize=8)  # also for one context: its label says where it turns
    return fig
