"""Reductions (sum, mean, max, logsumexp) and their adjoint, ``unreduce``."""

from __future__ import annotations

import builtins
import math

from .. import params
from ..graph import Node, Op, apply
from .axes import as_array, normalize_axes, reduced
from .elementwise import div, equal, exp, mul, ones_like, sub, where, zeros_like


class Reduce(Op):
    """A reduction over ``axis`` (None: all axes), optionally keeping reduced dims.

    Costs ``flops_per_element`` per *input* element. The input may be a number (a scalar
    constant): each ``compute`` takes it :func:`as_array`.
    """

    attributes = ("axis", "keepdims")
    flops_per_element = 1

    def __init__(self, axis=None, keepdims=False):
        super().__init__(
            axis=params.axis(axis, f"{self.name}: axis"),
            keepdims=params.flag(keepdims, f"{self.name}: keepdims"),
        )

    def infer_shape(self, shape):
        return reduced(shape, self.axis, self.keepdims)

    def flops(self, out_shape, in_shape):
        return self.flops_per_element * math.prod(in_shape)


class Sum(Reduce):
    name = "sum"
    linear = True

    def compute(self, xp, x):
        return xp.sum(as_array(xp, x), axis=self.axis, keepdims=self.keepdims)

    def gradient(self, node, g, needs):
        return [unreduce(g, node.inputs[0], self.axis, self.keepdims)]


class Mean(Reduce):
    name = "mean"
    linear = True

    def compute(self, xp, x):
        return xp.mean(as_array(xp, x), axis=self.axis, keepdims=self.keepdims)

    def gradient(self, node, g, needs):
        return [unreduce(g, node.inputs[0], self.axis, self.keepdims, mean=True)]


class Max(Reduce):
    """Maximum; the gradient is shared equally between tied maxima."""

    name = "max"

    def infer_shape(self, shape):
        if shape is not None and any(shape[a] == 0 for a in normalize_axes(self.axis, len(shape))):
            raise ValueError(f"no maximum over an axis of size 0 (shape {shape}, axis {self.axis})")
        return super().infer_shape(shape)

    def compute(self, xp, x):
        return xp.max(as_array(xp, x), axis=self.axis, keepdims=self.keepdims)

    def _weights(self, node):
        # the positions equal to the maximum share the gradient; where the maximum is NaN,
        # the NaN positions do (PyTorch's convention: max of [3, nan, 1] -> [0, 1, 0]); the
        # weights in x's dtype (a boolean mask over its count would be float64)
        x = node.inputs[0]
        m = unreduce(node, x, self.axis, self.keepdims)
        tied = where(equal(m, m), equal(x, m), equal(equal(x, x), False))
        mask = where(tied, ones_like(x), zeros_like(x))
        count = unreduce(sum(mask, self.axis, keepdims=True), x, self.axis, keepdims=True)
        return div(mask, count)

    def gradient(self, node, g, needs):
        x = node.inputs[0]
        return [mul(unreduce(g, x, self.axis, self.keepdims), self._weights(node))]

    def jvp(self, node, dx):
        return None if dx is None else sum(mul(dx, self._weights(node)), self.axis, self.keepdims)


def floating(xp, x):
    """``x`` in the float dtype NumPy's ``exp`` gives it (float16 for bool and int8, float64
    for int64): ``x − max`` on integers would wrap (uint8: ``0 − 254`` is 2)."""
    return x if x.dtype.kind == "f" else x.astype(xp.result_type(x.dtype, xp.float16))


