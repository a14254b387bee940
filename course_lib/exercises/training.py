"""Notebook 04: gradients written by hand in NumPy.

``04.softmax_ce_grad`` is checked against central differences of the mean cross-entropy
(computed stably), on logits up to ±1e3; ``04.mlp_grads`` against ``cl.grad`` of the
notebook's two-layer network, on random sizes.
"""

from __future__ import annotations

import numpy as np

from .. import grad, mean, relu, variable
from ..backend import to_numpy
from .core import (
    DERIVATIVES,
    LAYOUTS,
    Mistake,
    Wrong,
    call,
    close,
    exercise,
    first_match,
    laid_out,
    mismatch,
    require,
    run_graph,
)

NO_MEAN = Mistake(
    "no-mean",
    "the loss is the MEAN over the N rows of the batch, so every row's y − t is divided by N.",
)
SIGN = Mistake("sign", "∂L/∂x = y − t (softmax minus one-hot), not t − y.")
UNSTABLE = Mistake(
    "overflow",
    "exp(1000) overflows to inf (and inf/inf is NaN): subtract each row's maximum before exp; "
    "softmax(x) = softmax(x − max(x)).",
)
NO_ONE_HOT = Mistake(
    "no-one-hot",
    "subtract the one-hot target: the gradient is (softmax(x) − t)/N, where t has a 1 at the "
    "target class of each row.",
)
SOFTMAX_AXIS = Mistake(
    "softmax-axis",
    "the softmax runs over the classes of each row (axis=-1, keepdims=True), not down the batch.",
)
CHANGES_INPUT = Mistake(
    "changes-input",
    "your function changed the logits it was given (an in-place -= or /=): work on a copy, or "
    "write x = logits - logits.max(...) (a new array).",
)


def _mean_cross_entropy(logits, targets) -> float:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-log_probs[np.arange(len(targets)), targets].mean())


def _finite_differences(logits, targets, step: float = 1e-5) -> np.ndarray:
    out = np.zeros_like(logits)
    for index in np.ndindex(logits.shape):
        up, down = logits.copy(), logits.copy()
        up[index] += step
        down[index] -= step
        out[index] = (_mean_cross_entropy(up, targets) - _mean_cross_entropy(down, targets)) / (
            2 * step
        )
    return out


def _softmax_ce_mistake(got, logits, targets, fd) -> Mistake | None:
    n = len(targets)
    if not np.isfinite(got).all():
        return UNSTABLE
    one_hot = np.eye(logits.shape[1])[targets]
    down_columns = np.exp(logits - logits.max(axis=0)) / np.exp(logits - logits.max(axis=0)).sum(
        axis=0
    )
    wrong = [
        (NO_MEAN, lambda: n * fd),
        (SIGN, lambda: -fd),
        (NO_ONE_HOT, lambda: fd + one_hot / n),
        (SOFTMAX_AXIS, lambda: (down_columns - one_hot) / n),
    ]
    return first_match(got, wrong, lambda a, b: close(a, b, rtol=1e-5, atol=1e-7))


@exercise(
    "04.softmax_ce_grad", "softmax_ce_grad(logits, targets) -> ndarray: ∂ mean CE / ∂ logits",
    mistakes=(NO_MEAN, SIGN, UNSTABLE, NO_ONE_HOT, SOFTMAX_AXIS, CHANGES_INPUT),
    forbidden=DERIVATIVES,
)
def check_softmax_ce_grad(answer) -> str:
    rng = np.random.default_rng(40)
    cases = [
        (4, 5, 1.0),
        (1, 3, 1.0),
        (1, 1, 1.0),
        (8, 10, 3.0),
        (3, 2, 1e3),
        (5, 4, -1e3),
        (2, 6, 1e3),
    ]
    for count, (n, c, scale) in enumerate(cases):
        logits = scale * rng.standard_normal((n, c))
        targets = rng.integers(0, c, n).astype(np.int64 if n % 2 else np.int32)
        label = (
            f"softmax_ce_grad(logits, targets) for {n} rows, {c} classes, logits of scale {scale:g}"
        )
        given = laid_out(logits, LAYOUTS[count % len(LAYOUTS)])
        got = call(label, answer, given, targets.copy(), changed=CHANGES_INPUT)
        require(
            isinstance(got, np.ndarray) and got.shape == logits.shape,
            f"{label} returned {type(got).__name__} {getattr(got, 'shape', '')}; it must return an "
            f"array of the logits' shape {logits.shape}",
        )
        fd = _finite_differences(logits, targets)
        if not close(got, fd, rtol=1e-5, atol=1e-7):
            raise Wrong(
                f"{label} {mismatch(got, fd)} (central differences of the loss)",
                _softmax_ce_mistake(got, logits, targets, fd),
            )
    return (
        f"matches central differences of the mean cross-entropy on {len(cases)} batches: "
        "one row, one class, logits of ±1e3"
    )


