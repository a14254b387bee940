"""Control flow inside the graph: Switch and Merge with dead-tensor semantics, and ``cond``.

``switch(data, pred, branch)`` passes ``data`` on when ``pred == branch`` and otherwise
outputs DEAD. Every op that receives a DEAD input is skipped by the executor and outputs
DEAD, so an untaken branch computes nothing. ``merge(if_false, if_true, pred)`` outputs the
live one. ``cond`` wires a branch pair between a Switch and a Merge (TensorFlow 1's design).
"""

from __future__ import annotations

import numpy as np

from ..backend import to_numpy
from ..errors import GraphError, ShapeError
from ..graph import Node, Op, apply, as_node, creation_mark, is_static, rebuild, topological_order
from .axes import as_array
from .elementwise import cast, zeros_like


class Dead:
    """The value of a tensor on an untaken branch."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEAD"


DEAD = Dead()


def _truth(pred) -> bool:
    value = to_numpy(pred)  # the branch is chosen on the host (on a GPU: a synchronisation)
    if value.size != 1:
        raise ShapeError(f"cond: the predicate must be a single value, got shape {value.shape}")
    return bool(value.reshape(()))


class Switch(Op):
    """``data`` if ``bool(pred) == branch``, else DEAD."""

    name = "switch"
    attributes = ("branch",)
    linear = True  # in data

    def written(self, args):
        return f"switch({', '.join(args)}) → {'true' if self.branch else 'false'}"

    def __init__(self, branch: bool):
        super().__init__(branch=bool(branch))

    def label(self) -> str:
        return f"switch({'true' if self.branch else 'false'})"

    def infer_shape(self, data, pred):
        if is_static(pred) and int(np.prod(pred)) != 1:
            raise ValueError(f"the predicate must be a single value, got shape {pred}")
        return data

    def infer_dtype(self, data, pred):
        return data

    def compute(self, xp, data, pred):
        return data if _truth(pred) == self.branch else DEAD

    def gradient(self, node, g, needs):
        return [apply(Revive(), g, node.inputs[0]), None]


class Merge(Op):
    """The live one of ``if_false`` and ``if_true`` (chosen by ``pred``)."""

    name = "merge"
    accepts_dead = True

    def infer_shape(self, if_false, if_true, pred):
        if if_false is None or if_true is None:  # either branch may give any shape
            return None
        if len(if_false) != len(if_true) or any(
            f is not None and t is not None and f != t for f, t in zip(if_false, if_true)
        ):
            raise ValueError(f"both branches must have one shape, got {if_false} and {if_true}")
        return tuple(f if f == t else None for f, t in zip(if_false, if_true))

    def infer_dtype(self, if_false, if_true, pred):
        return Op.infer_dtype(self, if_false, if_true)

    def compute(self, xp, if_false, if_true, pred):
        if pred is DEAD:
            return DEAD
        return if_true if _truth(pred) else if_false

    def gradient(self, node, g, needs):
        pred = node.inputs[2]
        return [switch(g, pred, False), switch(g, pred, True), None]

    def jvp(self, node, dfalse, dtrue, dpred):
        if dfalse is None and dtrue is None:
            return None
        if_false, if_true, pred = node.inputs
        dfalse = zeros_like(if_false) if dfalse is None else dfalse
        dtrue = zeros_like(if_true) if dtrue is None else dtrue
        return apply(self, dfalse, dtrue, pred)


class Revive(Op):
    """The adjoint leaving a branch at its Switch: ``g``, or zeros when the branch was not taken;
    either way in the dtype of the Switch's data (a float64 constant in a branch of float32
    data promotes ``g``), so the dtype does not depend on the branch taken."""

    name = "revive"
    accepts_dead = True
    linear = True  # in g

    def infer_shape(self, g, like):
        return like

    def infer_dtype(self, g, like):
        return like

    def compute(self, xp, g, like):
        if like is DEAD:
            return DEAD
        like = as_array(xp, like)  # a scalar constant's number
        return xp.zeros_like(like) if g is DEAD else xp.asarray(g, dtype=like.dtype)

    def gradient(self, node, gg, needs):
        raise GraphError("second derivatives through cond are not supported; differentiate once")


def switch(data, pred, branch: bool) -> Node:
    """``data`` on the ``branch`` side of a Switch controlled by ``pred``."""
    return apply(Switch(branch), data, pred)


def merge(if_false, if_true, pred) -> Node:
    """Join the two sides of a Switch."""
    return apply(Merge(), if_false, if_true, pred)


def cond(pred, true_fn, false_fn, *operands):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``, inside the graph.

    Only the taken branch is computed when the graph runs. The branches may also use nodes
    they capture from the enclosing code (``cond(x < y, lambda: x + z, lambda: y ** 2)``):
    every value entering a branch passes through a Switch. Each branch returns a node, or a
    tuple (or list) of as many nodes as the other (``cond`` then returns a tuple); the two
    results of one position must have one shape (an axis unknown in either is unknown in
    the result). Where both their dtypes are known and differ, both are cast to NumPy's
    promotion of the two, whichever branch runs; a dtype unknown when the graph is built
    (``x * 2.0``'s: a Python number is weakly typed) is the taken branch's. A predicate
    known when ``cond`` is called (an eager Tensor, a Python or NumPy bool, a constant)
    calls only the taken function and returns what it returns.
    """
    pred = as_node(pred)
    if pred.is_eager or pred.is_constant:
        value = pred.data if pred.is_eager else pred.op.value
        return true_fn(*operands) if _truth(value) else false_fn(*operands)
    if is_static(pred.shape) and int(np.prod(pred.shape)) != 1:
        raise ShapeError(
            f"cond: the predicate {pred.name} must be a single value, not {pred.shape}"
        )
    if_false, many_false = _branch(pred, False, false_fn, operands)
    if_true, many_true = _branch(pred, True, true_fn, operands)
    if many_false != many_true or len(if_false) != len(if_true):
        raise GraphError(
            f"cond: true_fn returned {_count(if_true, many_true)} and false_fn "
            f"{_count(if_false, many_false)}; both branches must return as many"
        )
    merged = [merge(*_one_dtype(f, t), pred) for f, t in zip(if_false, if_true)]
    return tuple(merged) if many_true else merged[0]