def stable_log_sum_exp(xp, x, axis):
    """The stable log-sum-exp along ``axis``, written once for logsumexp, log_softmax and
    cross_entropy: ``(m, x − m, log Σ exp(x − m))`` with the axis kept, m the maximum along it
    (0 where that is ±inf or NaN). No exp overflows and a finite row's sum is at least 1:
    ``logsumexp(x) = m + log Σ exp(x − m)``, ``log_softmax(x) = (x − m) − log Σ exp(x − m)``.
    Integer and boolean ``x`` are taken as floats first (:func:`floating`). Over an empty
    axis the sum has no terms: its log is −inf (PyTorch's logsumexp), not NumPy's error.
    """
    x = floating(xp, x)
    if any(x.shape[a] == 0 for a in normalize_axes(axis, x.ndim)):  # no maximum to take
        m = xp.zeros(reduced(x.shape, axis, keepdims=True), x.dtype)
        return m, x - m, m - xp.inf
    m = xp.max(x, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    shifted = x - m
    return m, shifted, xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


class LogSumExp(Reduce):
    """``log(sum(exp(x)))`` computed stably (the maximum is subtracted first).

    FLOPs per input element: the max, the subtraction, the exp and the sum (the log is per
    row and not counted).
    """

    name, flops_per_element = "logsumexp", 4

    def compute(self, xp, x):
        x = as_array(xp, x)
        m, _, log_sum = stable_log_sum_exp(xp, x, self.axis)
        out = log_sum + m
        if not self.keepdims:
            out = out.squeeze(axis=normalize_axes(self.axis, x.ndim))
        return out

    def _softmax(self, node):
        x = node.inputs[0]
        return exp(sub(x, unreduce(node, x, self.axis, self.keepdims)))

    def gradient(self, node, g, needs):
        x = node.inputs[0]
        return [mul(unreduce(g, x, self.axis, self.keepdims), self._softmax(node))]

    def jvp(self, node, dx):
        return None if dx is None else sum(mul(dx, self._softmax(node)), self.axis, self.keepdims)


class Unreduce(Op):
    """Broadcast a reduced array ``g`` back to the shape of ``like`` (the reduction's adjoint).

    With ``mean=True`` it also divides by the number of reduced elements. ``g`` may be a
    number (a number seed of ``grad``), ``like`` a scalar constant's number.
    """

    name = "unreduce"
    attributes = ("axis", "keepdims", "mean")
    linear = True

    def __init__(self, axis=None, keepdims=False, mean=False):
        super().__init__(axis=axis, keepdims=keepdims, mean=mean)

    def infer_shape(self, g_shape, like_shape):
        return like_shape

    def infer_dtype(self, g_dtype, like_dtype):
        return g_dtype

    def compute(self, xp, g, like):
        g, like = as_array(xp, g), as_array(xp, like)
        ndim = like.ndim
        axes = normalize_axes(self.axis, ndim)
        if not self.keepdims and self.axis is not None:
            g = xp.expand_dims(g, axes)
        elif not self.keepdims:
            g = xp.reshape(g, (1,) * ndim)
        if self.mean:
            g = g / builtins.max(1, math.prod(like.shape[a] for a in axes))
        return xp.broadcast_to(g, like.shape)

    def accesses(self, out_shape, g_shape, like_shape):
        """Reads g (``like`` lends only its shape) and writes the broadcast result."""
        return (math.prod(g_shape), 0), math.prod(out_shape)

    def gradient(self, node, g, needs):
        reduce = mean if self.mean else sum
        return [reduce(g, self.axis, self.keepdims), None]


# -- public functions -----------------------------------------------------------------------
def sum(x, axis=None, keepdims=False) -> Node:  # noqa: A001  (mirrors numpy.sum)
    """Sum over ``axis`` (all axes when None)."""
    return apply(Sum(axis, keepdims), x)


def mean(x, axis=None, keepdims=False) -> Node:
    """Mean over ``axis`` (all axes when None)."""
    return apply(Mean(axis, keepdims), x)


def max(x, axis=None, keepdims=False) -> Node:  # noqa: A001  (mirrors numpy.max)
    """Maximum over ``axis`` (all axes when None)."""
    return apply(Max(axis, keepdims), x)


def logsumexp(x, axis=None, keepdims=False) -> Node:
    """Stable ``log(sum(exp(x), axis))``."""
    return apply(LogSumExp(axis, keepdims), x)


def unreduce(g, like, axis=None, keepdims=False, mean=False) -> Node:
    """Broadcast the reduced ``g`` back to the shape of ``like``."""
    if keepdims and g.shape is not None and g.shape == like.shape and not mean:
        return g
    return apply(Unreduce(axis, keepdims, mean), g, like)
