"""Reductions (sum, mean, max, logsumexp) and the un-broadcasting ``sum_to``."""

from __future__ import annotations

import builtins
import math

from .. import params
from ..errors import GraphError
from ..graph import Node, Op, apply
from . import _shapes
from .elementwise import div, equal, exp, mul, sub


class Reduce(Op):
    """A reduction over ``axis`` (None: all axes), optionally keeping reduced dims."""

    def __init__(self, axis=None, keepdims=False):
        axis = params.axis(axis, f"{self.name}: axis")
        keepdims = params.flag(keepdims, f"{self.name}: keepdims")
        super().__init__(axis=axis, keepdims=keepdims)
        self.axis, self.keepdims = axis, keepdims

    def infer_shape(self, shape):
        return _shapes.reduced(shape, self.axis, self.keepdims)

    def flops(self, out_shape, in_shape):
        return math.prod(in_shape)


class Sum(Reduce):
    name = "sum"

    def compute(self, xp, x):
        return xp.sum(x, axis=self.axis, keepdims=self.keepdims)

    def gradient(self, node, g, needs):
        return [unreduce(g, node.inputs[0], self.axis, self.keepdims)]

    def jvp(self, node, dx):
        return None if dx is None else sum(dx, self.axis, self.keepdims)


class Mean(Reduce):
    name = "mean"

    def compute(self, xp, x):
        return xp.mean(x, axis=self.axis, keepdims=self.keepdims)

    def gradient(self, node, g, needs):
        return [unreduce(g, node.inputs[0], self.axis, self.keepdims, mean=True)]

    def jvp(self, node, dx):
        return None if dx is None else mean(dx, self.axis, self.keepdims)


class Max(Reduce):
    """Maximum; the gradient is shared equally between tied maxima."""

    name = "max"

    def compute(self, xp, x):
        return xp.max(x, axis=self.axis, keepdims=self.keepdims)

    def _weights(self, node):
        x = node.inputs[0]
        mask = equal(x, unreduce(node, x, self.axis, self.keepdims))
        count = unreduce(sum(mask, self.axis, keepdims=True), x, self.axis, keepdims=True)
        return div(mask, count)

    def gradient(self, node, g, needs):
        x = node.inputs[0]
        return [mul(unreduce(g, x, self.axis, self.keepdims), self._weights(node))]

    def jvp(self, node, dx):
        return None if dx is None else sum(mul(dx, self._weights(node)), self.axis, self.keepdims)


class LogSumExp(Reduce):
    """``log(sum(exp(x)))`` computed stably (the maximum is subtracted first)."""

    name, cost = "logsumexp", 4

    def compute(self, xp, x):
        m = xp.max(x, axis=self.axis, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        out = xp.log(xp.sum(xp.exp(x - m), axis=self.axis, keepdims=True)) + m
        if not self.keepdims:
            out = out.squeeze(axis=_shapes.normalize_axes(self.axis, x.ndim))
        return out

    def _softmax(self, node):
        x = node.inputs[0]
        return exp(sub(x, unreduce(node, x, self.axis, self.keepdims)))

    def gradient(self, node, g, needs):
        x = node.inputs[0]
        return [mul(unreduce(g, x, self.axis, self.keepdims), self._softmax(node))]

    def jvp(self, node, dx):
        return None if dx is None else sum(mul(dx, self._softmax(node)), self.axis, self.keepdims)

    def flops(self, out_shape, in_shape):
        return self.cost * math.prod(in_shape)


class Unreduce(Op):
    """Broadcast a reduced array ``g`` back to the shape of ``like`` (the reduction's adjoint).

    With ``mean=True`` it also divides by the number of reduced elements.
    """

    name = "unreduce"

    def __init__(self, axis=None, keepdims=False, mean=False):
        super().__init__(axis=axis, keepdims=keepdims, mean=mean)
        self.axis, self.keepdims, self.mean = axis, keepdims, mean

    def infer_shape(self, g_shape, like_shape):
        return like_shape

    def infer_dtype(self, g_dtype, like_dtype):
        return g_dtype

    def compute(self, xp, g, like):
        ndim = like.ndim
        axes = _shapes.normalize_axes(self.axis, ndim)
        if not self.keepdims and self.axis is not None:
            g = xp.expand_dims(g, axes)
        elif not self.keepdims:
            g = xp.reshape(g, (1,) * ndim)
        if self.mean:
            g = g / builtins.max(1, math.prod(like.shape[a] for a in axes))
        return xp.broadcast_to(g, like.shape)

    def gradient(self, node, g, needs):
        reduce = mean if self.mean else sum
        return [reduce(g, self.axis, self.keepdims), None]

    def jvp(self, node, dg, dlike):
        return None if dg is None else apply(self, dg, node.inputs[1])


class SumTo(Op):
    """Sum over broadcast axes down to a static ``shape``."""

    name = "sum_to"

    def __init__(self, shape):
        super().__init__(shape=tuple(shape))
        self.shape = tuple(shape)

    def infer_shape(self, shape):
        if shape is not None:
            _shapes.sum_to_axes(shape, self.shape)
        return self.shape

    def compute(self, xp, x):
        return _shapes.sum_to(xp, x, self.shape)

    def gradient(self, node, g, needs):
        from .shape import broadcast_like  # noqa: PLC0415

        return [broadcast_like(g, node.inputs[0])]

    def jvp(self, node, dx):
        return None if dx is None else apply(self, dx)

    def flops(self, out_shape, in_shape):
        return math.prod(in_shape) - math.prod(out_shape)


class SumToLike(Op):
    """Sum ``x`` over broadcast axes down to the (run-time) shape of ``like``."""

    name = "sum_to_like"

    def infer_shape(self, shape, like_shape):
        return like_shape

    def infer_dtype(self, dtype, like_dtype):
        return dtype

    def compute(self, xp, x, like):
        return _shapes.sum_to(xp, x, like.shape)

    def gradient(self, node, g, needs):
        from .shape import broadcast_like  # noqa: PLC0415

        return [broadcast_like(g, node.inputs[0]), None]

    def jvp(self, node, dx, dlike):
        return None if dx is None else apply(self, dx, node.inputs[1])


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


def sum_to(x, like) -> Node:
    """Sum ``x`` down to the shape of the node ``like`` (undo broadcasting)."""
    if not isinstance(like, Node):
        raise GraphError(f"sum_to: like must be a node (whose shape to sum to), got {like!r}")
    if like.shape is not None and None not in like.shape:
        if x.shape == like.shape:
            return x
        return apply(SumTo(like.shape), x)
    return apply(SumToLike(), x, like)
