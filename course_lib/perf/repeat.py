"""The op-repeat experiment (after Horace He, "Making Deep Learning Go Brrrr"): how many
elementwise ops can one fused kernel do before the extra ops stop being free?

``chained_ops(x, k)`` applies k cheap elementwise ops in a row. Fused, they are one kernel
that reads x once and writes the result once: 8 bytes per float32 element for k FLOPs, so
its intensity grows as k/8 FLOPs per byte. While memory is the bottleneck its time stays
flat in k (the extra arithmetic hides behind the bytes); past the ridge the arithmetic takes
longer than the bytes and the time grows with k. Unfused, every op is a pass over memory and
the time grows with k from the start.

It measures the CPU, whatever course_lib's current device: NumPy arrays in host memory, the
fusion pass's compiled C++ loop and NumPy's kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .. import params
from ..errors import GraphError, ParameterError
from ..graph import variable
from ..passes import Fused, fuse_elementwise
from ..passes.fusion.cpu_loop import bind_cpu_loop
from ..passes.fusion.regions import MAX_OPS
from .ceilings import Roofline
from .counts import arithmetic_intensity
from .points import KernelPoint
from .timing import interleaved_medians

STEPS = (np.multiply, np.add)  # the ops, in turn: x·½, then + ½
CACHE_ELEMENTS = 2**16  # 256 KiB in, 256 KiB out: the in-cache runs stay in L2 cache


def chained_ops(x, k: int, out=None):
    """``k`` elementwise ops in a row: ``x·½``, ``+ ½``, ``·½``, ``+ ½``, ...

    Each pair maps x to ``(x + 1) / 2``, halfway to 1, so no value overflows or turns
    subnormal (which would slow the arithmetic down) however large ``k`` is. ``x`` is a
    node (the ops build a graph) or a NumPy array; ``out`` (arrays only) receives every op's
    result in turn, each op one pass over memory, as unfused kernels run.
    """
    if params.integer(k, "chained_ops: k") < 0:
        raise ParameterError(f"chained_ops: k counts ops, so it cannot be negative, got {k}")
    into = {} if out is None else {"out": out}
    for i in range(k):
        x = STEPS[i % 2](x, 0.5, **into)
    return x


@dataclass(frozen=True)
class OpRepeat:
    """Chains of ``k`` ops, timed fused and unfused, and fused again on data in cache.

    Attributes
    ----------
    ks : tuple of int
        The chain lengths, increasing.
    fused, unfused : tuple of KernelPoint
        For each k: the chain after the fusion pass (one kernel; for k = 1 there is nothing
        to fuse), and op by op (k kernels), with their counted FLOPs and bytes.
    in_cache : tuple of KernelPoint
        For each k: the fused kernel doing the same work on a slice that stays in cache
        (the slice over and over), so it never waits for main memory: its time is the
        arithmetic's, or for short chains the cache's bandwidth, and its best FLOP rate the
        loop's. Counted as the fused kernel.
    """

    ks: tuple[int, ...]
    fused: tuple[KernelPoint, ...]
    unfused: tuple[KernelPoint, ...]
    in_cache: tuple[KernelPoint, ...]

    @property
    def loop_flops(self) -> float:
        """The fused loops' best FLOP/s in cache: their arithmetic ceiling."""
        return max(p.flops_per_second for p in self.in_cache)

    def memory_seconds(self, roofline: Roofline) -> tuple[float, ...]:
        """Each fused kernel's bytes at ``roofline``'s bandwidth: its time if only memory
        counted (the arithmetic time is ``in_cache``'s)."""
        return tuple(p.bytes / roofline.bandwidth for p in self.fused)

    def turn(self, roofline: Roofline) -> int | None:
        """The k from which on every chain's arithmetic (in cache) takes longer than its bytes
        at ``roofline``'s bandwidth: the fused kernel is compute-bound there and every further
        op costs time. None if the longest chain is memory-bound. (A short chain that comes
        out slow in cache on a busy machine does not move the turn.)"""
        turn = None
        times = zip(self.ks, self.memory_seconds(roofline), self.in_cache)
        for k, memory, cached in reversed(list(times)):
            if cached.seconds <= memory:
                break
            turn = k
        return turn


