"""What notebooks 02 and 03's assignments share: the op families, their cases, the engine's
answer, and the mistakes both modes can make.

In ``02.jvp_rules`` and ``03.vjp_rules`` the student writes, in plain NumPy, one function
``rule(op, inputs, output, v, axis=None, keepdims=False)``: ``op`` one of :data:`OPS`,
``inputs`` a tuple of arrays, ``output`` the op's value on them, ``v`` the inputs' tangents
(a tuple, forward mode) or the output's adjoint (reverse mode); ``axis`` and ``keepdims`` are
passed to the reductions only. The oracle is the engine itself: a graph of the same op,
differentiated with ``cl.jvp`` or ``cl.grad``. The cases broadcast (missing leading axes,
axes of length 1), include 0-d arrays, non-contiguous inputs, ties for ``max`` and softmax
rows near ±1000, where ``exp(x)`` overflows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import grad, jvp, variable
from .. import ops as library
from .core import (
    CHANGED_INPUT,
    DERIVATIVES,
    Mistake,
    Wrong,
    call,
    close,
    first_match,
    host,
    mismatch,
    require,
    run_graph,
    show,
)
from .strided_add import operand_shape

ELEMENTWISE = ("add", "sub", "mul", "div")
REDUCTIONS = ("sum", "mean", "max")
ALONG_ROWS = ("softmax", "log_softmax")  # over the last axis
OPS = (*ELEMENTWISE, "matmul", *REDUCTIONS, *ALONG_ROWS)

# -- mistakes both modes make -----------------------------------------------------------------
MEAN_COUNT = Mistake(
    "mean-count",
    "mean divides by the number of elements it averages: the product of x.shape[a] over the "
    "reduced axes a (all of x.size only when axis is None).",
)
MAX_TIES = Mistake(
    "max-ties",
    "elements tied for the maximum share it equally: with t ties each gets 1/t of the adjoint "
    "(reverse), and the tangent is the mean of the tied elements' tangents (forward).",
)
SOFTMAX_TERM = Mistake(
    "softmax-missing-term",
    "softmax's rule has two terms: y ⊙ (v − Σⱼ yⱼ·vⱼ), the sum along the last axis, with v the "
    "input tangent (forward) or the output adjoint (reverse), y the output.",
)
SOFTMAX_DIAGONAL = Mistake(
    "softmax-diagonal-only",
    "y ⊙ (1 − y) ⊙ v keeps only the diagonal of softmax's Jacobian, ∂yᵢ/∂xᵢ = yᵢ(1 − yᵢ): every "
    "yᵢ also moves with every other xⱼ of its row, ∂yᵢ/∂xⱼ = −yᵢyⱼ. All terms together: "
    "y ⊙ (v − Σⱼ yⱼ·vⱼ), the sum along the last axis.",
)
ROW_SUM_NOT_KEPT = Mistake(
    "row-sum-not-kept",
    "a sum along the last axis must keep that axis (keepdims=True) to broadcast back along its "
    "own row; without it NumPy lines the row sums up with the columns.",
)
LOG_SOFTMAX_EXP = Mistake(
    "log-softmax-exp",
    "log-softmax's rule needs the softmax, which is exp(output): exp of the log-softmax. exp(x) "
    "is not the softmax, and it overflows for x near 1000.",
)
LOG_SOFTMAX_TRANSPOSED = Mistake(
    "log-softmax-other-mode",
    "that is log-softmax's rule of the other mode: its Jacobian, ∂yᵢ/∂xⱼ = δᵢⱼ − pⱼ with "
    "p = exp(output), is not symmetric. Forward: v − Σⱼ pⱼ·vⱼ (one number per row, the same "
    "for every column); reverse: v̄ − p·Σⱼ v̄ⱼ.",
)

NAIVE_SOFTMAX = Mistake(
    "naive-softmax",
    "the softmax recomputed as exp(x) / Σ exp(x) overflows for x near 1000 (inf / inf is nan). "
    "The rule needs no exp of x: softmax's output y is given, and log-softmax's softmax is "
    "exp(output).",
)


# -- the cases ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One op applied to ``inputs`` (with ``attrs`` for a reduction); ``output`` its value."""

    op: str
    inputs: tuple
    attrs: dict
    output: np.ndarray

    def label(self, function: str) -> str:
        shapes = ", ".join(str(a.shape) for a in self.inputs)
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        return f'{function}("{self.op}", inputs of shapes {shapes}{attrs})'


def _apply(op: str, nodes: list, attrs: dict):
    return getattr(library, op)(*nodes, **attrs)


def _engine(op: str, inputs: tuple, attrs: dict):
    """The variables, the op's node on them and the feed of ``inputs``."""
    xs = [variable(f"x{k}", a.shape) for k, a in enumerate(inputs)]
    return xs, _apply(op, xs, attrs), dict(zip(xs, inputs))


def _array(value) -> np.ndarray:
    return np.asarray(host(value), dtype=float)


def make_case(op: str, inputs: tuple, **attrs) -> Case:
    _, out, feed = _engine(op, inputs, attrs)
    return Case(op, inputs, attrs, _array(run_graph([out], feed)[0]))


