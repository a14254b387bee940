"""Notebook 02: the central difference, and dual numbers checked against ``cl.jvp``.

``02.central_difference`` is checked on functions whose central difference has a closed form
(a cubic: f'(x) + f'''(x)·ε²/6; sin: cos(x)·sin(ε)/ε). ``02.dual`` first runs one probe per
rule (where a wrong rule is recognised by its numbers), then random compositions of every
operation, mixed with plain floats, against the tangents ``cl.jvp`` builds. ``02.jvp_rules``,
the assignment, has the student write every op family's tangent in NumPy (:mod:`.op_rules`
makes the cases), compared with ``cl.jvp``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from .. import exp as cl_exp
from .. import jvp, variable
from .. import log as cl_log
from .. import sin as cl_sin
from .core import (
    DERIVATIVES,
    FINITE_DIFFERENCES,
    Mistake,
    Wrong,
    as_float,
    call,
    exercise,
    require,
    run_graph,
    show,
)
from .op_rules import (
    LOG_SOFTMAX_EXP,
    LOG_SOFTMAX_TRANSPOSED,
    MAX_TIES,
    MEAN_COUNT,
    NAIVE_SOFTMAX,
    OPS,
    REDUCTIONS,
    ROW_SUM_NOT_KEPT,
    SOFTMAX_DIAGONAL,
    SOFTMAX_TERM,
    Case,
    as_array,
    call_rule,
    cases,
    compare,
    engine_jvp,
    first_maximum,
    library_rules,
    naive_softmax,
    row_errors,
    row_sum,
    scattered,
    softmax_candidates,
    tie_weights,
)

FORWARD = Mistake(
    "forward-difference",
    "that is a one-sided difference, forward (f(x+ε) − f(x))/ε or backward (f(x) − f(x−ε))/ε, "
    "whose error is O(ε). The central difference evaluates on both sides: "
    "(f(x+ε) − f(x−ε)) / (2ε), error O(ε²).",
)
NO_HALF = Mistake(
    "no-half",
    "the two points x − ε and x + ε are 2ε apart: divide by 2ε, not ε.",
)
SIGN = Mistake("sign", "the difference is the wrong way round: f(x+ε) − f(x−ε).")
PRECEDENCE = Mistake(
    "precedence",
    "`... / 2 * eps` divides by 2 and then MULTIPLIES by eps (/ and * go left to right): "
    "write `/ (2 * eps)`.",
)
HALF_STEPS = Mistake(
    "half-steps",
    "(f(x+ε/2) − f(x−ε/2)) / ε is the central difference of step ε/2, not ε: its error term is "
    "4 times smaller than the one asked for. Evaluate at x ± ε and divide by 2ε.",
)
FIXED_EPS = Mistake(
    "fixed-eps",
    "the result does not depend on the ε passed in: use the argument eps, not a constant of "
    "your own.",
)


def _cubic(a, b, c):
    """f(x) = a x³ + b x² + c x, its exact central difference, and its forward difference."""
    f = lambda x: ((a * x + b) * x + c) * x  # noqa: E731
    central = lambda x, e: 3 * a * x * x + 2 * b * x + c + a * e * e  # noqa: E731
    forward = lambda x, e: central(x, e) + (3 * a * x + b) * e  # noqa: E731
    return f, central, forward


def _difference_cases(rng) -> list[tuple[str, Callable, Callable, Callable | None, float, float]]:
    cases = []
    for name, coefficients in [
        ("x³", (1, 0, 0)),
        ("2x³ − x² + 3x", (2, -1, 3)),
        ("−0.5x³ + 4x² + x", (-0.5, 4, 1)),
    ]:
        f, central, forward = _cubic(*coefficients)
        for x, e in [(1.5, 0.1), (-2.0, 1e-3), (float(rng.uniform(-3, 3)), 1e-2)]:
            cases.append((name, f, central, forward, x, e))
    cases.append(("sin", math.sin, lambda x, e: math.cos(x) * math.sin(e) / e, None, 0.7, 0.25))
    cases.append(("exp", math.exp, lambda x, e: math.exp(x) * math.sinh(e) / e, None, -1.0, 0.5))
    return cases


@exercise(
    "02.central_difference", "central_difference(f, x, eps) -> float: (f(x+ε) − f(x−ε)) / 2ε",
    mistakes=(FORWARD, NO_HALF, SIGN, PRECEDENCE, HALF_STEPS, FIXED_EPS),
    forbidden=FINITE_DIFFERENCES,
)
def check_central_difference(answer) -> str:
    cases = _difference_cases(np.random.default_rng(20))
    for name, f, central, forward, x, e in cases:
        label = f"central_difference({name}, x={x:g}, eps={e:g})"
        got = as_float(label, call(label, answer, f, x, e))
        want = central(x, e)
        if not _same(got, want):
            halved = as_float(label, call(label, answer, f, x, e / 2))
            wrong = [(NO_HALF, 2 * want), (SIGN, -want), (PRECEDENCE, want * e * e),
                     (HALF_STEPS, central(x, e / 2))]  # fmt: skip
            # the backward difference: the central one is the mean of the forward and backward
            one_sided = [forward(x, e), 2 * want - forward(x, e)] if forward else []
            wrong += [(FORWARD, value) for value in one_sided]
            wrong += [(FIXED_EPS, got)] if _same(halved, got) else []
            mistake = next((m for m, value in wrong if _same(got, value)), None)
            raise Wrong(f"{label} returned {_numbers(got, want)}", mistake)
    return (
        f"exact on {len(cases)} cases: cubics (the ε² error term too), sin and exp, "
        "ε from 1e-3 to 0.5"
    )


def _same(got: float, want: float) -> bool:
    return abs(got - want) <= 1e-9 * (1 + abs(want))


def _numbers(got: float, want: float) -> str:
    """``6.76, expected 6.77``; all 17 digits where 6 would show the same number (a result
    computed in float32 is right to about 7 digits only)."""
    if show(got) != show(want):
        return f"{show(got)}, expected {show(want)}"
    return f"{got:.17g}, expected {want:.17g} (equal in their first 6 digits only)"


# -- dual numbers -----------------------------------------------------------------------------
PRODUCT_RULE = Mistake(
    "product-rule",
    "the product rule: (u·w)˙ = u̇·w + u·ẇ (each factor's tangent times the other's value).",
)
QUOTIENT_RULE = Mistake(
    "quotient-rule",
    "the quotient rule: (u/w)˙ = (u̇·w − u·ẇ) / w².",
)
CHAIN_RULE = Mistake(
    "chain-rule",
    "the chain rule multiplies by the input's tangent: sin(u)˙ = cos(u)·u̇, exp(u)˙ = exp(u)·u̇, "
    "log(u)˙ = u̇ / u.",
)
FLOAT_TANGENT = Mistake(
    "float-tangent",
    "a plain float is a constant: as a Dual it is Dual(c, 0.0), with tangent 0.",
)
REFLECTED = Mistake(
    "reflected",
    "with a float on the left, Python calls the Dual's reflected method: 2.0 + u calls "
    "u.__radd__(2.0), 2.0 - u calls u.__rsub__(2.0) (which is 2.0 − u, not u − 2.0), 2.0 / u "
    "calls u.__rtruediv__(2.0). Define __radd__, __rsub__, __rmul__ and __rtruediv__.",
)
NO_LIFT = Mistake(
    "floats-not-lifted",
    "mixing with plain floats: turn a float c into Dual(c, 0.0) before using .val and .dot.",
)
IN_PLACE = Mistake(
    "in-place",
    "an operation changed its operand: return a NEW Dual; never assign to self.val or self.dot.",
)

_U, _W = (1.5, 0.7), (-0.8, 1.3)  # (value, tangent) of the two probe inputs


def _probes() -> list[tuple[str, Callable, list[tuple[Mistake, Callable]]]]:
    """(expression, f(m, u, w) with m the module of sin/exp/log, wrong (val, dot) of mistakes)."""
    (u, du), (w, dw) = _U, _W
    return [
        ("u + w", lambda m, a, b: a + b, []),
        (
            "u * w",
            lambda m, a, b: a * b,
            [(PRODUCT_RULE, lambda: (u * w, du * dw)), (PRODUCT_RULE, lambda: (u * w, du * w))],
        ),
        ("u - w", lambda m, a, b: a - b, []),
        (
            "u / w",
            lambda m, a, b: a / b,
            [
                (QUOTIENT_RULE, lambda: (u / w, (du * w + u * dw) / w**2)),
                (QUOTIENT_RULE, lambda: (u / w, (du * w - u * dw) / w)),
                (QUOTIENT_RULE, lambda: (u / w, du / dw)),
                (QUOTIENT_RULE, lambda: (u / w, (u * dw - du * w) / w**2)),
            ],
        ),
        ("u + 2.0", lambda m, a, b: a + 2.0, [(FLOAT_TANGENT, lambda: (u + 2, du + 1))]),
        ("3.0 * u", lambda m, a, b: 3.0 * a, [(FLOAT_TANGENT, lambda: (3 * u, 3 * du + u))]),
        ("2.0 + u", lambda m, a, b: 2.0 + a, []),
        ("2.0 - u", lambda m, a, b: 2.0 - a, [(REFLECTED, lambda: (u - 2, du))]),
        ("u / 4.0", lambda m, a, b: a / 4.0, []),
        ("4.0 / u", lambda m, a, b: 4.0 / a, [(REFLECTED, lambda: (u / 4, du / 4))]),
        ("sin(u)", lambda m, a, b: m.sin(a), [(CHAIN_RULE, lambda: (math.sin(u), math.cos(u)))]),
        ("exp(u)", lambda m, a, b: m.exp(a), [(CHAIN_RULE, lambda: (math.exp(u), math.exp(u)))]),
        ("log(u)", lambda m, a, b: m.log(a), [(CHAIN_RULE, lambda: (math.log(u), 1 / u))]),
    ]


class _Library:
    """course_lib's sin/exp/log, so one expression builds a graph or computes with Duals."""

    sin, exp, log = staticmethod(cl_sin), staticmethod(cl_exp), staticmethod(cl_log)


