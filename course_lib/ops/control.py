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
from .elementwise import zeros_like


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
        if if_false is not None and if_true is not None and if_false != if_true:
            raise ValueError(f"both branches must have one shape, got {if_false} and {if_true}")
        return if_true if if_true is not None else if_false

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
    """The adjoint leaving a branch at its Switch: ``g``, or zeros when the branch was not taken."""

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
        return xp.zeros_like(like) if g is DEAD else g

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
    every value entering a branch passes through a Switch. With eager Tensors the predicate
    is known, so only the taken function is called.
    """
    pred = as_node(pred)
    if pred.is_eager:
        return true_fn(*operands) if _truth(pred.data) else false_fn(*operands)
    if is_static(pred.shape) and int(np.prod(pred.shape)) != 1:
        raise ShapeError(
            f"cond: the predicate {pred.name} must be a single value, not {pred.shape}"
        )
    if_false = _branch(pred, False, false_fn, operands)
    if_true = _branch(pred, True, true_fn, operands)
    return merge(if_false, if_true, pred)


def _branch(pred: Node, taken: bool, fn, operands) -> Node:
    gated = [switch(o, pred, taken) for o in operands]
    mark = creation_mark()
    out = as_node(fn(*gated))
    if out.seq < mark:  # the branch returned an existing value
        return out if out in gated else switch(out, pred, taken)
    built = [n for n in topological_order([out]) if n.seq > mark]
    outside = {i for n in built for i in n.inputs if i.seq < mark and not i.is_constant}
    outside -= set(gated)
    outside |= _loose_constants(built, outside | set(gated))
    if not outside:
        return out
    return rebuild(
        [out], {n: switch(n, pred, taken) for n in sorted(outside, key=lambda n: n.seq)}
    )[0]


def _loose_constants(built: list[Node], gated: set[Node]) -> set[Node]:
    """The constants feeding the branch's nodes that no gated value reaches (a part computed
    from constants only): gated too, so that an untaken branch computes none of it."""
    reached: set[Node] = set()
    for n in built:  # in topological order
        if any(i in gated or i in reached for i in n.inputs):
            reached.add(n)
    return {i for n in built if n.inputs and n not in reached for i in n.inputs if i.is_constant}
