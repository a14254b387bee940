"""Review 9 of the checks of notebooks 01–04, as a grader: wrong answers a student would write
are refused with the hint that fits (not another mistake's), and the messages say what differs
where a six-digit display would show the same number twice."""

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from course_lib.exercises import verify


def _reference(exercise_id):
    return reference_answer(notebook_exercises()[exercise_id])


# -- 01.relu_cond -----------------------------------------------------------------------------
def test_relu_cond_with_a_wrong_threshold_is_not_told_its_branches_are_swapped():
    """``x > 1`` is right at 3 and -2 and wrong at 1e-300 (0 there, like swapped branches at
    that one point): the swapped-branches hint used to be given; the branches are in order."""
    verdict = verify("01.relu_cond", lambda x: cl.cond(x > 1.0, lambda: x, lambda: 0.0))
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake is None, verdict.message
    assert "x = 1e-300" in verdict.message


def test_relu_cond_with_swapped_branches_still_gets_the_hint():
    verdict = verify("01.relu_cond", lambda x: cl.cond(x > 0, lambda: 0.0, lambda: x))
    assert verdict.mistake == "swapped-branches", verdict.message


# -- 02.central_difference --------------------------------------------------------------------
def test_the_backward_difference_gets_the_one_sided_hint():
    """(f(x) − f(x−ε))/ε was refused with no hint; it is the forward difference's twin."""
    verdict = verify("02.central_difference", lambda f, x, eps: (f(x) - f(x - eps)) / eps)
    assert verdict.status == "failed" and verdict.mistake == "forward-difference", verdict.message
    assert "backward (f(x) − f(x−ε))/ε" in str(verdict)


def test_a_central_difference_off_in_the_8th_digit_shows_the_digits_that_differ():
    """A float32 result was refused with "returned 6.76, expected 6.76"."""
    answer = lambda f, x, eps: np.float32((f(x + eps) - f(x - eps)) / (2 * eps))  # noqa: E731
    verdict = verify("02.central_difference", answer)
    assert verdict.status == "failed", verdict.message
    assert "returned 6.76, expected 6.76" not in verdict.message
    assert "6.7600002288818359, expected 6.7599999999999998" in verdict.message
    assert "first 6 digits only" in verdict.message


# -- 02.dual and 02.jvp_rules: the quotient rule the wrong way round ----------------------------
def _dual_dividing_backwards():
    ref = _reference("02.dual")
    Dual = ref.Dual

    class Backwards(Dual):
        def __truediv__(self, other):
            other = other if isinstance(other, Dual) else Dual(other, 0.0)
            dot = (self.val * other.dot - self.dot * other.val) / other.val**2
            return Backwards(self.val / other.val, dot)

    return SimpleNamespace(Dual=Backwards, sin=ref.sin, exp=ref.exp, log=ref.log)


def test_a_dual_quotient_rule_with_the_terms_swapped_gets_the_quotient_hint():
    verdict = verify("02.dual", _dual_dividing_backwards())
    assert verdict.status == "failed" and verdict.mistake == "quotient-rule", verdict.message
    assert "u / w" in verdict.message


def _jvp_with_div(rule):
    reference = _reference("02.jvp_rules")

    def jvp_rule(op, inputs, output, tangents, axis=None, keepdims=False):
        if op == "div":
            (x, y), (dx, dy) = inputs, tangents
            return rule(x, y, dx, dy)
        return reference(op, inputs, output, tangents, axis=axis, keepdims=keepdims)

    return jvp_rule


def test_a_tangent_quotient_rule_with_the_terms_swapped_gets_the_quotient_hint():
    verdict = verify("02.jvp_rules", _jvp_with_div(lambda x, y, dx, dy: (x * dy - dx * y) / y**2))
    assert verdict.status == "failed" and verdict.mistake == "quotient-rule", verdict.message


# -- 02.jvp_rules and 03.vjp_rules: precision, not a mistake ------------------------------------
def _in_float32(exercise_id):
    reference = _reference(exercise_id)

    def rule(op, inputs, output, v, axis=None, keepdims=False):
        got = reference(op, inputs, output, v, axis=axis, keepdims=keepdims)
        if isinstance(got, tuple):
            return tuple(np.asarray(g, np.float32) for g in got)
        return np.asarray(got, np.float32)

    return rule


def test_vjp_rules_in_float32_is_not_told_to_unbroadcast():
    """``add`` of two (2, 3) arrays: not unbroadcasting gives the right adjoint there, so a
    float32 answer (equal to 7 digits) got the not-unbroadcast hint; it is told about the
    digits instead."""
    verdict = verify("03.vjp_rules", _in_float32("03.vjp_rules"))
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake is None, verdict.message
    assert "equal to about 6 digits only" in verdict.message


def test_jvp_rules_in_float32_says_the_digits_are_the_difference():
    verdict = verify("02.jvp_rules", _in_float32("02.jvp_rules"))
    assert verdict.status == "failed" and verdict.mistake is None, verdict.message
    assert "equal to about 6 digits only" in verdict.message


