"""Where a model's FLOPs go: the ops of a graph grouped into families (the lecture's "compute
components": attention and MLP products are slow, norms, residuals and nonlinearities fast)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import backend
from ..graph import Node, interpret
from ..perf import median_seconds
from .flops import count_flops

#: Family -> op names (``Op.name``) in it; ops of no family count as ``"other"``.
OP_FAMILIES: dict[str, tuple[str, ...]] = {
    "products (matmul, head_scores, head_mix)": ("matmul", "head_scores", "head_mix", "head_mix_t"),
    "attention softmax": ("causal_softmax",),
    "norms (rms_norm)": ("rms_norm",),
    "residual adds": ("add",),
    "nonlinearity and gate (silu, mul)": ("silu", "relu", "mul"),
    "positions (rope)": ("rope",),
    "cross-entropy": ("cross_entropy",),
}  # fmt: skip


def _family_totals(families: Mapping[str, Sequence[str]]) -> tuple[dict, dict]:
    family_of = {op: family for family, ops in families.items() for op in ops}
    return family_of, {**dict.fromkeys(families, 0), "other": 0}


def _without_empty_other(totals: dict) -> dict:
    if not totals["other"]:
        del totals["other"]
    return totals


def flops_by_family(
    outputs: Node | Sequence[Node], families: Mapping[str, Sequence[str]] = OP_FAMILIES
) -> dict[str, int]:
    """The FLOPs of the graph (:func:`~course_lib.models.flops.count_flops`), summed per family.

    Families keep the order of ``families``; ops of none go to ``"other"`` (last, only if
    non-zero). Views and other free ops add 0.
    """
    family_of, totals = _family_totals(families)
    for op_name, flops in count_flops(outputs).by_op.items():
        totals[family_of.get(op_name, "other")] += flops
    return _without_empty_other(totals)


def seconds_by_family(
    outputs: Node | Sequence[Node],
    feed: Mapping[Node, object],
    families: Mapping[str, Sequence[str]] = OP_FAMILIES,
    repeats: int = 5,
) -> dict[str, float]:
    """Measured seconds per family: each op timed on its own (median of ``repeats`` runs,
    its inputs computed beforehand), summed per family like :func:`flops_by_family`.
    Ops are pure, so timing one several times changes nothing (update nodes included).
    """
    family_of, totals = _family_totals(families)
    xp = backend.xp()
    values = interpret(outputs, {v: xp.asarray(a) for v, a in feed.items()}, xp)
    for node in values:
        if node.inputs:  # an op (variables and constants take no time)
            args = [values[i] for i in node.inputs]
            seconds = median_seconds(lambda n=node, a=args: n.op.compute(xp, *a), repeats)
            totals[family_of.get(node.op.name, "other")] += seconds
    return _without_empty_other(totals)


def shares_table(totals: Mapping[str, float], unit: str = "FLOPs", digits: int = 0) -> str:
    """One line per family: its amount (``digits`` decimals) and its share of the sum."""
    whole = sum(totals.values())
    width = max(len(name) for name in totals)
    lines = [f"{'family':{width}s} {unit:>12s}  share"]
    for name, amount in totals.items():
        share = amount / whole if whole else 0.0
        lines.append(f"{name:{width}s} {amount:12,.{digits}f} {share:6.1%}")
    return "\n".join(lines)
