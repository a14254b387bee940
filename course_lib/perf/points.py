"""Measured kernels as points on a roofline: intensity (FLOPs/byte) and FLOP/s achieved."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .. import params
from ..graph import Node
from ..runtime import Executor
from .counts import arithmetic_intensity
from .timing import median_seconds


@dataclass(frozen=True)
class KernelPoint:
    """A measured kernel: its FLOPs and bytes (counted) and its median time."""

    name: str
    flops: float
    bytes: float
    seconds: float

    def __post_init__(self):
        for count in ("flops", "bytes", "seconds"):
            params.real(getattr(self, count), f"kernel point {self.name!r}: {count}", positive=True)

    @property
    def intensity(self) -> float:
        """FLOPs per byte."""
        return self.flops / self.bytes

    @property
    def flops_per_second(self) -> float:
        return self.flops / self.seconds


def measure_kernel(
    name: str, fn: Callable, flops: float, nbytes: float, repeats: int = 7
) -> KernelPoint:
    """Time ``fn()`` (median of ``repeats``) and pair it with its counted work (checked
    first: a kernel of no FLOPs or no bytes is no point on a log-log roofline)."""
    for count, value in (("flops", flops), ("bytes", nbytes)):
        params.real(value, f"kernel point {name!r}: {count}", positive=True)
    return KernelPoint(name, flops, nbytes, median_seconds(fn, repeats=repeats))


def measure_graph(
    name: str, outputs: Node | list[Node], feed: Mapping, optimize: bool = False, repeats: int = 7
) -> KernelPoint:
    """Run a graph with an :class:`Executor` and place it by the counts of the graph it ran.

    With ``optimize=True`` the passes run first, so a fused graph is counted (and timed)
    as the fused kernels it executes. The graph runs (and is timed, the GPU synchronised) on
    the current device; the ceilings of :func:`~course_lib.perf.measure_roofline` are the
    CPU's, so to place kernels under them measure them in a
    ``with course_lib.use_device("cpu"):`` block.
    """
    run = Executor(outputs, optimize=optimize)
    report = arithmetic_intensity(run.outputs)
    return measure_kernel(
        name, lambda: run.run(feed, allow_unused=True), report.flops, report.bytes, repeats
    )