def engine_vjp(case: Case, adjoint: np.ndarray) -> list:
    """The inputs' adjoints the engine builds (``cl.grad`` seeded with ``adjoint``)."""
    xs, out, feed = _engine(case.op, case.inputs, case.attrs)
    seed = variable("adjoint", out.shape)
    return [_array(v) for v in run_graph(grad(out, xs, seed), {**feed, seed: adjoint})]


def engine_jvp(case: Case, tangents: tuple) -> np.ndarray:
    """The output's tangent the engine builds (``cl.jvp`` seeded with ``tangents``)."""
    xs, out, feed = _engine(case.op, case.inputs, case.attrs)
    dots = [variable(f"dx{k}", a.shape) for k, a in enumerate(tangents)]
    feed.update(zip(dots, tangents))
    return _array(run_graph([jvp(out, dict(zip(xs, dots)))], feed)[0])


def scattered(rng, value: np.ndarray) -> np.ndarray:
    """``value`` as a non-contiguous view: every other element of a larger array, often
    transposed (a 0-d array as it is)."""
    value = np.asarray(value, dtype=float)
    if value.ndim == 0:
        return value.copy()
    transpose = value.ndim > 1 and rng.random() < 0.5
    inner = value.T if transpose else value
    parent = rng.standard_normal((*inner.shape[:-1], 2 * inner.shape[-1]))
    parent[..., ::2] = inner
    view = parent[..., ::2]
    return view.T if transpose else view


def _normal(rng, shape) -> np.ndarray:
    return scattered(rng, rng.standard_normal(shape))


def _elementwise_cases(rng, op: str) -> list[Case]:
    fixed = [((2, 3), (2, 3)), ((3,), (2, 3)), ((2, 3), (2, 1)), ((4, 1, 3), (2, 1)),
             ((), (2, 2)), ((3, 3), ())]  # fmt: skip
    shapes = fixed + [
        (operand_shape(rng, s), operand_shape(rng, s))
        for s in (tuple(int(n) for n in rng.integers(1, 4, rng.integers(1, 4))) for _ in range(4))
    ]
    cases = []
    for x, y in shapes:
        right = _normal(rng, y)
        if op == "div":  # away from zero
            right = scattered(rng, np.sign(right + 1e-3) * (np.abs(right) + 0.5))
        cases.append(make_case(op, (_normal(rng, x), right)))
    return cases


def _matmul_cases(rng) -> list[Case]:
    shapes = [((3, 3), (3, 3)), ((2, 4), (4, 3)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 2)),
              ((2, 1, 3, 4), (5, 4, 2)), ((1, 2, 3), (4, 3, 2))]  # fmt: skip
    return [make_case("matmul", (_normal(rng, x), _normal(rng, y))) for x, y in shapes]


def _reduction_cases(rng, op: str) -> list[Case]:
    settings = [((3, 3), 1, False), ((3, 4), 0, False), ((3, 4), -1, True),
                ((2, 3, 4), (0, 2), False), ((2, 3, 4), 1, True), ((4,), None, False),
                ((2, 3), None, True), ((), None, False), ((2, 1, 3), (1, 2), False)]  # fmt: skip
    cases = []
    for shape, axis, keepdims in settings:
        x = rng.standard_normal(shape)
        if op == "max":  # small integers: many ties
            x = rng.integers(-2, 3, shape).astype(float)
        cases.append(make_case(op, (scattered(rng, x),), axis=axis, keepdims=keepdims))
    return cases


def _row_cases(rng, op: str) -> list[Case]:
    shapes = [(3, 3), (2, 5), (4,), (2, 3, 4), (3, 1)]
    cases = [make_case(op, (_normal(rng, s),)) for s in shapes]
    rows = rng.standard_normal((4, 5)) + np.array([[1000.0], [-1000.0], [999.0], [0.0]])
    return [*cases, make_case(op, (scattered(rng, rows),))]


def cases(rng) -> list[Case]:
    """Cases of every op, the ones that tell the mistakes apart first within each op."""
    found = []
    for op in ELEMENTWISE:
        found += _elementwise_cases(rng, op)
    found += _matmul_cases(rng)
    for op in REDUCTIONS:
        found += _reduction_cases(rng, op)
    for op in ALONG_ROWS:
        found += _row_cases(rng, op)
    return found


# -- helpers for the mistakes' results ----------------------------------------------------------
def axes_of(case: Case) -> tuple[int, ...]:
    """The axes the case's reduction reduces, as non-negative numbers."""
    ndim, axis = case.inputs[0].ndim, case.attrs["axis"]
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,))))


def expanded(case: Case, reduced: np.ndarray) -> np.ndarray:
    """A reduced array with its reduced axes put back (length 1) and broadcast to x's shape."""
    x = case.inputs[0]
    if not case.attrs["keepdims"]:
        reduced = np.expand_dims(reduced, axes_of(case))
    return np.broadcast_to(reduced, x.shape)


def count(case: Case) -> int:
    """The number of elements a reduction combines into each output element."""
    return int(np.prod([case.inputs[0].shape[a] for a in axes_of(case)]))


