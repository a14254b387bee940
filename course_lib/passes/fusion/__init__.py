"""Elementwise fusion: a tree of elementwise ops becomes one node that runs as one kernel.

- :mod:`.regions`: which ops fuse (maximal trees, each value used once) and the rewrite,
  :func:`fuse_elementwise`;
- :mod:`.op`: :class:`Fused`, the op a region becomes (its body, cost, derivatives, and
  where it runs);
- :mod:`.codegen`: the body written as code: a numexpr expression, a CUDA C kernel
  (:class:`course_lib.kernels.FusedElementwise`) and the same expression as a C++ loop;
- :mod:`.cpu_loop`: that C++ loop compiled for this CPU and run on NumPy arrays.
"""

from __future__ import annotations

from .op import Fused
from .regions import find_regions, fuse_elementwise

__all__ = ["Fused", "find_regions", "fuse_elementwise"]