def _oracle(f: Callable, u: tuple, w: tuple) -> tuple[float, float]:
    """(value, tangent) of f at u, w from a graph and ``cl.jvp``."""
    a, b = variable("u", shape=()), variable("w", shape=())
    out = f(_Library, a, b)
    value, tangent = run_graph([out, jvp(out, {a: u[1], b: w[1]})], {a: u[0], b: w[0]})
    return float(value), float(tangent)


class _Answer:
    """The student's namespace: a module, a SimpleNamespace, any object or a dict."""

    def __init__(self, answer):
        get = (
            answer.get if isinstance(answer, Mapping) else lambda name: getattr(answer, name, None)
        )
        for name in ("Dual", "sin", "exp", "log"):
            require(
                callable(get(name)),
                f"the answer has no {name}: pass an object with the attributes Dual, sin, exp and "
                "log, e.g. SimpleNamespace(Dual=Dual, sin=sin, exp=exp, log=log)",
            )
        self.Dual, self.sin, self.exp, self.log = (get(n) for n in ("Dual", "sin", "exp", "log"))

    def make(self, pair: tuple) -> object:
        return call(f"Dual{pair}", self.Dual, *pair, own=True)

    def read(self, label: str, dual) -> tuple[float, float]:
        require(
            hasattr(dual, "val") and hasattr(dual, "dot"),
            f"{label} returned {type(dual).__name__} {show(dual)}; it must return a Dual "
            "(with .val and .dot)",
        )
        return as_float(f"{label}.val", dual.val), as_float(f"{label}.dot", dual.dot)