def tie_weights(case: Case) -> np.ndarray:
    """Where ``max`` sends its adjoint: 1/t to each of t tied maxima."""
    mask = (case.inputs[0] == expanded(case, case.output)).astype(float)
    return mask / np.sum(mask, axis=axes_of(case), keepdims=True)


def first_maximum(case: Case) -> np.ndarray:
    """1 at the first maximum (the one ``argmax`` finds over the reduced axes), 0 elsewhere."""
    x, axes = case.inputs[0], axes_of(case)
    last = tuple(range(x.ndim - len(axes), x.ndim))
    moved = np.moveaxis(x, axes, last)
    flat = moved.reshape(*moved.shape[: x.ndim - len(axes)], -1)
    one = np.zeros_like(flat)
    np.put_along_axis(one, np.argmax(flat, axis=-1)[..., None], 1.0, axis=-1)
    return np.moveaxis(one.reshape(moved.shape), last, axes)


def row_sum(v: np.ndarray, keep: bool = True) -> np.ndarray:
    return np.sum(v, axis=-1, keepdims=keep)


def naive_softmax(x: np.ndarray) -> np.ndarray:
    """exp(x) / Σ exp(x) along the last axis, unshifted: nan where exp overflows."""
    e = np.exp(x)
    return e / row_sum(e)


def softmax_candidates(case: Case, v: np.ndarray) -> list:
    """The wrong results of softmax's mistakes, the same in both modes (softmax's Jacobian is
    symmetric): ``v`` is the input tangent or the output adjoint."""
    y = case.output
    p = lambda: naive_softmax(case.inputs[0])  # noqa: E731
    return [(SOFTMAX_TERM, lambda: y * v), (SOFTMAX_TERM, lambda: y * (v - row_sum(v))),
            (SOFTMAX_DIAGONAL, lambda: y * (1 - y) * v),
            (ROW_SUM_NOT_KEPT, lambda: y * (v - row_sum(y * v, keep=False))),
            (NAIVE_SOFTMAX, lambda: p() * (v - row_sum(p() * v)))]  # fmt: skip


def row_errors(case: Case) -> list:
    """A row sum that lost its axis fails to broadcast (rows and columns of different lengths)."""
    return [(ValueError, "broadcast", ROW_SUM_NOT_KEPT)] if case.op in ALONG_ROWS else []


# -- calling the answer -------------------------------------------------------------------------
def call_rule(answer, case: Case, function: str, v, errors=()):
    """``answer(op, inputs, output, v, **attrs)`` for the case, refusing an answer that changes
    any array it was given (the inputs sit in a tuple, which :func:`call` does not look into)."""
    label = case.label(function)
    arrays = [*case.inputs, case.output, *(v if isinstance(v, tuple) else (v,))]
    before = [a.copy() for a in arrays]
    result = call(label, lambda: answer(case.op, case.inputs, case.output, v, **case.attrs),
                  errors=errors)  # fmt: skip
    for a, copy in zip(arrays, before):
        require(np.array_equal(a, copy, equal_nan=True), f"{label} changed an array it was given "
                "in place", CHANGED_INPUT)  # fmt: skip
    return result


def as_array(label: str, value, shape: tuple) -> np.ndarray:
    """The answer's array (a NumPy array or scalar), or :class:`Wrong` when it is not one."""
    number = isinstance(value, np.ndarray | np.generic | float | int)
    require(
        number and not isinstance(value, bool),
        f"{label} is {type(value).__name__} {show(value)}; return a NumPy array of shape {shape}",
    )
    return np.asarray(value, dtype=float)


def compare(label: str, got: np.ndarray, want: np.ndarray, candidates) -> None:
    """:class:`Wrong` unless ``got`` is ``want``, with the mistake whose result it is (not one
    whose result is, in this case, the right one: an answer off in the 8th digit is not it)."""
    if close(got, want, rtol=1e-9, atol=1e-12):
        return
    message = f"{label} {mismatch(got, want)}"
    if close(got, want, rtol=1e-5, atol=1e-8):
        message += " (equal to about 6 digits only: compute in float64, the inputs' dtype)"
    telling = lambda a, b: close(a, b) and not close(b, want, rtol=1e-9, atol=1e-12)  # noqa: E731
    raise Wrong(message, first_match(got, candidates, telling))


def library_rules() -> tuple[str, ...]:
    """What an answer must not call: the engine's own rules of the op families (forward and
    reverse), its differentiation algorithms, and the functions that unbroadcast or unreduce."""
    classes = ("elementwise.Add", "elementwise.Sub", "elementwise.Mul", "elementwise.Div",
               "linalg.MatMul", "reductions.Sum", "reductions.Mean", "reductions.Max",
               "nn.Softmax", "nn.LogSoftmax")  # fmt: skip
    return (
        *(f"course_lib.ops.{c}.{method}" for c in classes for method in ("gradient", "jvp")),
        *DERIVATIVES, "course_lib.ops.reductions.Unreduce", "course_lib.ops.broadcast.SumTo",
        "course_lib.ops.broadcast.unbroadcast", "course_lib.ops.broadcast.broadcast_tangent",
    )  # fmt: skip
