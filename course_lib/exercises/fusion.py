"""Notebook 06: arithmetic intensity counted from a graph, and conv + BatchNorm folding.

``06.intensity`` is checked against ``perf.arithmetic_intensity`` on random elementwise
graphs (broadcast inputs, ops of several FLOPs per element); ``06.fold_batchnorm`` by running
the folded convolution against the convolution followed by the BatchNorm (NumPy, random
channels and kernel sizes).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .. import (
    add,
    div,
    exp,
    maximum,
    mul,
    neg,
    perf,
    rsqrt,
    sigmoid,
    silu,
    sub,
    tanh,
    topological_order,
    variable,
)  # fmt: skip
from .core import (
    LAYOUTS,
    Mistake,
    Wrong,
    call,
    close,
    exercise,
    first_match,
    laid_out,
    require,
    show,
)

DISTINCT_INPUTS = Mistake(
    "distinct-inputs",
    "each OPERAND is loaded, not each distinct input: x * x loads x twice (two loads and one "
    "store, AI = 1/3). Sum math.prod(i.shape) over node.inputs, repeats included.",
)
NO_STORES = Mistake(
    "loads-only",
    "only the loads are counted: every kernel also STORES its output, one more access per "
    "element (C = A + B: two loads and one store, AI = 1/3).",
)
VARIABLES_AS_OPS = Mistake(
    "variables-as-ops",
    "the variables are counted as operations: they are inputs that already sit in memory, no "
    "kernel computes them. Count only nodes with inputs.",
)
PER_BYTE = Mistake(
    "per-byte",
    "that is FLOPs per byte of float32; the lecture's intensity counts elements (loads + stores).",
)
FUSED = Mistake(
    "fused",
    "that is the intensity of ONE fused kernel (each variable loaded once, each output stored "
    "once). Here every op is its own kernel, reading its inputs and writing its output "
    "(Program 1).",
)
FLOAT = Mistake(
    "float",
    "return an exact Fraction(flops, accesses): a float cannot hold 1/3 exactly.",
)
ONE_FLOP = Mistake(
    "one-flop",
    "not every op costs 1 FLOP per element: ask the op, node.op.flops(node.shape, *input "
    "shapes) (sigmoid costs 3 per element, silu 4, rsqrt 2).",
)
OUTPUT_SIZED = Mistake(
    "output-sized-inputs",
    "each input is loaded at its own size: a (1,) input broadcast over a (1000,) output is one "
    "load, not 1000. Sum math.prod(i.shape) over the inputs.",
)

_BINARY, _UNARY = (add, sub, mul, div, maximum), (neg, exp, tanh, sigmoid, silu, rsqrt)


def _random_program(rng, n: int) -> list:
    """A few outputs of a random elementwise graph on float32 vectors, sharing intermediates;
    some variables are (1,) (broadcast), some ops cost several FLOPs per element."""
    shapes = [(n,), (n,), (n,), (1,)]
    nodes = [variable(f"x{i}", shapes[int(rng.integers(4))] if i else (n,), np.float32)
             for i in range(int(rng.integers(1, 5)))]  # fmt: skip
    for _ in range(int(rng.integers(1, 7))):
        if rng.random() < 0.7:
            a, b = rng.choice(len(nodes), 2)
            nodes.append(_BINARY[rng.integers(len(_BINARY))](nodes[a], nodes[b]))
        else:
            nodes.append(_UNARY[rng.integers(len(_UNARY))](nodes[rng.integers(len(nodes))]))
    ops = [node for node in nodes if node.inputs]
    count = int(rng.integers(1, min(3, len(ops)) + 1))
    return [ops[-1]] + [ops[int(i)] for i in rng.choice(len(ops), count - 1)]


def _wrong_intensities(outputs, report) -> list[tuple[Mistake, Fraction]]:
    nodes = topological_order(outputs)
    ops = [node for node in nodes if node.inputs]
    stored = sum(math.prod(node.shape) for node in ops)
    distinct = sum(math.prod(i.shape) for node in ops for i in set(node.inputs))
    variables = sum(math.prod(node.shape) for node in nodes if not node.inputs)
    output_sized = sum((len(node.inputs) + 1) * math.prod(node.shape) for node in ops)
    fused = variables + sum(math.prod(node.shape) for node in set(outputs))
    return [
        (DISTINCT_INPUTS, Fraction(report.flops, distinct + stored)),
        (NO_STORES, Fraction(report.flops, report.elements - stored)),
        (VARIABLES_AS_OPS, Fraction(report.flops + variables, report.elements + variables)),
        (PER_BYTE, Fraction(report.flops, 4 * report.elements)),
        (FUSED, Fraction(report.flops, fused)),
        (ONE_FLOP, Fraction(stored, report.elements)),
        (OUTPUT_SIZED, Fraction(report.flops, output_sized)),
    ]


def _intensity_mistake(answer, got, wrong) -> Mistake | None:
    """The mistake whose intensity ``got`` is. Distinct inputs and loads only can give the same
    (x * x: one load and one store, or two loads and no store); then C = A + B tells them
    apart: distinct inputs count it right (1/3), loads only gives 1/2."""
    matches = [m for m, value in wrong if got == value]
    if DISTINCT_INPUTS in matches and NO_STORES in matches:
        a, b = (variable(name, (8,), np.float32) for name in "AB")
        both = call("intensity([A + B]), to tell two mistakes apart", answer, [a + b])
        return NO_STORES if both == Fraction(1, 2) else DISTINCT_INPUTS
    return matches[0] if matches else None


@exercise(
    "06.intensity", "intensity(outputs) -> Fraction: FLOPs per element moved, one kernel per op",
    mistakes=(DISTINCT_INPUTS, NO_STORES, VARIABLES_AS_OPS, PER_BYTE, FUSED, FLOAT, ONE_FLOP,
              OUTPUT_SIZED),  # fmt: skip
    forbidden=("course_lib.perf.counts.arithmetic_intensity", "course_lib.perf.counts.op_cost"),
)
def check_intensity(answer) -> str:
    rng = np.random.default_rng(60)
    a, b, c, d = (variable(name, (1024,), np.float32) for name in "ABCD")
    programs = [[a + b], [d + (a + b) * c], [a * a], [exp(a), neg(exp(a))]]
    programs += [_random_program(rng, int(rng.integers(1, 50))) for _ in range(40)]
    for outputs in programs:
        label = f"intensity([{', '.join(o.name for o in outputs)}])"
        got = call(label, answer, outputs)
        want = perf.arithmetic_intensity(outputs).intensity
        if isinstance(got, float) and abs(got - float(want)) < 1e-9:
            raise Wrong(f"{label} returned the float {got!r}", FLOAT)
        require(
            isinstance(got, Fraction | int),
            f"{label} returned {type(got).__name__} {got!r}; it must return a Fraction",
        )
        if got != want:
            wrong = _wrong_intensities(outputs, perf.arithmetic_intensity(outputs))
            raise Wrong(f"{label} returned {got}, expected {want}",
                        _intensity_mistake(answer, got, wrong))  # fmt: skip
    return (
        f"right on {len(programs)} graphs: C = A + B, the lecture's Program 1, random graphs "
        "with shared nodes, broadcast inputs and ops of several FLOPs"
    )


# -- fold_batchnorm ---------------------------------------------------------------------------
BIAS_NOT_SCALED = Mistake(
    "bias-not-scaled",
    "the bias goes through the BatchNorm too: B2 = B·R(c) + P(c), not B + P(c).",
)
EPS_OUTSIDE = Mistake(
    "eps-outside",
    "ε belongs inside the square root: R(c) = γ(c) / sqrt(var(c) + ε).",
)
NO_SQRT = Mistake(
    "variance-not-std",
    "BatchNorm divides by the standard deviation sqrt(var + ε), not by the variance.",
)
MEAN_SIGN = Mistake(
    "mean-sign",
    "the mean is subtracted before scaling: P(c) = β(c) − mean(c)·R(c).",
)
WRONG_AXIS = Mistake(
    "wrong-axis",
    "R has one value per OUTPUT channel, the first axis of W (C_out, C_in, kh, kw): scale with "
    "W * R[:, None, None, None] (plain W * R lines R up with the last axis).",
)


def _conv(x, weight, bias):
    """2-D convolution, NCHW, stride 1, no padding."""
    windows = np.lib.stride_tricks.sliding_window_view(x, weight.shape[2:], axis=(2, 3))
    return np.einsum("nchwuv,dcuv->ndhw", windows, weight) + bias[None, :, None, None]


def _batchnorm_case(rng, c_out: int, c_in: int, k: int, eps: float) -> dict:
    return {
        "W": rng.standard_normal((c_out, c_in, k, k)),
        "B": rng.standard_normal(c_out),
        "gamma": rng.standard_normal(c_out),
        "beta": rng.standard_normal(c_out),
        "mean": rng.standard_normal(c_out),
        "var": rng.random(c_out) * 2.0 ** rng.integers(-12, 3),
        "eps": eps,
    }


def _wrong_folds(p) -> list:
    def fold(r, p_shift, bias_scaled=True):
        w = p["W"] * r[:, None, None, None]
        return w, (p["B"] * r if bias_scaled else p["B"]) + p_shift

    r = p["gamma"] / np.sqrt(p["var"] + p["eps"])
    r_out = p["gamma"] / (np.sqrt(p["var"]) + p["eps"])
    r_var = p["gamma"] / (p["var"] + p["eps"])
    return [
        (BIAS_NOT_SCALED, lambda: fold(r, p["beta"] - p["mean"] * r, bias_scaled=False)),
        (EPS_OUTSIDE, lambda: fold(r_out, p["beta"] - p["mean"] * r_out)),
        (NO_SQRT, lambda: fold(r_var, p["beta"] - p["mean"] * r_var)),
        (MEAN_SIGN, lambda: fold(r, p["beta"] + p["mean"] * r)),
        (WRONG_AXIS, lambda: (p["W"] * r, p["B"] * r + p["beta"] - p["mean"] * r)),
    ]


@exercise(
    "06.fold_batchnorm", "fold_batchnorm(W, B, gamma, beta, mean, var, eps) -> (W2, B2)",
    mistakes=(BIAS_NOT_SCALED, EPS_OUTSIDE, NO_SQRT, MEAN_SIGN, WRONG_AXIS),
    forbidden=("course_lib.models.batchnorm.fold_batchnorm",
               "course_lib.models.batchnorm.batchnorm_affine"),  # fmt: skip
)
def check_fold_batchnorm(answer) -> str:
    rng = np.random.default_rng(61)
    sizes = [(4, 3, 3, 1e-5), (1, 1, 1, 1e-5), (3, 2, 3, 1e-3), (5, 4, 2, 0.1)]
    sizes += [
        (int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.choice([1, 2, 3])), 1e-5)
        for _ in range(10)
    ]
    for count, (c_out, c_in, k, eps) in enumerate(sizes):
        p = _batchnorm_case(rng, c_out, c_in, k, eps)
        label = f"fold_batchnorm for C_out = {c_out}, C_in = {c_in}, {k}x{k} kernels, ε = {eps:g}"
        layout = LAYOUTS[count % len(LAYOUTS)]
        args = [laid_out(p[key], layout) for key in ("W", "B", "gamma", "beta", "mean", "var")]
        got = call(label, answer, *args, eps, errors=[(ValueError, "broadcast", WRONG_AXIS)])
        require(
            isinstance(got, tuple | list)  # the pair (W2, B2), as a list too
            and len(got) == 2
            and all(isinstance(g, np.ndarray) for g in got),
            f"{label}: returned {type(got).__name__}; it must return (W2, B2), two arrays",
        )
        require(
            got[0].shape == p["W"].shape and got[1].shape == p["B"].shape,
            f"{label}: W2 has shape {got[0].shape} and B2 {got[1].shape}; they must have the "
            f"shapes of W {p['W'].shape} and B {p['B'].shape}",
        )
        x = rng.standard_normal((2, c_in, 6, 6))
        y = _conv(x, p["W"], p["B"])
        bn = (y - p["mean"][:, None, None]) / np.sqrt(p["var"] + eps)[:, None, None]
        want = bn * p["gamma"][:, None, None] + p["beta"][:, None, None]
        folded = _conv(x, *got)
        if not close(folded, want, rtol=1e-7, atol=1e-8):
            mistake = first_match(
                got, _wrong_folds(p), lambda a, b: close(a[0], b[0]) and close(a[1], b[1])
            )
            error = np.max(np.abs(folded - want))
            raise Wrong(
                f"{label}: the folded conv differs from conv + BatchNorm by up to {show(error)}",
                mistake,
            )
    return (
        f"the folded conv equals conv + BatchNorm on {len(sizes)} random layers (one "
        "channel, 1x1 kernels too)"
    )