_ERRORS = [
    (TypeError, "unsupported operand", REFLECTED),
    (AttributeError, "'float' object", NO_LIFT),
    (AttributeError, "'int' object", NO_LIFT),
]


def _close(got: tuple, want: tuple) -> bool:
    return all(math.isclose(g, v, rel_tol=1e-9, abs_tol=1e-12) for g, v in zip(got, want))


def _run_probes(ns: _Answer) -> None:
    for text, f, wrong in _probes():
        a, b = ns.make(_U), ns.make(_W)
        label = f"{text} with u = Dual{_U}" + (f", w = Dual{_W}" if "w" in text else "")
        got = ns.read(label, call(label, f, ns, a, b, errors=_ERRORS, own=True))
        require(
            ns.read("u", a) == _U and ns.read("w", b) == _W, f"{label} changed u or w", IN_PLACE
        )
        want = _oracle(f, _U, _W)
        if not _close(got, want):
            mistake = next((m for m, value in wrong if _close(got, value())), None)
            raise Wrong(
                f"{label} gives (val, dot) = ({show(got[0])}, {show(got[1])}), expected "
                f"({show(want[0])}, {show(want[1])})",
                mistake,
            )


def _random_expression(rng, depth: int) -> tuple[str, Callable]:
    """Text and f(m, u, w) of a random expression that stays in every function's domain."""
    if depth == 0:
        return [("u", lambda m, a, b: a), ("w", lambda m, a, b: b)][int(rng.integers(2))]
    (s, f), (t, g) = (
        _random_expression(rng, depth - 1),
        _random_expression(rng, int(rng.integers(depth))),
    )
    c = round(float(rng.uniform(0.5, 2)), 2)
    forms = [
        (f"({s} + {t})", lambda m, a, b: f(m, a, b) + g(m, a, b)),
        (f"({s} - {t})", lambda m, a, b: f(m, a, b) - g(m, a, b)),
        (f"({s} * {t})", lambda m, a, b: f(m, a, b) * g(m, a, b)),
        (f"({s} / ({t}*{t} + {c}))", lambda m, a, b: f(m, a, b) / (g(m, a, b) * g(m, a, b) + c)),
        (f"sin({s})", lambda m, a, b: m.sin(f(m, a, b))),
        (f"exp(sin({s}))", lambda m, a, b: m.exp(m.sin(f(m, a, b)))),
        (f"log({s}*{s} + {c})", lambda m, a, b: m.log(f(m, a, b) * f(m, a, b) + c)),
        (f"({c} - {s})", lambda m, a, b: c - f(m, a, b)),
        (f"({c} / ({s}*{s} + 1.0))", lambda m, a, b: c / (f(m, a, b) * f(m, a, b) + 1.0)),
    ]
    return forms[int(rng.integers(len(forms)))]


