"""Graph optimisation passes: each rewrites a graph (its output nodes) into an equivalent one.

Every pass is a pure function ``outputs -> new outputs``: nodes are immutable, so the
original graph is untouched and unchanged parts are shared. Results and gradients are
preserved (tested on random graphs). :func:`optimize` runs them all; ``Executor(...,
optimize=True)`` and :func:`course_lib.jit` call it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import GraphError
from .cse import eliminate_common_subexpressions
from .folding import fold_constants
from .fusion import Fused, find_regions, fuse_elementwise
from .matmuls import accumulate_products, merge_matmuls
from .rewrite import Graph

# CSE first (equal inputs become one node, so shared operands are found), folding after the
# matmul merge (constant weights are concatenated once, while optimising), sums of products
# before fusion (which would otherwise take their additions), fusion last.
PIPELINE = (eliminate_common_subexpressions, merge_matmuls, accumulate_products,
            fold_constants, fuse_elementwise)  # fmt: skip


def optimize(outputs: Graph, passes=PIPELINE) -> Graph:
    """Apply ``passes`` in order (default: CSE, merge matmuls, accumulate products, fold
    constants, fuse); ``passes`` is a sequence of functions ``outputs -> new outputs``."""
    rewrites = tuple(passes) if isinstance(passes, Iterable) else (passes,)
    if callable(passes) or not all(map(callable, rewrites)):
        raise GraphError(
            "optimize: passes must be a sequence of functions (outputs -> new outputs), such "
            f"as [passes.fuse_elementwise], got {passes!r}"
        )
    for rewrite in rewrites:
        outputs = rewrite(outputs)
    return outputs


__all__ = [
    "PIPELINE",
    "Fused",
    "accumulate_products",
    "eliminate_common_subexpressions",
    "find_regions",
    "fold_constants",
    "fuse_elementwise",
    "merge_matmuls",
    "optimize",
]
