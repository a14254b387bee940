"""Neural-network composites: softmax, log-softmax and cross-entropy (all stable).

FLOP conventions, one per op: softmax costs 3 per element as the lecture counts it (the
subtraction, the exp and the division; the row max and sum are not counted), the FLOP
table's ``softmax_per_score``. The log-sum-exp family counts every pass over the row:
logsumexp 4 per element (max, subtraction, exp, sum), log-softmax one more (subtracting the
log-sum), cross-entropy one more again (picking the target's entry and the mean).
"""

from __future__ import annotations

import math

from .. import params
from ..backend import on_host
from ..graph import Node, Op, apply
from ..kernels import cpu_kernels
from ..kernels.dispatch import run_on_gpu
from .axes import as_array, normalize_axes
from .elementwise import div, exp, mul, sub
from .reductions import LogSumExp, floating, stable_log_sum_exp, sum


def _check_targets(logits, targets):
    """Targets of the logits' shape without its last axis (an axis unknown in either fits).
    NumPy would broadcast others, and the gradient, divided by the targets' count, would
    not be the mean's."""
    if logits is None or targets is None:
        return
    rows = tuple(logits[:-1])
    if len(rows) != len(targets) or any(
        r is not None and t is not None and r != t for r, t in zip(rows, targets)
    ):
        raise ValueError(
            f"targets {tuple(targets)} must be the logits' shape {tuple(logits)} without its "
            "last axis"
        )


class _AlongAxis(Op):
    """An op over one axis of its input, of the same shape (softmax, log-softmax)."""

    attributes = ("axis",)

    def __init__(self, axis=-1):
        super().__init__(axis=params.integer(axis, f"{self.name}: axis"))

    def infer_shape(self, shape):
        if shape is not None:
            normalize_axes(self.axis, len(shape))  # raises if the axis does not exist
        return shape


class Softmax(_AlongAxis):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""

    name, flops_per_element = "softmax", 3

    def gpu_kernel(self, launch, x):
        """``softmax.cu``: one block per row, so only along the last axis."""
        return launch.softmax(x) if x.ndim >= 1 and self.axis in (-1, x.ndim - 1) else None

    def compute(self, xp, x):
        if x.shape[self.axis] == 0:  # rows of no elements: nothing to normalise (nor a max)
            return xp.empty(x.shape, floating(xp, x).dtype)
        out = run_on_gpu(self, xp, x)  # softmax.cu on a GPU
        if out is not None:
            return out
        if on_host(xp) and self.axis in (-1, x.ndim - 1) and cpu_kernels.worth_it(x):
            return cpu_kernels.softmax(x)  # one pass over each row, rows over the threads
        x = floating(xp, x)  # integers: x − max would wrap
        e = xp.exp(x - xp.max(x, axis=self.axis, keepdims=True))
        return e / xp.sum(e, axis=self.axis, keepdims=True)

    def gradient(self, node, g, needs):
        return [mul(node, sub(g, sum(mul(g, node), self.axis, keepdims=True)))]

    def jvp(self, node, dx):
        if dx is None:
            return None
        return mul(node, sub(dx, sum(mul(dx, node), self.axis, keepdims=True)))


class LogSoftmax(_AlongAxis):
    """``x - logsumexp(x)`` along ``axis``."""

    name, flops_per_element = "log_softmax", LogSumExp.flops_per_element + 1

    def compute(self, xp, x):
        _, shifted, log_sum = stable_log_sum_exp(xp, x, self.axis)
        return shifted - log_sum

    def gradient(self, node, g, needs):
        return [sub(g, mul(exp(node), sum(g, self.axis, keepdims=True)))]

    def jvp(self, node, dx):
        if dx is None:
            return None
        return sub(dx, sum(mul(exp(node), dx), self.axis, keepdims=True))


class CrossEntropy(Op):
    """Mean over positions of ``-log softmax(logits)[target]``; targets are integers."""

    name, flops_per_element = "cross_entropy", LogSoftmax.flops_per_element + 1  # per logit
    family = "cross-entropy"

    def infer_shape(self, logits, targets):
        _check_targets(logits, targets)
        return ()

    def infer_dtype(self, logits_dtype, targets_dtype):
        if targets_dtype is not None and targets_dtype.kind not in "iu":
            raise ValueError(
                f"cross_entropy needs integer class targets, got dtype {targets_dtype}"
            )
        return logits_dtype

    def compute(self, xp, logits, targets):
        targets = as_array(xp, targets)  # one position's target may be a number
        _check_targets(logits.shape, targets.shape)  # shapes unknown when built
        params.check_ids(targets, logits.shape[-1], f"there are {logits.shape[-1]} classes")
        if on_host(xp) and cpu_kernels.worth_it(logits):  # rows over the threads
            return -xp.mean(cpu_kernels.cross_entropy(logits, targets))
        _, shifted, log_sum = stable_log_sum_exp(xp, logits, -1)
        log_probs = shifted - log_sum
        picked = xp.take_along_axis(log_probs, targets[..., None], axis=-1)
        return -xp.mean(picked)

    def _direction(self, node):
        logits, targets = node.inputs
        probs = apply(Softmax(-1), logits)
        return div(sub(probs, apply(OneHotLike(), targets, logits)), apply(Count(), targets))

    def gradient(self, node, g, needs):
        return [mul(g, self._direction(node)), None]

    def jvp(self, node, dlogits, dtargets):
        return None if dlogits is None else sum(mul(dlogits, self._direction(node)))

    def flops(self, out_shape, logits_shape, targets_shape):
        return self.flops_per_element * math.prod(logits_shape)


class OneHotLike(Op):
    """One-hot rows of ``targets`` with as many classes as ``logits`` has (its dtype too)."""

    name = "one_hot"

    def infer_shape(self, targets, logits):
        _check_targets(logits, targets)
        return logits

    def infer_dtype(self, targets_dtype, logits_dtype):
        return logits_dtype

    def compute(self, xp, targets, logits):
        targets = as_array(xp, targets)  # one position's target may be a number
        _check_targets(logits.shape, targets.shape)
        params.check_ids(targets, logits.shape[-1], f"there are {logits.shape[-1]} classes")
        return (targets[..., None] == xp.arange(logits.shape[-1])).astype(logits.dtype)

    def gradient(self, node, g, needs):
        return [None, None]

    def jvp(self, node, *tangents):
        return None


class Count(Op):
    """The number of elements of the input, as a float."""

    name = "count"

    def infer_shape(self, shape):
        return ()

    def infer_dtype(self, dtype):
        return None

    def compute(self, xp, x):
        return float(as_array(xp, x).size)  # x may be a number

    def gradient(self, node, g, needs):
        return [None]

    def jvp(self, node, dx):
        return None


def softmax(x, axis=-1) -> Node:
    """Stable softmax along ``axis``."""
    return apply(Softmax(axis), x)


def log_softmax(x, axis=-1) -> Node:
    """Stable log-softmax along ``axis``."""
    return apply(LogSoftmax(axis), x)


def cross_entropy(logits, targets) -> Node:
    """Mean cross-entropy of ``logits`` (..., classes) against integer ``targets`` (...).

    The targets' shape must be exactly the logits' without its last axis (checked when
    built, and when run for axes unknown then: a :class:`ShapeError`), not one NumPy would
    broadcast to it; each id must lie in ``[0, classes)`` (:class:`OutOfRangeError`).
    """
    return apply(CrossEntropy(), logits, targets)
