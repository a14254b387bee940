"""One table of ops for the derivative tests: how to build each op, its input domain,
and (for the oracle tests) the PyTorch function that computes the same thing."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import course_lib as cl


@dataclass
class OpSpec:
    name: str
    build: object  # nodes -> node
    arity: int = 1
    domain: str = "any"  # "any" | "positive" | "away0"
    broadcast: bool = False  # binary ops whose inputs broadcast
    torch: object = None  # torch tensors -> tensor
    shape_kind: str = "any"  # "any" | "matrix" | "concat" | ...
    extra: dict = field(default_factory=dict)


def _t():
    import torch

    return torch


SPECS = [
    OpSpec("add", lambda x, y: x + y, 2, broadcast=True, torch=lambda x, y: x + y),
    OpSpec("sub", lambda x, y: x - y, 2, broadcast=True, torch=lambda x, y: x - y),
    OpSpec("mul", lambda x, y: x * y, 2, broadcast=True, torch=lambda x, y: x * y),
    OpSpec("div", lambda x, y: x / y, 2, "away0", broadcast=True, torch=lambda x, y: x / y),
    OpSpec("maximum", cl.maximum, 2, broadcast=True, torch=lambda x, y: _t().maximum(x, y)),
    OpSpec("neg", lambda x: -x, torch=lambda x: -x),
    OpSpec("pow3", lambda x: x**3, torch=lambda x: x**3),
    OpSpec("pow_half", lambda x: x**0.5, domain="positive", torch=lambda x: x**0.5),
    OpSpec("exp", cl.exp, torch=lambda x: x.exp()),
    OpSpec("log", cl.log, domain="positive", torch=lambda x: x.log()),
    OpSpec("sin", cl.sin, torch=lambda x: x.sin()),
    OpSpec("cos", cl.cos, torch=lambda x: x.cos()),
    OpSpec("tanh", cl.tanh, torch=lambda x: x.tanh()),
    OpSpec("sigmoid", cl.sigmoid, torch=lambda x: x.sigmoid()),
    OpSpec("relu", cl.relu, domain="away0", torch=lambda x: x.relu()),
    OpSpec("silu", cl.silu, torch=lambda x: _t().nn.functional.silu(x)),
    OpSpec("sqrt", cl.sqrt, domain="positive", torch=lambda x: x.sqrt()),
    OpSpec("rsqrt", cl.rsqrt, domain="positive", torch=lambda x: x.rsqrt()),
    OpSpec(
        "where",
        lambda x, y: cl.where(x > 0.1, x, y),
        2,
        "away0",
        broadcast=True,
        torch=lambda x, y: _t().where(x > 0.1, x, y),
    ),
    OpSpec("sum_all", lambda x: cl.sum(x), torch=lambda x: x.sum()),
    OpSpec("sum_ax0", lambda x: cl.sum(x, 0), torch=lambda x: x.sum(0)),
    OpSpec("sum_last_keep", lambda x: cl.sum(x, -1, True), torch=lambda x: x.sum(-1, keepdim=True)),
    OpSpec("mean_ax0_keep", lambda x: cl.mean(x, 0, True), torch=lambda x: x.mean(0, keepdim=True)),
    OpSpec("mean_all", lambda x: cl.mean(x), torch=lambda x: x.mean()),
    OpSpec("max_last", lambda x: cl.max(x, -1), torch=lambda x: x.amax(-1)),
    OpSpec(
        "max_all_keep",
        lambda x: cl.max(x, None, True),
        torch=lambda x: x.amax(dim=tuple(range(x.dim())), keepdim=True),
    ),
    OpSpec("logsumexp_last", lambda x: cl.logsumexp(x, -1), torch=lambda x: x.logsumexp(-1)),
    OpSpec(
        "logsumexp_0_keep",
        lambda x: cl.logsumexp(x, 0, True),
        torch=lambda x: x.logsumexp(0, keepdim=True),
    ),
    OpSpec("reshape_flat", lambda x: cl.reshape(x, (-1,)), torch=lambda x: x.reshape(-1)),
    OpSpec(
        "transpose", lambda x: cl.transpose(x), torch=lambda x: x.permute(*reversed(range(x.dim())))
    ),
    OpSpec(
        "permute_roll",
        lambda x: cl.permute(x, *np.roll(np.arange(x.ndim), 1).tolist()),
        torch=lambda x: x.permute(*np.roll(np.arange(x.dim()), 1).tolist()),
    ),
    OpSpec(
        "take_rows",
        lambda x: cl.take(x, np.array([0, x.shape[0] - 1, 0])),
        torch=lambda x: x[[0, x.shape[0] - 1, 0]],
    ),
    OpSpec(
        "broadcast_to",
        lambda x: cl.broadcast_to(x, (2,) + x.shape),
        torch=lambda x: x.expand((2,) + tuple(x.shape)),
    ),
    OpSpec("getitem", lambda x: x[::-1], torch=lambda x: x.flip(0)),
    OpSpec("getitem_fancy", lambda x: x[np.array([0, 0, -1])], torch=lambda x: x[[0, 0, -1]]),
    OpSpec(
        "concat",
        lambda x, y: cl.concat([x, y, x], axis=0),
        2,
        torch=lambda x, y: _t().cat([x, y, x], 0),
    ),
    OpSpec(
        "split",
        lambda x: cl.split(x, [1, x.shape[0] - 1])[1] * 2.0,
        torch=lambda x: x[1:] * 2.0,
        shape_kind="rows2",
    ),
    OpSpec("matmul", lambda x, y: x @ y, 2, torch=lambda x, y: x @ y, shape_kind="matrix"),
    OpSpec("softmax", lambda x: cl.softmax(x, -1), torch=lambda x: x.softmax(-1)),
    OpSpec("log_softmax", lambda x: cl.log_softmax(x, 0), torch=lambda x: x.log_softmax(0)),
]

SPEC_BY_NAME = {s.name: s for s in SPECS}


def sample(spec: OpSpec, rng: np.random.Generator, shapes: list) -> list:
    """Input arrays of ``shapes`` in the domain of ``spec`` (away from kinks and poles)."""
    arrays = []
    for s in shapes:
        a = rng.standard_normal(s)
        if spec.domain == "positive":
            a = np.abs(a) + 0.5
        elif spec.domain == "away0":
            a = np.where(np.abs(a) < 0.2, 0.5, a)
        arrays.append(a)
    if spec.name == "maximum":  # keep x and y apart so the kink is never within eps
        big = 0 if np.broadcast_shapes(*shapes) == tuple(shapes[0]) else 1
        sign = np.where(rng.random(shapes[big]) < 0.5, 0.3, -0.3)
        arrays[big] = np.broadcast_to(arrays[1 - big], shapes[big]) + sign
    return arrays
