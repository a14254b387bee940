"""Folding a BatchNorm into the convolution before it: the algebra of the rewrite.

At inference, BatchNorm is an affine map per output channel c:
``Z = Y·R(c) + P(c)`` with ``R(c) = γ(c) / sqrt(var(c) + ε)`` and ``P(c) = β(c) − mean(c)·R(c)``.
For ``Y = conv(X, W) + B`` this gives one convolution with ``W2 = W·R(c)`` and
``B2 = B·R(c) + P(c)``: one kernel, and the BatchNorm's pass over memory disappears.
(The engine has no convolution op yet, so the rewrite is shown on parameters.)

These are NumPy references on the host: they take host data (NumPy arrays, lists) of real
numbers and refuse a device array with ``DeviceError`` (bring it over with
``course_lib.to_numpy`` first).
"""

from __future__ import annotations

import numpy as np

from .. import params
from ..backend import host_array
from ..errors import ParameterError, ShapeError


def _host(value, what: str) -> np.ndarray:
    """``value`` as a NumPy array of real numbers (booleans, integers, floats), or a clear error."""
    return params.numeric_array(host_array(value, what), what)


def batchnorm_affine(gamma, beta, mean, var, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """BatchNorm at inference as ``(R, P)`` per channel (float64): ``bn(y) = y·R + P``; the
    four vectors must be finite, ``var`` at least 0 (a variance is never negative) and
    ``var + eps`` above 0 in every channel."""
    gamma, beta, mean, var = (
        _host(a, f"batchnorm_affine: {name}").astype(np.float64, copy=False)
        for name, a in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))
    )
    eps = params.real(eps, "batchnorm_affine: eps", minimum=0.0)
    if not gamma.shape == beta.shape == mean.shape == var.shape or gamma.ndim != 1:
        raise ShapeError(
            "batchnorm parameters must be four vectors of one length (one value per channel), "
            f"got gamma {gamma.shape}, beta {beta.shape}, mean {mean.shape}, var {var.shape}"
        )
    for name, a in (("gamma", gamma), ("beta", beta), ("mean", mean)):
        if not np.isfinite(a).all():
            raise ParameterError(f"batchnorm_affine: {name} must be finite in every channel, "
                                 f"got {a[~np.isfinite(a)]}")  # fmt: skip
    bad = ~((var >= 0) & (var < np.inf) & (var + eps > 0))  # NaN too
    if bad.any():
        raise ParameterError(
            f"batchnorm_affine: var + eps must be above 0, and var finite and at least 0, in "
            f"every channel, got var {var[bad]} with eps={eps:g}"
        )
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps: float = 1e-5):
    """``(W2, B2)``: a conv (weights ``(C_out, C_in, kh, kw)``, bias ``(C_out,)``) followed by
    a BatchNorm over its ``C_out`` channels, as one conv, in the conv's float dtype (float64
    for integer weights), as ``torch.nn.utils.fusion.fuse_conv_bn_weights`` keeps it."""
    weight = _host(weight, "fold_batchnorm: weight")
    bias = _host(bias, "fold_batchnorm: bias")
    scale, shift = batchnorm_affine(gamma, beta, mean, var, eps)
    if weight.ndim != 4 or weight.shape[0] != len(scale) or bias.shape != scale.shape:
        raise ShapeError(
            f"fold_batchnorm: conv weights {weight.shape} (C_out, C_in, kh, kw) and bias "
            f"{bias.shape} must have C_out = {len(scale)} batchnorm channels"
        )
    dtype = np.result_type(weight, bias)
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    return (weight * scale[:, None, None, None]).astype(dtype), (bias * scale + shift).astype(dtype)


def conv2d(x, weight, bias) -> np.ndarray:
    """Reference 2-D convolution (NCHW, stride 1, no padding): a NumPy check for the folding."""
    x, weight = _host(x, "conv2d: x"), _host(weight, "conv2d: weight")
    bias = _host(bias, "conv2d: bias")
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ShapeError(
            f"conv2d: x {x.shape} (N, C_in, H, W) and weights {weight.shape} "
            "(C_out, C_in, kh, kw) must agree on C_in"
        )
    if weight.shape[2] > x.shape[2] or weight.shape[3] > x.shape[3]:
        raise ShapeError(f"conv2d: the kernel {weight.shape[2:]} is larger than the image "
                         f"{x.shape[2:]} (no padding)")  # fmt: skip
    if 0 in weight.shape[2:]:
        raise ShapeError(f"conv2d: the kernel {weight.shape[2:]} must be at least 1x1")
    if bias.shape != weight.shape[:1]:
        raise ShapeError(f"conv2d: bias {bias.shape} must have shape ({weight.shape[0]},), one "
                         "value per output channel")  # fmt: skip
    windows = np.lib.stride_tricks.sliding_window_view(x, weight.shape[2:], axis=(2, 3))
    return np.einsum("nchwuv,dcuv->ndhw", windows, weight) + bias[None, :, None, None]