def _one_dtype(if_false: Node, if_true: Node) -> tuple[Node, Node]:
    """The two results cast to NumPy's promotion of their dtypes where both are known and
    differ, so that the merged value has its static dtype whichever branch runs."""
    if if_false.dtype is None or if_true.dtype is None or if_false.dtype == if_true.dtype:
        return if_false, if_true
    dtype = np.result_type(if_false.dtype, if_true.dtype)
    return tuple(n if n.dtype == dtype else cast(n, dtype) for n in (if_false, if_true))


def _branch(pred: Node, taken: bool, fn, operands) -> tuple[list[Node], bool]:
    """The results of ``fn`` on the ``taken`` side of Switches, and whether ``fn`` returned
    a tuple or list (rather than one node)."""
    gated = [switch(o, pred, taken) for o in operands]
    mark = creation_mark()
    result = fn(*gated)
    many = isinstance(result, (tuple, list))
    try:
        outs = [as_node(r) for r in (result if many else [result])]
    except GraphError as exc:
        raise GraphError(
            f"cond: {'true_fn' if taken else 'false_fn'} must return a node or a tuple of "
            f"nodes, got {result!r:.80}: {exc}"
        ) from None
    new = [o for o in outs if o.seq > mark]  # built by the branch, not existing values
    built = [n for n in topological_order(new) if n.seq > mark]
    outside = {i for n in built for i in n.inputs if i.seq < mark and not i.is_constant}
    outside -= set(gated)
    outside |= _loose_constants(built, outside | set(gated))
    if outside:
        replace = {n: switch(n, pred, taken) for n in sorted(outside, key=lambda n: n.seq)}
        rebuilt = dict(zip(new, rebuild(new, replace)))
    else:
        rebuilt = {}
    # an existing value returned (an operand's Switch aside) gets a Switch of its own
    outs = [o if o.seq > mark or o in gated else switch(o, pred, taken) for o in outs]
    return [rebuilt.get(o, o) for o in outs], many


def _count(outs: list[Node], many: bool) -> str:
    return f"{len(outs)} node(s)" if many else "one node"


def _loose_constants(built: list[Node], gated: set[Node]) -> set[Node]:
    """The constants feeding the branch's nodes that no gated value reaches (a part computed
    from constants only): gated too, so that an untaken branch computes none of it."""
    reached: set[Node] = set()
    for n in built:  # in topological order
        if any(i in gated or i in reached for i in n.inputs):
            reached.add(n)
    return {i for n in built if n.inputs and n not in reached for i in n.inputs if i.is_constant}