@exercise(
    "02.dual", "Dual (+, -, *, / with floats on either side) and sin, exp, log, against cl.jvp",
    mistakes=(PRODUCT_RULE, QUOTIENT_RULE, CHAIN_RULE, FLOAT_TANGENT, REFLECTED, NO_LIFT, IN_PLACE),
    function=False,
    forbidden=("course_lib.autodiff.dual.Dual", *DERIVATIVES),
)
def check_dual(answer) -> str:
    ns = _Answer(answer)
    _run_probes(ns)
    rng = np.random.default_rng(21)
    count = 60
    for _ in range(count):
        text, f = _random_expression(rng, int(rng.integers(1, 5)))
        u, w = tuple(rng.uniform(-2, 2, 2)), tuple(rng.uniform(-2, 2, 2))
        label = f"{text} at u = Dual({u[0]:.3f}, {u[1]:.3f}), w = Dual({w[0]:.3f}, {w[1]:.3f})"
        result = call(label, f, ns, ns.make(u), ns.make(w), errors=_ERRORS, own=True)
        got = ns.read(label, result)
        want = _oracle(f, u, w)
        require(
            _close(got, want),
            f"{label} gives (val, dot) = ({show(got[0])}, {show(got[1])}); cl.jvp gives "
            f"({show(want[0])}, {show(want[1])})",
        )
    return (
        f"every rule right (floats on either side too), and {count} random compositions "
        "agree with cl.jvp"
    )


# -- jvp_rules: the assignment ------------------------------------------------------------------
MATMUL_TERM = Mistake(
    "matmul-one-term",
    "x @ y is a product, with the product rule's two terms: (x @ y)˙ = ẋ @ y + x @ ẏ.",
)
NOT_REDUCED = Mistake(
    "tangent-not-reduced",
    "a reduction's tangent has the OUTPUT's shape: reduce ẋ as the op reduces x (sum, mean "
    "over the same axis, with the same keepdims).",
)
MAX_OF_TANGENT = Mistake(
    "max-of-tangent",
    "max's tangent is not the max of the tangents: it is the tangent ẋ AT the position of the "
    "maximum of x (the mean over tied positions).",
)