# -- 03.gradient ------------------------------------------------------------------------------
def _gradient(collect=list, seed=True):
    """The lecture's algorithm, partials kept in ``collect`` (a list, or a set that keeps the
    same node once), with or without the seed."""

    def gradient(out, wrt):
        node_to_grad = {out: collect([cl.ones_like(out)])} if seed else {}
        adjoint = {}
        for i in reversed(cl.topological_order(out)):
            if seed and i not in node_to_grad:
                continue
            adjoint[i] = cl.sum_n(*node_to_grad[i])
            if not i.inputs:
                continue
            for k, partial in zip(i.inputs, i.op.gradient(i, adjoint[i], [True] * len(i.inputs))):
                partials = node_to_grad.setdefault(k, collect())
                if isinstance(partials, set):
                    partials.add(partial)
                else:
                    partials.append(partial)
        return [adjoint.get(x, cl.zeros_like(x)) for x in wrt]

    return gradient


def test_gradient_keeping_partials_in_a_set_is_refused():
    """add's rule returns the same adjoint node for both inputs, so a set of partials counts
    x + x's twice once: d(x + x)/dx = 1. It used to pass every graph."""
    assert verify("03.gradient", _gradient()).passed
    verdict = verify("03.gradient", _gradient(collect=set))
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == "partials-not-summed", verdict.message
    assert "gradient(x + x, [x])" in verdict.message


def test_gradient_without_the_seed_gets_the_seed_hint_not_the_walk_order():
    """``node_to_grad = {}``: the first lookup, of out itself, raises KeyError; that was told
    "walk order"."""
    verdict = verify("03.gradient", _gradient(seed=False))
    assert verdict.status == "failed" and verdict.mistake == "no-seed", verdict.message
    assert "the output x itself has no adjoint" in verdict.message


# -- 04.mlp_grads and 04.norm_backward ----------------------------------------------------------
def test_mlp_grads_off_in_the_10th_digit_is_not_told_the_mean_count():
    """With K = 1 the mean-count mistake "divide by N, not N·K" multiplies the gradient by 1,
    and the relu-mask mistake was recognised by a dw2 and an all-active batch right to 7
    digits: an answer a hair off the tolerance matched both."""
    reference = _reference("04.mlp_grads")

    def nearly(x, y, w1, w2):
        return tuple(g + 5e-10 for g in reference(x, y, w1, w2))

    verdict = verify("04.mlp_grads", nearly)
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake is None, verdict.message


def test_norm_backward_with_the_unbiased_variance_in_r_only_gets_its_hint():
    """np.var(ddof=1) in the reference's closed form (the derivative kept for ddof=0) was
    refused with no hint."""
    reference = _reference("04.norm_backward")

    def unbiased(kind, dy, x, gamma, eps):
        n = x.shape[-1]
        rows = tuple(range(x.ndim - 1))
        centred = x - x.mean(axis=-1, keepdims=True) if kind == "layer" else x
        r = 1.0 / np.sqrt((centred * centred).sum(axis=-1, keepdims=True) / (n - 1) + eps)
        xhat = centred * r
        g = dy * gamma
        dx = g - xhat * (g * xhat).mean(axis=-1, keepdims=True)
        if kind == "layer":
            dx = dx - g.mean(axis=-1, keepdims=True)
        grads = {"x": r * dx, "gamma": (dy * xhat).sum(axis=rows)}
        if kind == "layer":
            grads["beta"] = dy.sum(axis=rows)
        return grads

    assert verify("04.norm_backward", reference).passed
    verdict = verify("04.norm_backward", unbiased)
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == "unbiased-variance", verdict.message


# -- correct answers in other styles ------------------------------------------------------------
def _unbroadcast(p, shape):
    while p.ndim > len(shape):
        p = p.sum(axis=0)
    for i, n in enumerate(shape):
        if n == 1 and p.shape[i] != 1:
            p = p.sum(axis=i, keepdims=True)
    return p


def _reduction_adjoint(op, x, output, g, axis, keepdims):
    axes = range(x.ndim) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    axes = tuple(a % x.ndim for a in axes)
    if not keepdims:
        g, output = np.expand_dims(g, axes), np.expand_dims(output, axes)
    if op == "sum":
        return np.broadcast_to(g, x.shape)
    if op == "mean":
        return np.broadcast_to(g / math.prod(x.shape[a] for a in axes), x.shape)
    ties = (x == output).astype(float)  # max: tied maxima share the adjoint
    return ties * g / ties.sum(axis=axes, keepdims=True)


