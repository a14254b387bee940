"""Folding a BatchNorm into the convolution before it: the algebra of the rewrite.

At inference, BatchNorm is an affine map per output channel c:
``Z = Y·R(c) + P(c)`` with ``R(c) = γ(c) / sqrt(var(c) + ε)`` and ``P(c) = β(c) − mean(c)·R(c)``.
For ``Y = conv(X, W) + B`` this gives one convolution with ``W2 = W·R(c)`` and
``B2 = B·R(c) + P(c)``: one kernel, and the BatchNorm's pass over memory disappears.
(The engine has no convolution op yet, so the rewrite is shown on parameters.)

These are NumPy references on the host: they take host data (NumPy arrays, lists) and refuse
a device array with ``DeviceError`` (bring it over with ``course_lib.to_numpy`` first).
"""

from __future__ import annotations

import numpy as np

from ..backend import host_array
from ..errors import ShapeError


def batchnorm_affine(gamma, beta, mean, var, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """BatchNorm at inference as ``(R, P)`` per channel: ``bn(y) = y·R + P``."""
    gamma, beta, mean, var = (
        host_array(a, f"batchnorm_affine: {name}").astype(np.float64, copy=False)
        for name, a in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))
    )
    if not gamma.shape == beta.shape == mean.shape == var.shape or gamma.ndim != 1:
        raise ShapeError(
            "batchnorm parameters must be four vectors of one length (one value per channel), "
            f"got gamma {gamma.shape}, beta {beta.shape}, mean {mean.shape}, var {var.shape}"
        )
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


def fold_batchnorm(weight, bias, gamma, beta, mean, var, eps: float = 1e-5):
    """``(W2, B2)``: a conv (weights ``(C_out, C_in, kh, kw)``, bias ``(C_out,)``) followed by
    a BatchNorm over its ``C_out`` channels, as one conv."""
    weight = host_array(weight, "fold_batchnorm: weight")
    bias = host_array(bias, "fold_batchnorm: bias")
    scale, shift = batchnorm_affine(gamma, beta, mean, var, eps)
    if weight.ndim != 4 or weight.shape[0] != len(scale) or bias.shape != scale.shape:
        raise ShapeError(
            f"fold_batchnorm: conv weights {weight.shape} (C_out, C_in, kh, kw) and bias "
            f"{bias.shape} must have C_out = {len(scale)} batchnorm channels"
        )
    return weight * scale[:, None, None, None], bias * scale + shift


def conv2d(x, weight, bias) -> np.ndarray:
    """Reference 2-D convolution (NCHW, stride 1, no padding): a NumPy check for the folding."""
    x, weight = host_array(x, "conv2d: x"), host_array(weight, "conv2d: weight")
    bias = host_array(bias, "conv2d: bias")
    if x.ndim != 4 or weight.ndim != 4 or x.shape[1] != weight.shape[1]:
        raise ShapeError(
            f"conv2d: x {x.shape} (N, C_in, H, W) and weights {weight.shape} "
            "(C_out, C_in, kh, kw) must agree on C_in"
        )
    windows = np.lib.stride_tricks.sliding_window_view(x, weight.shape[2:], axis=(2, 3))
    return np.einsum("nchwuv,dcuv->ndhw", windows, weight) + bias[None, :, None, None]
