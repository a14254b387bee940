"""NumPy reference implementations of the kernels, with the same signatures as
:mod:`course_lib.kernels.launch` (the kernels are tested against these)."""

from __future__ import annotations

import numpy as np


def vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` for two vectors of equal length."""
    return a + b


vector_add_float4 = vector_add


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for an (M, K) and a (K, N) matrix, accumulated in float64."""
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


matmul_naive = matmul_tiled = matmul_register_tiled = matmul


def copy_strided(x: np.ndarray, stride: int) -> np.ndarray:
    """Every ``stride``-th element of the vector ``x``: ``x[::stride]``, as a new array."""
    return x[::stride].copy()


def transpose(x: np.ndarray) -> np.ndarray:
    """The transpose of a matrix, as a new C-contiguous array."""
    return np.ascontiguousarray(x.T)


def reduce_sum(x: np.ndarray) -> np.ndarray:
    """The sum of a vector, accumulated in float64, as a 0-d array of ``x``'s dtype."""
    return np.asarray(x.sum(dtype=np.float64), dtype=x.dtype)


def softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, with the maximum subtracted first: a row of -inf, or with
    a +inf or a NaN, is all NaN (as in the kernels), without a warning."""
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def causal_softmax(s: np.ndarray, scale: float) -> np.ndarray:
    """``softmax(scale * s + M)`` over the last axis of (..., T, S) scores, ``M[i, j] = -inf``
    for keys j after query i (query i sees keys j <= i + S - T); the mask is added."""
    t, keys = s.shape[-2:]
    allowed = np.arange(keys)[None, :] <= np.arange(t)[:, None] + (keys - t)
    with np.errstate(invalid="ignore"):
        return softmax(s * s.dtype.type(scale) + np.where(allowed, 0.0, -np.inf).astype(s.dtype))


def softmax_grad(g: np.ndarray, p: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``scale * p * (g - sum(g * p))`` over the last axis (a softmax's adjoint, output p)."""
    dot = (g.astype(np.float64) * p).sum(axis=-1, keepdims=True)
    return (scale * p * (g - dot)).astype(g.dtype)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """``weight * x / sqrt(mean(x**2, axis=-1) + eps)`` (LLaMA's RMSNorm)."""
    mean_square = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
    return (weight * (x / np.sqrt(mean_square + eps))).astype(x.dtype)


def adam_moment(m: np.ndarray, g: np.ndarray, beta: float, power: int) -> np.ndarray:
    """``beta * m + (1 - beta) * g**power`` (AdamW's moments), in m's dtype."""
    return (m * beta + (1.0 - beta) * g**power).astype(m.dtype)


def adamw_update(param, m, v, lr, step, beta1, beta2, eps, weight_decay) -> np.ndarray:
    """``θ(1 − lr·λ) − lr/(1−β₁ᵗ) · m / (sqrt(v)/sqrt(1−β₂ᵗ) + ε)``, in θ's dtype."""
    lr, t = float(lr), int(step)
    theta = param * np.float32(1.0 - lr * weight_decay) if weight_decay else param
    denom = np.sqrt(v) * np.float32(1.0 / np.sqrt(1.0 - beta2**t)) + np.float32(eps)
    return (theta - m / denom * np.float32(lr / (1.0 - beta1**t))).astype(param.dtype)


def rope_tables(seq_len: int, head_dim: int, theta: float = 10000.0, dtype=np.float32):
    """``cos`` and ``sin`` tables of shape (seq_len, head_dim // 2) for RoPE: the angles in
    float64, rounded to ``dtype`` (float32 by default: the kernels')."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(seq_len, dtype=np.float64), inv_freq)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def rms_norm_grad_x(g: np.ndarray, x: np.ndarray, weight: np.ndarray,
                    eps: float = 1e-6) -> np.ndarray:  # fmt: skip
    """RMSNorm's input adjoint ``r * (g*w - x * mean(g*w*x) * r**2)``, in float64."""
    x64, gw = x.astype(np.float64), g.astype(np.float64) * weight
    r = 1 / np.sqrt(np.mean(x64**2, axis=-1, keepdims=True) + eps)
    dot = np.mean(gw * x64, axis=-1, keepdims=True)
    return (r * (gw - x64 * dot * r * r)).astype(x.dtype)


def rms_norm_grad_w(g: np.ndarray, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm's weight adjoint ``sum over rows of g * x / rms(x)``, in float64."""
    x64 = x.astype(np.float64)
    r = 1 / np.sqrt(np.mean(x64**2, axis=-1, keepdims=True) + eps)
    n = x.shape[-1]
    return (g.astype(np.float64) * x64 * r).reshape(-1, n).sum(axis=0).astype(x.dtype)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Half-split rotary embedding of ``x`` (..., seq_len, head_dim) (Hugging Face's
    ``x * cos + rotate_half(x) * sin`` with the tables repeated over both halves)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = True, scale: float | None = None
) -> np.ndarray:
    """Softmax attention of q (B, H, T, D) over k, v (B, KV, T, D); query head h uses kv head
    ``h // (H // KV)``; with ``causal``, query i sees keys j <= i. Scale defaults to D**-0.5."""
    groups = q.shape[1] // k.shape[1]
    k = np.repeat(k, groups, axis=1).astype(np.float64)
    v = np.repeat(v, groups, axis=1).astype(np.float64)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q.astype(np.float64) * scale) @ np.swapaxes(k, -1, -2)
    if causal:
        t = q.shape[-2]
        scores = np.where(np.tril(np.ones((t, t), dtype=bool)), scores, -np.inf)
    return (softmax(scores) @ v).astype(q.dtype)
