"""Automatic discovery in miniature: benchmark candidate fusions and keep the fastest.

Rules (``fuse_elementwise``) fuse every region; a search instead *measures* each choice —
every subset of the regions the rule would fuse — on the reader's machine, as TVM-style
auto-schedulers and ``torch.compile``'s autotuning do on a much larger space.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from ..graph import Node, node_list
from ..passes import find_regions, fuse_elementwise
from ..runtime import Executor
from .timing import interleaved_medians

MAX_REGIONS = 4  # 2**4 candidates: enough to see the idea, quick to measure


@dataclass(frozen=True)
class Candidate:
    """One way to fuse the graph: which regions (named by their roots), and its time."""

    fused: tuple[str, ...]
    outputs: list
    seconds: float


def search_fusions(outputs: Node | list[Node], feed: Mapping, repeats: int = 5) -> list[Candidate]:
    """Time every subset of the graph's fusion regions; fastest first.

    At most :data:`MAX_REGIONS` regions are searched (the first ones in graph order). The
    candidates run, and are timed (the GPU synchronised), on the current device: pin the CPU
    with ``course_lib.use_device("cpu")`` to search for the CPU. As in ``measure_graph``,
    ``feed`` may hold variables the outputs do not use.
    """
    outs = node_list(outputs, "search_fusions")
    roots = list(find_regions(outs))[:MAX_REGIONS]
    subsets = [combo for k in range(len(roots) + 1) for combo in itertools.combinations(roots, k)]
    graphs = {
        combo: fuse_elementwise(outs, select=lambda r, chosen=set(combo): r in chosen)
        for combo in subsets
    }
    runners = {combo: Executor(g) for combo, g in graphs.items()}
    times = interleaved_medians(
        {combo: (lambda r=run: r.run(feed, allow_unused=True)) for combo, run in runners.items()},
        repeats=repeats,
    )
    found = [
        Candidate(tuple(r.name for r in combo), graphs[combo], times[combo]) for combo in subsets
    ]
    return sorted(found, key=lambda c: c.seconds)
