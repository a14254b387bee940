"""Notebook 04: gradients written by hand in NumPy.

``04.softmax_ce_grad`` is checked against central differences of the mean cross-entropy
(computed stably), on logits up to ±1e3; ``04.mlp_grads`` against ``cl.grad`` of the
notebook's two-layer network, on random sizes; ``04.norm_backward`` against ``cl.grad`` of
``cl.layer_norm`` and ``cl.rms_norm`` on batched, non-contiguous, nearly constant and large
inputs.
"""

from __future__ import annotations

import numpy as np

from .. import constant, grad, layer_norm, mean, relu, rms_norm, variable
from .. import sum as total
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
    "softmax(x) = softmax(x − max(x)). Each row its own: logits.max(axis=-1, keepdims=True), "
    "not the whole array's max, under which a row far below it is exp(-2000) = 0 everywhere "
    "(0/0 is NaN).",
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
WRITES_A_COPY = Mistake(
    "writes-a-copy",
    "your answer is right on row-major logits but not on these: p.reshape(-1) and p.ravel() "
    "return a COPY when p is not row-major (column-major, or a strided view), so a write "
    "through them is lost. Index the 2-D array itself: p[np.arange(N), targets] -= 1.",
)
EVERY_ROW = Mistake(
    "every-row-every-target",
    "p[:, t] -= 1 subtracts 1 in EVERY row at every target column; each row has its own "
    "target: p[np.arange(N), t] -= 1 pairs row i with t[i].",
)
BY_CLASSES = Mistake(
    "divides-by-classes",
    "the mean is over the N rows of the batch, not over the C classes: divide by N = "
    "len(targets) (logits.shape[0]), not by logits.shape[1].",
)
_LAYOUT_NAMES = {"C": "", "F": " (column-major logits)",
                 "strided": " (strided logits: every other column of a wider array)"}  # fmt: skip