# -- mlp_grads --------------------------------------------------------------------------------
MEAN_COUNT = Mistake(
    "mean-count",
    "L is the mean over ALL N·K entries of (ŷ − y)²: its gradient with respect to ŷ is "
    "2(ŷ − y)/(N·K).",
)
NO_TWO = Mistake("no-two", "the derivative of (ŷ − y)² is 2(ŷ − y): keep the factor 2.")
RELU_MASK = Mistake(
    "relu-mask",
    "dw2 is right and dw1 is right only where every hidden unit is active: on the way back "
    "through ReLU, multiply by (x @ w1 > 0), the ReLU's derivative.",
)
SHAPES = Mistake(
    "shapes",
    "a gradient has the shape of its parameter: dw1 like w1 (D, H), dw2 like w2 (H, K). Check "
    "the order of the two results and which factors are transposed.",
)


def _mlp_case(rng, n: int, d: int, h: int, k: int, active: bool = False) -> dict:
    case = {
        "x": rng.standard_normal((n, d)),
        "y": rng.standard_normal((n, k)),
        "w1": rng.standard_normal((d, h)),
        "w2": rng.standard_normal((h, k)),
    }
    if active:  # every pre-activation positive: ReLU is the identity here
        case["x"], case["w1"] = np.abs(case["x"]) + 0.1, np.abs(case["w1"]) + 0.1
    return case


def _mlp_gradients(case: dict) -> list:
    """``cl.grad``'s (dL/dw1, dL/dw2), run on the current device, on the host (NumPy) to
    compare with the answer's NumPy arrays."""
    x, y, w1, w2 = (variable(name, case[name].shape) for name in ("x", "y", "w1", "w2"))
    loss = mean((relu(x @ w1) @ w2 - y) ** 2)
    feed = {x: case["x"], y: case["y"], w1: case["w1"], w2: case["w2"]}
    return [to_numpy(g) for g in run_graph(grad(loss, [w1, w2]), feed)]


def _mlp_answer(answer, case: dict, label: str, layout: str = "C") -> tuple:
    arrays = (laid_out(case[name], layout) for name in ("x", "y", "w1", "w2"))
    got = call(label, answer, *arrays)
    require(
        isinstance(got, tuple | list)
        and len(got) == 2
        and all(isinstance(g, np.ndarray) for g in got),
        f"{label} returned {type(got).__name__}; it must return (dw1, dw2), two arrays",
    )
    shapes = (case["w1"].shape, case["w2"].shape)
    require(
        tuple(g.shape for g in got) == shapes,
        f"{label} returned arrays of shapes {tuple(g.shape for g in got)}, expected {shapes}",
        SHAPES,
    )
    return got


def _mlp_mistake(answer, got, want, case, n_k) -> Mistake | None:
    for mistake, factor in ((MEAN_COUNT, n_k), (MEAN_COUNT, case["y"].shape[1]), (NO_TWO, 0.5)):
        if all(close(g, factor * w) for g, w in zip(got, want)):
            return mistake
    if close(got[1], want[1]):
        active = _mlp_case(np.random.default_rng(0), 5, 3, 4, 2, active=True)
        active_got = call(
            "mlp_grads on a batch where every ReLU is active",
            lambda: _mlp_answer(answer, active, ""),
        )
        if all(close(g, w) for g, w in zip(active_got, _mlp_gradients(active))):
            return RELU_MASK
    return None


@exercise(
    "04.mlp_grads", "mlp_grads(x, y, w1, w2) -> (dw1, dw2) of mean((relu(x@w1)@w2 - y)**2)",
    mistakes=(MEAN_COUNT, NO_TWO, RELU_MASK, SHAPES),
    forbidden=DERIVATIVES,
)
def check_mlp_grads(answer) -> str:
    rng = np.random.default_rng(41)
    sizes = [(256, 2, 16, 1), (1, 3, 4, 1), (6, 2, 5, 3), (10, 4, 1, 2)]
    for count, (n, d, h, k) in enumerate(sizes):
        case = _mlp_case(rng, n, d, h, k)
        label = f"mlp_grads for N={n}, D={d}, H={h}, K={k}"
        got = _mlp_answer(answer, case, label, LAYOUTS[count % len(LAYOUTS)])
        want = _mlp_gradients(case)
        for name, g, w in zip(("dw1", "dw2"), got, want):
            if not close(g, w, rtol=1e-7, atol=1e-10):
                raise Wrong(
                    f"{label}: {name} {mismatch(g, w)}",
                    _mlp_mistake(answer, got, want, case, n * k),
                )
    return (
        f"agrees with cl.grad on {len(sizes)} networks: one row, several outputs, one hidden unit"
    )