def measure_op_repeat(
    ks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), n: int = 2**23, repeats: int = 3
) -> OpRepeat:
    """Time ``chained_ops`` on ``n`` float32 elements for each k in ``ks``: fused (the
    fusion pass's generated C++ loop), unfused (one NumPy kernel per op), and fused on the
    first :data:`CACHE_ELEMENTS` elements, ``n // CACHE_ELEMENTS`` times over (the same work
    with no memory traffic; its time is scaled to exactly ``n`` elements). ``n`` should make
    an array several times larger than the last-level cache.

    Every run writes into one preallocated output whose pages are mapped, and every loop is
    compiled before the timings (when it is bound), so no warm-up round is needed. The
    medians of ``repeats`` runs are taken in turn (every run of a round, round after round),
    so a busy machine slows all alike.
    """
    if not isinstance(ks, Iterable) or getattr(ks, "ndim", 1) != 1:
        raise GraphError(f"measure_op_repeat: ks must be a sequence of chain lengths such as "
                         f"(1, 2, 4), got {ks!r}")  # fmt: skip
    ks = tuple(params.positive_size(k, "measure_op_repeat: k") for k in ks)
    n = params.positive_size(n, "measure_op_repeat: n")
    repeats = params.count(repeats, "measure_op_repeat: repeats", minimum=1)  # before compiling
    if not ks or list(ks) != sorted(set(ks)) or ks[-1] > MAX_OPS:
        raise ParameterError(
            f"measure_op_repeat: ks must be increasing chain lengths from 1 to {MAX_OPS} (the "
            f"fusion pass splits longer chains into several kernels), got {ks}"
        )
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out = x.copy()  # written once already: no first-touch page faults in the timings
    small = min(n, CACHE_ELEMENTS)
    times = n // small
    graphs, runs = {}, {}
    for k in ks:
        graphs[k, "unfused"] = chained_ops(variable("x", (n,), np.float32), k)
        graphs[k, "fused"] = fused = fuse_elementwise(graphs[k, "unfused"])
        runs[k, "unfused"] = lambda k=k: chained_ops(x, k, out)
        runs[k, "fused"] = _runner(fused, k, x, out)
        runs[k, "in cache"] = _repeated(_runner(fused, k, x[:small], out[:small]), times)
    seconds = interleaved_medians(runs, repeats=repeats, warmup=0)
    points = {}
    for (k, kind), graph in graphs.items():
        report = arithmetic_intensity(graph)
        points[k, kind] = KernelPoint(f"{kind} k={k}", report.flops, report.bytes, seconds[k, kind])
    return OpRepeat(
        ks,
        tuple(points[k, "fused"] for k in ks),
        tuple(points[k, "unfused"] for k in ks),
        tuple(
            replace(points[k, "fused"], name=f"in cache k={k}",
                    seconds=seconds[k, "in cache"] * n / (times * small))  # fmt: skip
            for k in ks
        ),
    )


def _runner(fused, k: int, x: np.ndarray, out: np.ndarray) -> Callable[[], object]:
    """Run the fusion pass's result on ``x`` into ``out``: its compiled loop (bound once,
    so a call costs about what NumPy's does), or, when the pass left one op (k = 1), that
    op as NumPy's kernel."""
    if isinstance(fused.op, Fused):
        return bind_cpu_loop(fused.op.kernel, [x], out)
    return lambda: chained_ops(x, k, out)


def _repeated(run: Callable[[], object], times: int) -> Callable[[], None]:
    """``run`` ``times`` times in a row, as one call."""

    def repeated():
        for _ in range(times):
            run()

    return repeated