CHANGES_INPUT = Mistake(
    "changes-input",
    "your function changed the logits it was given (an in-place -= or /=): work on a copy, or "
    "write x = logits - logits.max(...) (a new array).",
)
KEEPS_DTYPE = Mistake(
    "keeps-dtype",
    "the gradient has the logits' dtype: float32 logits give a float32 gradient (a framework "
    "trains in float32, and twice the memory for a float64 copy is not free). Mixing in a "
    "float64 array upcasts: np.eye(C)[targets] and np.zeros((N, C)) are float64, so build the "
    "one-hot with dtype=logits.dtype, or subtract 1 in place: p[np.arange(N), targets] -= 1.",
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
    every_row = np.zeros_like(logits)
    every_row[:, targets] = 1
    down_columns = np.exp(logits - logits.max(axis=0)) / np.exp(logits - logits.max(axis=0)).sum(
        axis=0
    )
    wrong = [
        (NO_MEAN, lambda: n * fd),
        (SIGN, lambda: -fd),
        (NO_ONE_HOT, lambda: fd + one_hot / n),
        (SOFTMAX_AXIS, lambda: (down_columns - one_hot) / n),
        (EVERY_ROW, lambda: fd + (one_hot - every_row) / n),
        (BY_CLASSES, lambda: n * fd / logits.shape[1]),
    ]
    return first_match(got, wrong, lambda a, b: close(a, b, rtol=1e-5, atol=1e-7))


def _right_when_row_major(answer, label, logits, targets, fd, atol) -> bool:
    """Whether the answer gets the same logits right when they are row-major (it failed on
    another layout: a write through a copy that reshape or ravel made)."""
    try:
        got = call(label + " on row-major logits", answer, laid_out(logits, "C"), targets.copy())
    except Wrong:
        return False
    return isinstance(got, np.ndarray) and close(got, fd, rtol=1e-5, atol=atol)


@exercise(
    "04.softmax_ce_grad",
    "softmax_ce_grad(logits, targets) -> ndarray: ∂ mean CE / ∂ logits, in the logits' dtype",
    mistakes=(NO_MEAN, SIGN, UNSTABLE, NO_ONE_HOT, SOFTMAX_AXIS, CHANGES_INPUT, WRITES_A_COPY,
              EVERY_ROW, BY_CLASSES, KEEPS_DTYPE),  # fmt: skip
    forbidden=DERIVATIVES,
)
def check_softmax_ce_grad(answer) -> str:
    rng = np.random.default_rng(40)
    f64, f32 = np.float64, np.float32
    cases = [
        (4, 5, 1.0, f64),
        (1, 3, 1.0, f64),
        (1, 1, 1.0, f64),
        (8, 10, 3.0, f64),
        (3, 2, 1e3, f64),
        (5, 4, -1e3, f64),
        (2, 6, 1e3, f64),
        (6, 7, 3.0, f32),
    ]
    for count, (n, c, scale, dtype) in enumerate(cases):
        logits = (scale * rng.standard_normal((n, c))).astype(dtype)
        targets = rng.integers(0, c, n).astype(np.int64 if n % 2 else np.int32)
        layout = LAYOUTS[count % len(LAYOUTS)]
        label = (
            f"softmax_ce_grad(logits, targets) for {n} rows, {c} classes, {dtype.__name__} "
            f"logits of scale {scale:g}{_LAYOUT_NAMES[layout]}"
        )
        given = laid_out(logits, layout)
        got = call(label, answer, given, targets.copy(), changed=CHANGES_INPUT)
        array = isinstance(got, np.ndarray)
        kind = f"an array of shape {got.shape}" if array else type(got).__name__
        require(
            array and got.shape == logits.shape,
            f"{label} returned {kind}; it must return an array of the logits' shape {logits.shape}",
        )
        fd = _finite_differences(logits.astype(f64), targets)  # the oracle, in float64
        atol = 1e-7 if dtype is f64 else 1e-6  # float32 keeps about 7 digits
        if not close(got, fd, rtol=1e-5, atol=atol):
            mistake = _softmax_ce_mistake(got, logits, targets, fd)
            if layout != "C" and _right_when_row_major(answer, label, logits, targets, fd, atol):
                mistake = WRITES_A_COPY
            raise Wrong(f"{label} {mismatch(got, fd)} (central differences of the loss)", mistake)
        require(
            got.dtype == logits.dtype,
            f"{label} returned a {got.dtype} array; it must keep the logits' dtype {logits.dtype}",
            KEEPS_DTYPE,
        )
    return (
        f"matches central differences of the mean cross-entropy on {len(cases)} batches: "
        "one row, one class, logits of ±1e3, float32 logits"
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
    # a factor of 1 (N·K or K is 1) is the right answer, not a mistake
    for mistake, factor in ((MEAN_COUNT, n_k), (MEAN_COUNT, case["y"].shape[1]), (NO_TWO, 0.5)):
        if factor != 1 and all(close(g, factor * w) for g, w in zip(got, want)):
            return mistake
    if close(got[1], want[1]) and not close(got[0], want[0]):  # dw1 wrong beyond a hair
        active = _mlp_case(np.random.default_rng(0), 5, 3, 4, 2, active=True)
        label = "mlp_grads on a batch where every ReLU is active"
        active_got = call(label, lambda: _mlp_answer(answer, active, label))
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


# -- norm_backward ----------------------------------------------------------------------------
NO_MEAN_TERM = Mistake(
    "no-mean-term",
    "layer norm subtracts the row's mean, and every x_j moves that mean: dx loses the term "
    "−mean(g) of each row (g = dy·gamma), dx = r·(g − mean(g) − x̂·mean(g·x̂)).",
)
NO_VARIANCE_TERM = Mistake(
    "no-variance-term",
    "every x_j also moves the row's variance (or mean square), hence r = 1/sqrt(var + ε): dx "
    "has the term −x̂·mean(g·x̂) (g = dy·gamma, x̂ the normalised row).",
)
NOT_SUMMED = Mistake(
    "not-summed-over-rows",
    "gamma and beta are shared by every row (every leading index): their gradients add up the "
    "contributions of all rows, shape (n,): sum dy·x̂ and dy over every axis but the last.",
)
EPS_OUTSIDE_ROOT = Mistake(
    "eps-outside-root",
    "ε goes inside the root, r = 1/sqrt(var + ε), both in the forward pass and in its "
    "derivative dr/dvar = −r³/2; it matters for rows of (nearly) equal values.",
)
UNBIASED_VARIANCE = Mistake(
    "unbiased-variance",
    "the variance in a norm layer divides by n (the row's size), not n − 1: np.var's default, "
    "or mean((x − mean)²).",
)
RMS_AS_LAYER = Mistake(
    "rms-as-layer",
    "RMS norm does not subtract the mean: x̂ = x·r with r = 1/sqrt(mean(x²) + ε), so its dx is "
    "r·(g − x̂·mean(g·x̂)), without layer norm's −mean(g) term.",
)
NO_GAMMA_IN_DX = Mistake(
    "no-gamma-in-dx",
    "the output is gamma·x̂ (+ beta): the gradient that reaches x̂ is dy·gamma, not dy.",
)
NORM_KINDS = ("layer", "rms")


def _numpy_norm_grads(kind, dy, x, gamma, eps, *, centre=None, mean_term=True,
                      variance_term=True, eps_outside=False, exact_dr=True, ddof=0,
                      dvar_ddof=None, gamma_in_dx=True, rows=None) -> dict:  # fmt: skip
    """The gradients of sum(dy · norm(x)) in closed form, with one mistake switched on: the
    mistakes' results (the right ones come from ``cl.grad``). ``eps_outside``: r = 1/(sqrt(var)
    + ε), differentiated as such, or (``exact_dr=False``) put into the right closed form,
    whose dr/dvar = −r³/2 holds only for ε inside the root. ``ddof``: the variance divided by
    n − ddof, differentiated as such, or with ``dvar_ddof=0`` put into the right closed form
    (np.var(ddof=1) in r only). ``rows``: the axes gamma's and beta's gradients are summed
    over (all but the last when None)."""
    centre = kind == "layer" if centre is None else centre
    n = x.shape[-1]
    xc = x - x.mean(axis=-1, keepdims=True) if centre else x
    var = (xc * xc).sum(axis=-1, keepdims=True) / (n - ddof)
    if eps_outside:
        r = 1 / (np.sqrt(var) + eps)
        dr = -r * r / (2 * np.sqrt(var)) if exact_dr else -(r**3) / 2
    else:
        r = 1 / np.sqrt(var + eps)
        dr = -(r**3) / 2
    g = dy * gamma if gamma_in_dx else dy
    dxc = r * g
    if variance_term:
        dvar_ddof = ddof if dvar_ddof is None else dvar_ddof
        dxc = dxc + 2 * dr / (n - dvar_ddof) * xc * (g * xc).sum(axis=-1, keepdims=True)
    dx = dxc - dxc.mean(axis=-1, keepdims=True) if centre and mean_term else dxc
    rows = tuple(range(x.ndim - 1)) if rows is None else rows
    grads = {"x": dx, "gamma": (dy * xc * r).sum(axis=rows)}
    if kind == "layer":
        grads["beta"] = dy.sum(axis=rows)
    return grads


def _oracle_norm_grads(kind, dy, x, gamma, eps) -> dict:
    """``cl.grad`` of sum(dy · norm(x)) with respect to x, gamma (and beta), on the host."""
    nodes = {"x": variable("x", x.shape), "gamma": variable("gamma", gamma.shape)}
    if kind == "layer":
        nodes["beta"] = variable("beta", gamma.shape)
        out = layer_norm(nodes["x"], nodes["gamma"], nodes["beta"], eps)
    else:
        out = rms_norm(nodes["x"], nodes["gamma"], eps)
    loss = total(out * constant(dy))
    values = {"x": x, "gamma": gamma, "beta": np.zeros_like(gamma)}
    grads = run_graph(grad(loss, list(nodes.values())), {v: values[k] for k, v in nodes.items()})
    return {name: to_numpy(g) for name, g in zip(nodes, grads)}


def _norm_grads_mistake(kind, name: str, got: dict, dy, x, gamma, eps,
                        close_enough) -> Mistake | None:  # fmt: skip
    """The mistake whose gradient of ``name`` (the first one wrong) is the answer's."""
    variants = [
        (NO_MEAN_TERM, dict(mean_term=False)),
        (NO_VARIANCE_TERM, dict(variance_term=False)),
        (EPS_OUTSIDE_ROOT, dict(eps_outside=True)),
        (EPS_OUTSIDE_ROOT, dict(eps_outside=True, exact_dr=False)),
        (UNBIASED_VARIANCE, dict(ddof=1)),
        (UNBIASED_VARIANCE, dict(ddof=1, dvar_ddof=0)),
        (RMS_AS_LAYER, dict(centre=True)),
        (NO_GAMMA_IN_DX, dict(gamma_in_dx=False)),
        (NOT_SUMMED, dict(rows=())),
        (NOT_SUMMED, dict(rows=(0,))),  # over the first axis only: the batch, not the tokens
    ]
    # RMS norm has no mean term to forget; layer norm cannot be treated like itself
    not_for_kind = NO_MEAN_TERM if kind == "rms" else RMS_AS_LAYER
    variants = [(m, k) for m, k in variants if m is not not_for_kind]

    def same(a, b):
        return name in b and close_enough(a[name], b[name])

    wrong = [(m, lambda k=k: _numpy_norm_grads(kind, dy, x, gamma, eps, **k)) for m, k in variants]
    return first_match(got, wrong, same)


def _strided(rng, shape: tuple, scale: float, offset: float) -> np.ndarray:
    """Random values of ``shape``, as a view that is not contiguous (transposed, or every
    other element of a larger array)."""
    if len(shape) > 1 and rng.random() < 0.5:
        return (offset + scale * rng.standard_normal(shape[::-1])).T
    wide = offset + scale * rng.standard_normal((*shape[:-1], 2 * shape[-1]))
    return wide[..., ::2]


def _norm_cases(rng) -> list[tuple]:
    """(kind, shape, eps, scale, offset): batched leading axes, one row, rows of nearly
    equal values where ε matters, large magnitudes."""
    cases = []
    for kind in NORM_KINDS:
        cases += [
            (kind, (4, 8), 1e-5, 1.0, 0.0),
            (kind, (2, 3, 6), 1e-5, 1.0, 0.5),
            (kind, (5,), 1e-5, 1.0, 0.0),
            (kind, (3, 4), 1e-2, 1e-3, 2.0 if kind == "layer" else 0.0),
            (kind, (2, 2, 2, 5), 1e-5, 1e4, 0.0),
        ]
    return cases


def _check_norm_case(answer, rng, kind, shape, eps, scale, offset) -> None:
    x = _strided(rng, shape, scale, offset)
    dy = _strided(rng, shape, 1.0, 0.0)
    gamma = 1 + rng.standard_normal(shape[-1])
    label = f'norm_backward("{kind}", dy, x, gamma, {eps:g}) for x of shape {shape}'
    if scale != 1 or offset:
        label += f" (values {offset:g} ± {scale:g})"
    got = call(label, answer, kind, dy, x, gamma, eps)
    want = _oracle_norm_grads(kind, dy, x, gamma, eps)
    keys = f"keys {sorted(got)}" if isinstance(got, dict) else type(got).__name__
    require(
        isinstance(got, dict) and sorted(got) == sorted(want),
        f"{label} returned {keys}; it must return a dict with the keys {sorted(want)}",
    )
    wrong_shapes = [name for name in want if np.shape(got[name]) != want[name].shape]
    scale_of = {name: float(np.abs(w).max()) for name, w in want.items()}

    def close_enough(a, b, name=None):
        size = max(scale_of.values()) if name is None else scale_of[name]
        return close(a, b, rtol=1e-6, atol=1e-9 * size)

    mistake_of = lambda name: _norm_grads_mistake(  # noqa: E731
        kind, name, got, dy, x, gamma, eps, close_enough)
    if wrong_shapes:
        name = wrong_shapes[0]
        raise Wrong(
            f"{label}: the gradient of {name} has shape {np.shape(got[name])}, expected "
            f"{want[name].shape} (the shape of {name})",
            mistake_of(name),
        )
    for name in want:
        require(
            type(got[name]) is np.ndarray,
            f"{label}: the gradient of {name} is a {type(got[name]).__name__}; it must be a "
            "NumPy array",
        )
        if not close_enough(got[name], want[name], name):
            raise Wrong(
                f"{label}: the gradient of {name} {mismatch(got[name], want[name])} (cl.grad)",
                mistake_of(name),
            )


@exercise(
    "04.norm_backward",
    'norm_backward(kind, dy, x, gamma, eps) -> {"x": dx, "gamma": dgamma, "beta": dbeta}: '
    'the backward pass of layer norm ("layer") or RMS norm ("rms", no beta) over the last axis',
    mistakes=(NO_MEAN_TERM, NO_VARIANCE_TERM, NOT_SUMMED, EPS_OUTSIDE_ROOT, UNBIASED_VARIANCE,
              RMS_AS_LAYER, NO_GAMMA_IN_DX),  # fmt: skip
    points=5.0,
    forbidden=(  # the engine's derivatives, and RMS norm's hand-written ones
        *DERIVATIVES,
        "course_lib.ops.norms.RMSNorm.gradient",
        "course_lib.ops.norms._RMSNormFamily",  # making RMSNorm's adjoint ops
        "course_lib.ops.norms.RMSNormGradX",
        "course_lib.ops.norms.RMSNormGradW",
    ),
)
def check_norm_backward(answer) -> str:
    rng = np.random.default_rng(42)
    cases = _norm_cases(rng)
    for case in cases:
        _check_norm_case(answer, rng, *case)
    return (
        f"agrees with cl.grad on {len(cases)} inputs for layer and RMS norm: batched leading "
        "axes, one row, transposed and strided inputs, rows where ε matters, values of 1e4"
    )