def _jvp_candidates(case: Case, dots: tuple) -> list:
    """(mistake, a function computing its wrong output tangent)."""
    op, out = case.op, case.output
    if op in REDUCTIONS:
        (dx,) = dots
        axis, keep = case.attrs["axis"], case.attrs["keepdims"]
        wrong = []
        if op == "mean":
            wrong += [(MEAN_COUNT, lambda: np.sum(dx, axis, keepdims=keep)),
                      (MEAN_COUNT, lambda: np.sum(dx, axis, keepdims=keep) / dx.size)]  # fmt: skip
        if op == "max":
            tied = lambda weights: np.sum(dx * weights, axis, keepdims=keep)  # noqa: E731
            wrong += [(MAX_OF_TANGENT, lambda: np.max(dx, axis, keepdims=keep)),
                      (MAX_TIES, lambda: tied(tie_weights(case) > 0)),
                      (MAX_TIES, lambda: tied(first_maximum(case)))]  # fmt: skip
        return wrong
    if op == "softmax":
        return softmax_candidates(case, dots[0])
    if op == "log_softmax":
        (x,), (dx,) = case.inputs, dots
        return [(LOG_SOFTMAX_EXP, lambda: dx - row_sum(np.exp(x) * dx)),
                (LOG_SOFTMAX_EXP, lambda: dx - row_sum(out * dx)),
                (LOG_SOFTMAX_TRANSPOSED, lambda: dx - np.exp(out) * row_sum(dx)),
                (ROW_SUM_NOT_KEPT, lambda: dx - row_sum(np.exp(out) * dx, keep=False)),
                (NAIVE_SOFTMAX, lambda: dx - row_sum(naive_softmax(x) * dx))]  # fmt: skip
    (a, b), (da, db) = case.inputs, dots
    terms = {
        "mul": (PRODUCT_RULE, [lambda: da * b, lambda: a * db, lambda: da * db]),
        "div": (QUOTIENT_RULE, [lambda: (da * b + a * db) / b**2, lambda: (da * b - a * db) / b,
                                lambda: da / b, lambda: da / db,
                                lambda: (a * db - da * b) / b**2]),
        "matmul": (MATMUL_TERM, [lambda: da @ b, lambda: a @ db]),
    }  # fmt: skip
    mistake, wrong = terms.get(op, (None, []))
    return [(mistake, f) for f in wrong]


@exercise(
    "02.jvp_rules",
    "jvp_rule(op, inputs, output, tangents, axis=None, keepdims=False) -> ndarray: the output's "
    "tangent, in NumPy",
    mistakes=(PRODUCT_RULE, QUOTIENT_RULE, MATMUL_TERM, NOT_REDUCED, MEAN_COUNT, MAX_OF_TANGENT,
              MAX_TIES, SOFTMAX_TERM, SOFTMAX_DIAGONAL, ROW_SUM_NOT_KEPT, LOG_SOFTMAX_EXP,
              LOG_SOFTMAX_TRANSPOSED, NAIVE_SOFTMAX),  # fmt: skip
    points=5.0,
    forbidden=library_rules(),
)
def check_jvp_rules(answer) -> str:
    rng = np.random.default_rng(22)
    found = cases(rng)
    for case in found:
        dots = tuple(scattered(rng, rng.standard_normal(a.shape)) for a in case.inputs)
        want = engine_jvp(case, dots)
        label = case.label("jvp_rule")
        got = call_rule(answer, case, "jvp_rule", dots, errors=row_errors(case))
        what = f"{label}: the output's tangent"
        tangent = as_array(what, got, want.shape)
        unreduced = case.op in REDUCTIONS and tangent.shape == case.inputs[0].shape != want.shape
        require(not unreduced, f"{what} has the input's shape {tangent.shape}, expected "
                f"{want.shape}", NOT_REDUCED)  # fmt: skip
        compare(what, tangent, want, _jvp_candidates(case, dots))
    return (
        f"agrees with cl.jvp on {len(found)} cases of {len(OPS)} ops: broadcasting, batched "
        "matmul, reductions over any axes, ties for max, softmax rows near ±1000, "
        "non-contiguous and 0-d arrays"
    )
