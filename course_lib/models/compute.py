"""Where a model's FLOPs go: the ops of a graph grouped into families (the lecture's "compute
components": attention and MLP products are slow, norms, residuals and nonlinearities fast).

Each op says which family it belongs to (``Op.family``: ``MatMul.family == "products"``);
:data:`FAMILIES` lists the families in the order the tables show them, with their titles.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from .. import backend
from ..errors import ParameterError
from ..graph import Node, Op, interpret
from ..perf import flops_by_node, median_seconds

#: Family (``Op.family``) -> its title, in table order; ops of no family count as ``"other"``.
FAMILIES = {
    "products": "products (matmul, head_scores, head_mix)",
    "attention softmax": "attention softmax",
    "norms": "norms (rms_norm)",
    "residual adds": "residual adds",
    "nonlinearity and gate": "nonlinearity and gate (silu, mul)",
    "positions": "positions (rope)",
    "cross-entropy": "cross-entropy",
}

Families = Mapping[str, Sequence[str]]  # title -> the op names (``Op.name``) in it


def _family_totals(families: Families | None) -> tuple[Callable[[Op], str], dict]:
    """Which total an op adds to, and the totals (0, in table order, ``"other"`` last)."""
    if families is None:
        titles, family_of = FAMILIES.values(), lambda op: FAMILIES.get(op.family, "other")
    else:
        by_name = {}
        for title, names in families.items():
            if isinstance(names, str):  # ("add") for ("add",): grouped 'a' and 'd', no op
                raise ParameterError(f"family {title!r}: give a tuple of op names, got {names!r}")
            for name in names:
                if by_name.setdefault(name, title) != title:
                    raise ParameterError(
                        f"op {name!r} is in two families, {by_name[name]!r} and {title!r}"
                    )
        titles, family_of = families, lambda op: by_name.get(op.name, "other")
    return family_of, {**dict.fromkeys(titles, 0), "other": 0}


def _without_empty_other(totals: dict) -> dict:
    if not totals["other"]:
        del totals["other"]
    return totals


def flops_by_family(
    outputs: Node | Sequence[Node], families: Families | None = None
) -> dict[str, int]:
    """The FLOPs of the graph (:func:`~course_lib.perf.flops_by_node`), summed per family.

    By default the families are those the ops declare (``Op.family``), titled and ordered as in
    :data:`FAMILIES`; ``families`` (title -> op names) groups by op name instead, in its order.
    Ops of no family go to ``"other"`` (last, only if non-zero). Views and other free ops add 0.
    """
    family_of, totals = _family_totals(families)
    for node, flops in flops_by_node(outputs).items():
        totals[family_of(node.op)] += flops
    return _without_empty_other(totals)


def seconds_by_family(
    outputs: Node | Sequence[Node],
    feed: Mapping[Node, object],
    families: Families | None = None,
    repeats: int = 5,
) -> dict[str, float]:
    """Measured seconds per family: each op timed on its own (median of ``repeats`` runs,
    its inputs computed beforehand), summed per family like :func:`flops_by_family`.
    Ops are pure, so timing one several times changes nothing (update nodes included).
    Host arrays in ``feed`` are copied to the current device first; on a GPU each timing
    waits for the op's kernels to finish (``perf``'s timers synchronise the device).
    """
    family_of, totals = _family_totals(families)
    xp = backend.xp()
    arrays = {v: backend.to_device(a, f"the feed of {getattr(v, 'name', v)}")
              for v, a in feed.items()}  # fmt: skip
    values = interpret(outputs, arrays, xp)
    for node in values:
        if node.inputs:  # an op (variables and constants take no time)
            args = [values[i] for i in node.inputs]
            run = functools.partial(node.op.compute, xp, *args)
            totals[family_of(node.op)] += median_seconds(run, repeats)
    return _without_empty_other(totals)


def seconds_by_family_in_runs(
    executor, feed: Mapping, families: Families | None = None, runs: int = 3
) -> tuple[dict[str, float], float]:
    """Measured seconds per family, each op timed inside real runs of ``executor``
    (:meth:`~course_lib.runtime.Executor.seconds_by_node`), grouped as in
    :func:`seconds_by_family`; and the executor's own seconds (the run less its ops)."""
    family_of, totals = _family_totals(families)
    by_node, whole = executor.seconds_by_node(feed, runs)
    for node, seconds in by_node.items():
        totals[family_of(node.op)] += seconds
    return _without_empty_other(totals), max(whole - sum(by_node.values()), 0.0)


def shares_table(totals: Mapping[str, float], unit: str = "FLOPs", digits: int = 0) -> str:
    """One line per family: its amount (``digits`` decimals) and its share of the sum."""
    whole = sum(totals.values())
    width = max([len("family"), *map(len, totals)])  # the header's column, even with no rows
    lines = [f"{'family':{width}s} {unit:>12s}  share"]
    for name, amount in totals.items():
        share = amount / whole if whole else 0.0
        lines.append(f"{name:{width}s} {amount:12,.{digits}f} {share:6.1%}")
    return "\n".join(lines)