def _vjp_rule_of_loops(op, inputs, output, adjoint, axis=None, keepdims=False):
    """vjp_rule with unbroadcasting by loops, einsum for matmul, read-only views in a list."""
    g = adjoint
    if op in ("add", "sub", "mul", "div", "matmul"):
        x, y = inputs
        partials = {"add": lambda: (g, g), "sub": lambda: (g, -g),
                    "mul": lambda: (g * y, g * x), "div": lambda: (g / y, -g * x / y**2),
                    "matmul": lambda: (np.einsum("...ik,...jk->...ij", g, y),
                                       np.einsum("...ki,...kj->...ij", x, g))}[op]()  # fmt: skip
        return [_unbroadcast(p, a.shape) for p, a in zip(partials, inputs)]
    if op == "softmax":
        return [output * g - output * (output * g).sum(-1, keepdims=True)]
    if op == "log_softmax":
        return [g - np.exp(output) * g.sum(-1)[..., None]]
    return [_reduction_adjoint(op, inputs[0], output, g, axis, keepdims)]


@dataclass(frozen=True)
class _Dual:
    """A dual number as a frozen dataclass, division by the reciprocal."""

    val: float
    dot: float = 0.0

    @staticmethod
    def lift(o):
        return o if isinstance(o, _Dual) else _Dual(float(o), 0.0)

    def __add__(self, o):
        o = _Dual.lift(o)
        return _Dual(self.val + o.val, self.dot + o.dot)

    __radd__ = __add__

    def __sub__(self, o):
        return self + -1.0 * _Dual.lift(o)

    def __rsub__(self, o):
        return _Dual.lift(o) - self

    def __mul__(self, o):
        o = _Dual.lift(o)
        return _Dual(self.val * o.val, self.dot * o.val + self.val * o.dot)

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = _Dual.lift(o)
        return self * _Dual(1 / o.val, -o.dot / (o.val * o.val))

    def __rtruediv__(self, o):
        return _Dual.lift(o) / self


def _softmax_ce_grad_by_rows(logits, targets):
    out = np.empty_like(logits)
    for i, (row, t) in enumerate(zip(logits, targets)):
        e = np.exp(row - row.max())
        p = e / e.sum()
        p[t] -= 1
        out[i] = p / len(targets)
    return out


def _mlp_grads_by_einsum(x, y, w1, w2):
    pre = x @ w1
    h = np.where(pre > 0, pre, 0.0)
    d = (h @ w2 - y) * (2.0 / y.size)
    dh = d @ w2.T
    dh[pre <= 0] = 0
    return [np.einsum("nd,nh->dh", x, dh), np.einsum("nh,nk->hk", h, d)]


def _norm_backward_staged(kind, dy, x, gamma, eps):
    n, rows = x.shape[-1], tuple(range(x.ndim - 1))
    xc = x - x.mean(-1, keepdims=True) if kind == "layer" else x
    var = (xc**2).mean(-1, keepdims=True)
    std = np.sqrt(var + eps)
    dxh = dy * gamma
    dvar = np.sum(dxh * xc, -1, keepdims=True) * -0.5 * (var + eps) ** -1.5
    dx = dxh / std + dvar * 2 * xc / n
    if kind == "layer":
        dx = dx - dx.mean(-1, keepdims=True)
    grads = {"x": dx, "gamma": np.sum(dy * xc / std, axis=rows)}
    if kind == "layer":
        grads["beta"] = np.sum(dy, axis=rows)
    return grads


OTHER_STYLES = {
    "01.guard_key": lambda args: str([(a.shape, a.dtype) for a in args]),
    "01.relu_cond": lambda x: cl.cond(x <= 0, lambda: 0.0, lambda: x),
    "02.central_difference": lambda f, x, eps: (f(x + eps) - f(x - eps)) / eps / 2,
    "02.dual": {"Dual": _Dual, "sin": lambda u: _Dual(math.sin(u.val), math.cos(u.val) * u.dot),
                "exp": lambda u: _Dual(math.exp(u.val), math.exp(u.val) * u.dot),
                "log": lambda u: _Dual(math.log(u.val), u.dot * (1 / u.val))},
    "03.vjp_rules": _vjp_rule_of_loops,
    "03.gradient": _gradient(),
    "03.div_rule": lambda node, g, needs: (g / node.inputs[1], -g * node / node.inputs[1]),
    "04.softmax_ce_grad": _softmax_ce_grad_by_rows,
    "04.mlp_grads": _mlp_grads_by_einsum,
    "04.norm_backward": _norm_backward_staged,
}  # fmt: skip


@pytest.mark.parametrize("exercise_id", sorted(OTHER_STYLES))
def test_correct_answers_in_other_styles_pass(exercise_id):
    """Other valid forms: a key as text, a branch on x <= 0, a central difference divided
    twice, a dual dataclass (a dict as the namespace), a vjp_rule returning read-only views in
    a list, a gradient summing with sum_n, div_rule reading the output and returning a tuple,
    softmax_ce_grad row by row, mlp_grads by einsum, norm_backward by the staged chain rule."""
    verdict = verify(exercise_id, OTHER_STYLES[exercise_id])
    assert verdict.passed, str(verdict)
