"""Performance accounting: FLOPs and bytes of graphs, arithmetic intensity, measured machine
ceilings (memory bandwidth, matmul rate), kernels placed on a roofline, the op-repeat
experiment (how many fused ops are free), median timings, and how many threads NumPy's pools
may use."""

from .ceilings import Roofline, measure_bandwidth, measure_matmul_rate, measure_roofline
from .counts import IntensityReport, OpCost, arithmetic_intensity, flops_by_node, op_cost
from .points import KernelPoint, measure_graph, measure_kernel
from .repeat import OpRepeat, chained_ops, measure_op_repeat
from .search import Candidate, search_fusions
from .threads import ThreadLimits, limit_threads
from .timing import (
    best_seconds,
    blocked_medians,
    blocked_times,
    interleaved_medians,
    median_seconds,
    pooled_medians,
    ratio_by_rounds,
)

__all__ = [
    "Candidate",
    "IntensityReport",
    "KernelPoint",
    "OpCost",
    "OpRepeat",
    "Roofline",
    "ThreadLimits",
    "arithmetic_intensity",
    "best_seconds",
    "chained_ops",
    "blocked_medians",
    "blocked_times",
    "flops_by_node",
    "interleaved_medians",
    "limit_threads",
    "measure_bandwidth",
    "measure_graph",
    "measure_kernel",
    "measure_matmul_rate",
    "measure_op_repeat",
    "measure_roofline",
    "median_seconds",
    "op_cost",
    "pooled_medians",
    "ratio_by_rounds",
    "search_fusions",
]
