"""The op-repeat experiment (after Horace He, "Making Deep Learning Go Brrrr"): how many
elementwise ops can one fused kernel do before fusing more stops paying?

``chained_ops(x, k)`` applies k cheap elementwise ops in a row. Fused, they are one kernel
that reads x once and writes the result once: 8 bytes per float32 element for k FLOPs, so
its intensity grows as k/8 FLOPs per byte. While memory is the bottleneck its time stays
flat in k (the extra arithmetic hides behind the bytes); past the ridge the arithmetic takes
longer than the bytes and the time grows with k. Unfused, every op is a pass over memory and
the time grows with k from the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import params
from ..errors import ParameterError
from ..graph import variable
from ..passes import Fused, fuse_elementwise
from ..passes.fusion.cpu_loop import run_cpu_loop
from ..passes.fusion.regions import MAX_OPS
from .ceilings import Roofline
from .counts import arithmetic_intensity
from .points import KernelPoint
from .timing import best_seconds, interleaved_medians

STEPS = (np.multiply, np.add)  # the ops, in turn: x·½, then + ½
CACHE_ELEMENTS = 2**16  # 256 KiB in, 256 KiB out: the in-cache runs stay in L2


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
    """Chains of ``k`` ops timed fused and unfused, and the fused loop's arithmetic ceiling.

    Attributes
    ----------
    ks : tuple of int
        The chain lengths, increasing.
    fused, unfused : tuple of KernelPoint
        For each k: the chain after the fusion pass (one kernel; for k = 1 there is nothing
        to fuse), and op by op (k kernels), with their counted FLOPs and bytes.
    loop_flops : float
        The best FLOP/s of the fused kernels on :data:`CACHE_ELEMENTS` elements that stay in
        cache: how fast this loop does arithmetic when it never waits for memory.
    """

    ks: tuple[int, ...]
    fused: tuple[KernelPoint, ...]
    unfused: tuple[KernelPoint, ...]
    loop_flops: float

    def loop_roofline(self, roofline: Roofline) -> Roofline:
        """The fused loop's own roofline: ``roofline``'s bandwidth, the loop's FLOP rate."""
        return Roofline(roofline.bandwidth, self.loop_flops)

    def bound_seconds(self, roofline: Roofline) -> tuple[float, ...]:
        """Each fused kernel's least time on the loop's roofline: the larger of its bytes at
        the bandwidth and its FLOPs at the loop's rate."""
        roof = self.loop_roofline(roofline)
        return tuple(p.flops / float(roof.attainable(p.intensity)) for p in self.fused)

    def turn(self, roofline: Roofline) -> int | None:
        """The first k right of the loop's ridge: from there on the fused kernel is
        compute-bound and every further op costs time (None: all are memory-bound)."""
        ridge = self.loop_roofline(roofline).ridge
        return next((k for k, p in zip(self.ks, self.fused) if p.intensity > ridge), None)


def measure_op_repeat(
    ks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), n: int = 2**23, repeats: int = 3
) -> OpRepeat:
    """Time ``chained_ops`` fused (the fusion pass's generated C++ loop) and unfused (one
    NumPy kernel per op) on ``n`` float32 elements for each k in ``ks``, and fused on the
    first :data:`CACHE_ELEMENTS` of them. ``n`` should make an array several times larger
    than the last-level cache.

    Every run writes into one preallocated output. The medians of ``repeats`` runs are taken
    in turn (each k fused and unfused, round after round); the in-cache runs take the best
    of ``repeats`` (at least 9), as a ceiling should: short chains spend their time in the
    call, not the arithmetic, so the best rate over all k is the loop's.
    """
    ks = tuple(params.positive_size(k, "measure_op_repeat: k") for k in ks)
    n = params.positive_size(n, "measure_op_repeat: n")
    if not ks or list(ks) != sorted(set(ks)) or ks[-1] > MAX_OPS:
        raise ParameterError(
            f"measure_op_repeat: ks must be increasing chain lengths from 1 to {MAX_OPS} (the "
            f"fusion pass splits longer chains into several kernels), got {ks}"
        )
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out = np.empty_like(x)
    small = min(n, CACHE_ELEMENTS)
    graphs, runs, rates = {}, {}, []
    for k in ks:
        graphs[k, "unfused"] = chained_ops(variable("x", (n,), np.float32), k)
        graphs[k, "fused"] = fuse_elementwise(graphs[k, "unfused"])
        runs[k, "unfused"] = lambda k=k: chained_ops(x, k, out)
        runs[k, "fused"] = _runner(graphs[k, "fused"], k, x, out)
        in_cache = _runner(graphs[k, "fused"], k, x[:small], out[:small])
        rates.append(k * small / best_seconds(in_cache, repeats=max(repeats, 9)))
    seconds = interleaved_medians(runs, repeats=repeats)
    points = {}
    for (k, kind), graph in graphs.items():
        report = arithmetic_intensity(graph)
        points[k, kind] = KernelPoint(f"{kind} k={k}", report.flops, report.bytes, seconds[k, kind])
    return OpRepeat(
        ks,
        tuple(points[k, "fused"] for k in ks),
        tuple(points[k, "unfused"] for k in ks),
        max(rates),
    )


def _runner(fused, k: int, x: np.ndarray, out: np.ndarray):
    """Run the fusion pass's result on ``x`` into ``out``: its compiled loop, or, when the
    pass left one op (k = 1), that op as NumPy's kernel."""
    if isinstance(fused.op, Fused):
        return lambda: run_cpu_loop(fused.op.kernel, [x], out=out)
    return lambda: chained_ops(x, k, out)
