"""Every common mistake an exercise names: a wrong answer making it, and the hint it gets.

Most wrong answers are the reference answer (from the instructor notebook) with the mistake
put in; the rest are written out. Each must fail, be recognised as its mistake, and show that
mistake's hint.
"""

import dataclasses
import math
import re
import types
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from conftest import needs_gxx
from course_lib.exercises import EXERCISES, gpu_assignments, gpu_kernels, verify
from course_lib.exercises.gpu_kernels import declared_params
from course_lib.graph import apply
from course_lib.ops.broadcast import unbroadcast
from course_lib.ops.elementwise import Elementwise


def _reference(exercise_id):
    return reference_answer(notebook_exercises()[exercise_id])


def _as_answer(fn):
    """A copy of a checker's function made answer code (its code, and the code nested in it,
    under this file's name; the checker's functions it calls copied the same way): answers
    may not call the checkers' own functions, so a wrong answer built from the checker's
    variants must be a copy."""

    def moved(code):
        consts = tuple(moved(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_filename=__file__, co_consts=consts)

    space = dict(fn.__globals__)
    for name, value in list(space.items()):
        if isinstance(value, types.FunctionType) and value.__module__.startswith(
                "course_lib.exercises"):  # fmt: skip
            space[name] = _clone(value, moved, space)
    return _clone(fn, moved, space)


def _clone(fn, moved, space):
    clone = types.FunctionType(moved(fn.__code__), space, fn.__name__, fn.__defaults__,
                               fn.__closure__)  # fmt: skip
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


# -- 01 ---------------------------------------------------------------------------------------
GUARD_KEY = {
    "keyed-on-values": lambda ref: lambda args: tuple(a.tobytes() for a in args),
    "ignores-dtype": lambda ref: lambda args: tuple(a.shape for a in args),
    "size-not-shape": lambda ref: lambda args: tuple((a.size, a.dtype) for a in args),
    "order-lost": lambda ref: lambda args: tuple(sorted((a.shape, str(a.dtype)) for a in args)),
    "keyed-on-layout": lambda ref: lambda args: (ref(args), tuple(a.strides for a in args)),
    "unhashable": lambda ref: lambda args: list(ref(args)),
}

RELU_COND = {
    "python-if": lambda ref: lambda x: x if x > 0 else 0.0,
    "branches-not-functions": lambda ref: lambda x: cl.cond(x > 0, x, 0.0),
    "no-cond": lambda ref: cl.relu,
    "swapped-branches": lambda ref: lambda x: cl.cond(x > 0, lambda: 0.0, lambda: x),
    "times-zero": lambda ref: lambda x: cl.cond(x > 0, lambda: x, lambda: x * 0.0),
    "takes-x-at-zero": lambda ref: lambda x: cl.cond(x >= 0, lambda: x, lambda: 0.0),
}


def _last_uses(order, first_use=False):
    """{node: the step of its last use}, or of its first use (the mistake)."""
    last_use = {}
    for step, node in enumerate(order):
        for source in node.inputs:
            if not (first_use and source in last_use):
                last_use[source] = step
    return last_use


def _held(values, only_ops):
    return sum(np.size(v) for n, v in values.items() if not (only_ops and n.is_variable))


def _evaluating(never_free=False, free_outputs=False, first_use=False, only_ops=False,
                feeds_first=False, after_frees=False, topological=False):
    """evaluate() with one mistake switched on."""

    def evaluate(outputs, feed):
        order = cl.topological_order(outputs)
        last_use = _last_uses(order, first_use)
        kept = set() if free_outputs else set(outputs)
        values, peak = (dict(feed) if feeds_first else {}), 0
        for step, node in enumerate(order):
            inputs = [values[s] for s in node.inputs]
            values[node] = feed[node] if node.is_variable else node.op.compute(np, *inputs)
            done = [] if never_free else [s for s in set(node.inputs)
                                          if last_use[s] == step and s not in kept]  # fmt: skip
            peak = max(peak, _held(values, only_ops) - after_frees * sum(
                np.size(values[s]) for s in done if not (only_ops and s.is_variable)))
            for source in done:
                del values[source]
        if topological:  # in the order the nodes ran, each once
            return [values[n] for n in order if n in set(outputs)], peak
        return [values[o] for o in outputs], peak

    return evaluate


EVALUATE = {
    "never-frees": lambda ref: _evaluating(never_free=True),
    "frees-outputs": lambda ref: _evaluating(free_outputs=True),
    "frees-too-early": lambda ref: _evaluating(first_use=True),
    "feeds-not-counted": lambda ref: _evaluating(only_ops=True),
    "feeds-from-the-start": lambda ref: _evaluating(feeds_first=True),
    "peak-after-frees": lambda ref: _evaluating(after_frees=True),
    "outputs-out-of-order": lambda ref: _evaluating(topological=True),
    "peak-not-elements": lambda ref: _reference_edited(  # how many values, not their elements
        "01.evaluate", "sum(np.size(value) for value in values.values())", "len(values)"),
}


# -- 02 ---------------------------------------------------------------------------------------
def _central(f, x, eps):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


CENTRAL_DIFFERENCE = {
    "forward-difference": lambda ref: lambda f, x, eps: (f(x + eps) - f(x)) / eps,
    "no-half": lambda ref: lambda f, x, eps: 2 * ref(f, x, eps),
    "sign": lambda ref: lambda f, x, eps: -ref(f, x, eps),
    "fixed-eps": lambda ref: lambda f, x, eps: ref(f, x, 1e-4),
    "precedence": lambda ref: lambda f, x, eps: (f(x + eps) - f(x - eps)) / 2 * eps,
    "half-steps": lambda ref: lambda f, x, eps: (f(x + eps / 2) - f(x - eps / 2)) / eps,
}


def _dual_with(ref, **methods):
    """The reference dual numbers with some methods of Dual (or functions) replaced."""
    functions = {name: methods.pop(name, getattr(ref, name)) for name in ("sin", "exp", "log")}
    return SimpleNamespace(Dual=type("WrongDual", (ref.Dual,), methods), **functions)


class _NoReflected:
    """Dual numbers with a float on the right only (no __radd__, __rmul__, ...)."""

    def __init__(self, val, dot=0.0):
        self.val, self.dot = float(val), float(dot)

    def _lift(self, other):
        return other if isinstance(other, _NoReflected) else _NoReflected(other)

    def __add__(self, other):
        other = self._lift(other)
        return _NoReflected(self.val + other.val, self.dot + other.dot)

    def __sub__(self, other):
        return self + self._lift(other) * -1.0

    def __mul__(self, other):
        other = self._lift(other)
        return _NoReflected(self.val * other.val, self.dot * other.val + self.val * other.dot)

    def __truediv__(self, other):
        other = self._lift(other)
        return _NoReflected(
            self.val / other.val, (self.dot * other.val - self.val * other.dot) / other.val**2
        )


def _in_place_add(self, other):
    self.val, self.dot = self.val + other.val, self.dot + other.dot
    return self


DUAL = {
    "product-rule": lambda ref: _dual_with(
        ref, __mul__=lambda u, w: ref.Dual(u.val * w.val, u.dot * w.dot)
    ),
    "quotient-rule": lambda ref: _dual_with(
        ref,
        __truediv__=lambda u, w: ref.Dual(
            u.val / w.val, (u.dot * w.val + u.val * w.dot) / w.val**2
        ),
    ),
    "chain-rule": lambda ref: _dual_with(
        ref, sin=lambda u: ref.Dual(math.sin(u.val), math.cos(u.val))
    ),
    "float-tangent": lambda ref: _dual_with(
        ref,
        __add__=lambda u, w: ref.Dual.__add__(
            u, w if isinstance(w, ref.Dual) else ref.Dual(w, 1.0)
        ),
    ),
    "reflected": lambda ref: SimpleNamespace(
        Dual=_NoReflected, sin=ref.sin, exp=ref.exp, log=ref.log
    ),
    "floats-not-lifted": lambda ref: _dual_with(
        ref, __add__=lambda u, w: ref.Dual(u.val + w.val, u.dot + w.dot)
    ),
    "in-place": lambda ref: _dual_with(ref, __add__=_in_place_add),
}


# -- 02 and 03: the op rules ------------------------------------------------------------------
def _replacing(op, rule):
    """The reference answer with ``op``'s rule replaced by ``rule(ref, inputs, output, v,
    **attrs)``, the mistake."""

    def answer(ref):
        def rule_of(name, inputs, output, v, **attrs):
            chosen = rule if name == op else lambda ref, *args, **kw: ref(name, *args, **kw)
            return chosen(ref, inputs, output, v, **attrs)

        return rule_of

    return answer


def _sum_to(partial, shape, keepdims=True):
    """An output-shaped partial adjoint summed to ``shape`` (keepdims=False: squeezed)."""
    lead = partial.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and partial.shape[lead + i] != 1
    )
    summed = np.sum(partial, axis=axes, keepdims=keepdims)
    return summed.reshape(summed.shape[lead:]) if keepdims else summed


def _max_mask(inputs, output, attrs):
    x, axis = inputs[0], attrs["axis"]
    return (x == np.max(x, axis=axis, keepdims=True)).astype(float)


def _rowsum(v, keepdims=True):
    return np.sum(v, axis=-1, keepdims=keepdims)


def _softmax_from_x(inputs):
    """The softmax recomputed from x, without subtracting the row maximum."""
    e = np.exp(inputs[0])
    return e / _rowsum(e)


JVP_RULES = {
    "product-rule": _replacing("mul", lambda ref, ins, out, d: d[0] * ins[1]),
    "quotient-rule": _replacing("div", lambda ref, ins, out, d: (d[0] * ins[1] + ins[0] * d[1])
                                / ins[1] ** 2),
    "matmul-one-term": _replacing("matmul", lambda ref, ins, out, d: d[0] @ ins[1]),
    "tangent-not-reduced": _replacing("sum", lambda ref, ins, out, d, **a: d[0].copy()),
    "mean-count": _replacing("mean", lambda ref, *args, **a: ref("sum", *args, **a)),
    "max-of-tangent": _replacing("max", lambda ref, ins, out, d, axis, keepdims:
                                 np.max(d[0], axis=axis, keepdims=keepdims)),
    "max-ties": _replacing("max", lambda ref, ins, out, d, **a: ref(
        "sum", ins, out, (d[0] * _max_mask(ins, out, a),), **a)),
    "softmax-missing-term": _replacing("softmax", lambda ref, ins, out, d: out * d[0]),
    "softmax-diagonal-only": _replacing("softmax", lambda ref, ins, out, d: out * (1 - out) * d[0]),
    "row-sum-not-kept": _replacing("softmax", lambda ref, ins, out, d:
                                   out * (d[0] - _rowsum(out * d[0], keepdims=False))),
    "log-softmax-exp": _replacing("log_softmax", lambda ref, ins, out, d:
                                  d[0] - _rowsum(np.exp(ins[0]) * d[0])),
    "log-softmax-other-mode": _replacing("log_softmax", lambda ref, ins, out, d:
                                         d[0] - np.exp(out) * _rowsum(d[0])),
    "naive-softmax": _replacing("softmax", lambda ref, ins, out, d: ref(
        "softmax", ins, _softmax_from_x(ins), d)),
}  # fmt: skip


# -- 03 ---------------------------------------------------------------------------------------
def _gradient_variant(reverse=True, summed=True, skip_leaves=True):
    """gradient(out) with one of the usual slips."""

    def gradient(out, wrt):
        partials, adjoint = {out: [cl.ones_like(out)]}, {}
        for node in reversed(cl.topological_order(out)) if reverse else cl.topological_order(out):
            if node in partials:
                adjoint[node] = cl.sum_n(*partials[node]) if summed else partials[node][-1]
                if node.inputs or not skip_leaves:
                    rule = node.op.gradient(node, adjoint[node], [True] * len(node.inputs))
                    for k, partial in zip(node.inputs, rule):
                        partials.setdefault(k, []).append(partial)
        return [adjoint.get(x, cl.zeros_like(x)) for x in wrt]

    return gradient


GRADIENT = {
    "no-seed": lambda ref: lambda out, wrt: [cl.zeros_like(x) for x in wrt],
    # the pseudocode's {out: [1]} summed by Python's sum: out's own adjoint is the number 1
    "seed-not-a-node": lambda ref: lambda out, wrt: [1 if x is out else g
                                                     for x, g in zip(wrt, ref(out, wrt))],
    "walk-order": lambda ref: _gradient_variant(reverse=False),
    "partials-not-summed": lambda ref: _gradient_variant(summed=False),
    "rule-of-a-leaf": lambda ref: _gradient_variant(skip_leaves=False),
    "unused-input": lambda ref: (
        lambda out, wrt: [
            g if x in cl.topological_order(out) else 0.0 for x, g in zip(wrt, ref(out, wrt))
        ]
    ),
    "numbers-not-nodes": lambda ref: lambda out, wrt: [np.zeros(x.shape) for x in wrt],
    "uses-cl-grad": lambda ref: lambda out, wrt: cl.grad(out, list(wrt)),
}


def _div_partials(make):
    def rule(node, adjoint, needs):
        x, y = node.inputs
        return make(x, y, adjoint)

    return rule


DIV_RULE = {
    "local-derivative-only": lambda ref: _div_partials(lambda x, y, g: [1.0 / y, -x / (y * y)]),
    "sign": lambda ref: _div_partials(lambda x, y, g: [g / y, g * x / (y * y)]),
    "y-partial": lambda ref: _div_partials(lambda x, y, g: [g / y, -g / (y * y)]),
    "swapped": lambda ref: lambda node, g, needs: ref(node, g, [True, True])[::-1],
    "numbers-not-nodes": lambda ref: lambda node, g, needs: [1.0, 2.0],
}


VJP_RULES = {
    "not-unbroadcast": _replacing("add", lambda ref, ins, out, g: (g, g)),
    "unbroadcast-shape": _replacing("add", lambda ref, ins, out, g: tuple(
        _sum_to(g, x.shape, keepdims=False) for x in ins)),
    "product-partials": _replacing("mul", lambda ref, ins, out, g: tuple(
        _sum_to(g * x, x.shape) for x in ins)),
    "matmul-transpose-order": _replacing("matmul", lambda ref, ins, out, g: (
        _sum_to(g @ ins[1], ins[0].shape), _sum_to(ins[0] @ g, ins[1].shape))),
    "reduced-axes-not-restored": _replacing("sum", lambda ref, ins, out, g, **a: (
        np.broadcast_to(g, ins[0].shape).copy(),)),
    "mean-count": _replacing("mean", lambda ref, *args, **a: ref("sum", *args, **a)),
    "max-not-routed": _replacing("max", lambda ref, *args, **a: ref("sum", *args, **a)),
    "max-ties": _replacing("max", lambda ref, ins, out, g, **a: (
        ref("sum", ins, out, g, **a)[0] * _max_mask(ins, out, a),)),
    "softmax-missing-term": _replacing("softmax", lambda ref, ins, out, g: (out * g,)),
    "softmax-diagonal-only": _replacing("softmax", lambda ref, ins, out, g: (out * (1 - out) * g,)),
    "row-sum-not-kept": _replacing("softmax", lambda ref, ins, out, g: (
        out * (g - _rowsum(out * g, keepdims=False)),)),
    "log-softmax-exp": _replacing("log_softmax", lambda ref, ins, out, g: (
        g - np.exp(ins[0]) * _rowsum(g),)),
    "log-softmax-other-mode": _replacing("log_softmax", lambda ref, ins, out, g: (
        g - _rowsum(np.exp(out) * g),)),
    "naive-softmax": _replacing("log_softmax", lambda ref, ins, out, g: ref(
        "log_softmax", ins, np.log(_softmax_from_x(ins)), g)),
}  # fmt: skip


# -- 04 ---------------------------------------------------------------------------------------
def _softmax_rows_of(logits, axis):
    e = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _ce_grad(axis=-1, stable=True, one_hot=True):
    def softmax_ce_grad(logits, targets):
        probs = (
            _softmax_rows_of(logits, axis)
            if stable
            else np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        )
        if one_hot:
            probs[np.arange(len(targets)), targets] -= 1.0
        return probs / len(targets)

    return softmax_ce_grad


def _subtracts_in_place(ref):
    def softmax_ce_grad(logits, targets):
        logits -= logits.max(axis=-1, keepdims=True)
        return ref(logits, targets)

    return softmax_ce_grad


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _one_hot_through_reshape(logits, targets):
    """Right on row-major logits; on column-major ones reshape(-1) is a copy (review round 3)."""
    p = _softmax(logits)
    flat = p.reshape(-1)
    flat[np.arange(len(targets)) * logits.shape[1] + targets] -= 1
    return p / len(targets)


def _one_hot_in_every_row(logits, targets):
    p = _softmax(logits)
    p[:, targets] -= 1
    return p / len(targets)


SOFTMAX_CE_GRAD = {
    "no-mean": lambda ref: lambda logits, targets: ref(logits, targets) * len(targets),
    "sign": lambda ref: lambda logits, targets: -ref(logits, targets),
    "overflow": lambda ref: _ce_grad(stable=False),
    "no-one-hot": lambda ref: _ce_grad(one_hot=False),
    "softmax-axis": lambda ref: _ce_grad(axis=0),
    "changes-input": _subtracts_in_place,
    "writes-a-copy": lambda ref: _one_hot_through_reshape,
    "every-row-every-target": lambda ref: _one_hot_in_every_row,
    "divides-by-classes": lambda ref: lambda logits, targets: (
        ref(logits, targets) * len(targets) / logits.shape[1]),
    "keeps-dtype": lambda ref: lambda logits, targets: (  # np.eye is float64: float32 upcasts
        (_softmax(logits) - np.eye(logits.shape[1])[targets]) / len(targets)),
}


def _mlp_without_mask(x, y, w1, w2):
    hidden = np.maximum(x @ w1, 0.0)
    delta = 2 * (hidden @ w2 - y) / y.size
    return x.T @ (delta @ w2.T), hidden.T @ delta


MLP_GRADS = {
    "mean-count": lambda ref: lambda x, y, w1, w2: tuple(g * len(y) for g in ref(x, y, w1, w2)),
    "no-two": lambda ref: lambda x, y, w1, w2: tuple(g / 2 for g in ref(x, y, w1, w2)),
    "relu-mask": lambda ref: _mlp_without_mask,
    "shapes": lambda ref: lambda x, y, w1, w2: ref(x, y, w1, w2)[::-1],
}


def _norm_grads_with(**mistake):
    """norm_backward in closed form with one mistake switched on (the checker's own variants,
    which the right answer matches with none)."""
    from course_lib.exercises.training import _numpy_norm_grads

    _numpy_norm_grads = _as_answer(_numpy_norm_grads)
    return lambda kind, dy, x, gamma, eps: _numpy_norm_grads(kind, dy, x, gamma, eps, **mistake)


NORM_BACKWARD = {
    "no-mean-term": lambda ref: _norm_grads_with(mean_term=False),
    "no-variance-term": lambda ref: _norm_grads_with(variance_term=False),
    "not-summed-over-rows": lambda ref: _norm_grads_with(rows=()),
    "eps-outside-root": lambda ref: _norm_grads_with(eps_outside=True),
    "unbiased-variance": lambda ref: _norm_grads_with(ddof=1),
    "rms-as-layer": lambda ref: lambda kind, dy, x, gamma, eps: {
        name: g for name, g in ref("layer", dy, x, gamma, eps).items()
        if kind == "layer" or name != "beta"},
    "no-gamma-in-dx": lambda ref: lambda kind, dy, x, gamma, eps: {
        **ref(kind, dy, x, gamma, eps),
        "x": ref(kind, dy, x, np.ones_like(gamma), eps)["x"]},
}  # fmt: skip

# -- 05 ---------------------------------------------------------------------------------------
def _strides_in_int32(shape):
    strides = np.ones(len(shape), np.int32)
    strides[:-1] = np.cumprod(shape[:0:-1], dtype=np.int32)[::-1]  # 2**42 wraps around to 0
    return tuple(strides)


CONTIGUOUS_STRIDES = {
    "column-major": lambda ref: lambda shape: ref(shape[::-1])[::-1],
    "bytes": lambda ref: lambda shape: tuple(8 * s for s in ref(shape)),
    "inclusive-product": lambda ref: (
        lambda shape: tuple(math.prod(shape[k:]) for k in range(len(shape)))
    ),
    "reversed": lambda ref: lambda shape: ref(shape)[::-1],
    "overflow": lambda ref: _strides_in_int32,
    "makes-an-array": lambda ref: lambda shape: tuple(np.empty(shape, np.int8).strides),
}

PERMUTED = {
    "inverse-permutation": lambda ref: (
        lambda shape, strides, axes: ref(shape, strides, tuple(np.argsort(axes)))
    ),
    "strides-not-permuted": lambda ref: (
        lambda shape, strides, axes: (ref(shape, strides, axes)[0], strides)
    ),
    "shape-not-permuted": lambda ref: (
        lambda shape, strides, axes: (shape, ref(shape, strides, axes)[1])
    ),
    "unchanged": lambda ref: lambda shape, strides, axes: (shape, strides),
    "fresh-strides": lambda ref: (
        lambda shape, strides, axes: (
            ref(shape, strides, axes)[0],
            np.empty(ref(shape, strides, axes)[0], np.int8).strides,
        )
    ),
    "makes-an-array": lambda ref: (  # the shape read off a transposed array of that shape
        lambda shape, strides, axes: (np.empty(shape, np.int8).transpose(axes).shape,
                                      ref(shape, strides, axes)[1])  # fmt: skip
    ),
}


def _ignoring(feature):
    """can_view that answers wrongly (False) exactly on layouts with ``feature``."""
    return lambda ref: (
        lambda shape, strides, new: False if feature(shape, strides) else ref(shape, strides, new)
    )


CAN_VIEW = {
    "always-a-view": lambda ref: lambda shape, strides, new: True,
    "only-contiguous": lambda ref: (
        lambda shape, strides, new: tuple(strides) == tuple(s // 8 for s in np.empty(shape).strides)
    ),
    "length-one-axes": _ignoring(lambda shape, strides: 1 in shape and 0 not in shape),
    "empty": _ignoring(lambda shape, strides: 0 in shape),
    "negative-strides": lambda ref: (
        lambda shape, strides, new: ref(shape, tuple(abs(s) for s in strides), new)
    ),
}


def _adding(left=False, keep_stride=False, no_offset=False, no_check=False, fortran=False):
    """add_views() with one mistake switched on."""

    def pad(shape, ndim, fill):
        extra = (fill,) * (ndim - len(shape))
        return tuple(shape) + extra if left else extra + tuple(shape)

    def add_views(a, b):
        ndim = max(len(a.shape), len(b.shape))
        sa, sb = pad(a.shape, ndim, 1), pad(b.shape, ndim, 1)
        if not no_check and any(m != n and 1 not in (m, n) for m, n in zip(sa, sb)):
            raise ValueError("the shapes do not broadcast")
        shape = [n if m == 1 else m for m, n in zip(sa, sb)]
        strides = [[s if keep_stride or not (n == 1 and m != 1) else 0
                    for n, m, s in zip(padded, shape, pad(v.strides, ndim, 0))]
                   for v, padded in ((a, sa), (b, sb))]  # fmt: skip
        flat = []
        for index in np.ndindex(*shape):
            i, j = (sum(k * s for k, s in zip(index, st)) + (0 if no_offset else v.offset)
                    for v, st in zip((a, b), strides))  # fmt: skip
            flat.append(a.buffer[i] + b.buffer[j])
        return np.array(flat, dtype=float).reshape(shape, order="F" if fortran else "C")

    return add_views


ADD_VIEWS = {
    "left-aligned": lambda ref: _adding(left=True),
    "stretched-with-its-stride": lambda ref: _adding(keep_stride=True),
    "ignores-offset": lambda ref: _adding(no_offset=True),
    "accepts-mismatch": lambda ref: _adding(no_check=True),
    "column-major-out": lambda ref: _adding(fortran=True),
    "result-shape": lambda ref: lambda a, b: ref(a, b).ravel(),
    "dtype": lambda ref: lambda a, b: ref(a, b).astype(np.float32),
    "numpy-scalar": lambda ref: lambda a, b: ref(a, b)[()] if a.shape == b.shape == () else (
        ref(a, b)),  # two 0-d views added: a NumPy scalar
}


# -- 06 ---------------------------------------------------------------------------------------
def _counting(count_stores=True, count_variables=False, per_byte=False, one_flop=False,
              output_sized=False, distinct=False):  # fmt: skip
    """intensity() with one mistake switched on (each op's FLOPs asked of the op, each input
    loaded at its own size, otherwise; ``distinct``: x * x loads x once)."""

    def intensity(outputs):
        flops = moved = 0
        for node in cl.topological_order(outputs):
            n = math.prod(node.shape)
            if not node.inputs:  # a variable
                flops, moved = (flops + n, moved + n) if count_variables else (flops, moved)
                continue
            shapes = [i.shape for i in node.inputs]
            flops += n if one_flop else node.op.flops(node.shape, *shapes)
            loaded = [i.shape for i in set(node.inputs)] if distinct else shapes
            loads = n * len(shapes) if output_sized else sum(math.prod(s) for s in loaded)
            moved += loads + n * count_stores
        return Fraction(flops, moved * (4 if per_byte else 1))

    return intensity


def _fused(outputs):
    """One kernel for the whole graph: each variable loaded once, each output stored once."""
    nodes = cl.topological_order(outputs)
    flops = sum(node.op.flops(node.shape, *[i.shape for i in node.inputs])
                for node in nodes if node.inputs)  # fmt: skip
    moved = sum(math.prod(node.shape) for node in nodes if not node.inputs)
    moved += sum(math.prod(node.shape) for node in set(outputs))
    return Fraction(flops, moved)


INTENSITY = {
    "distinct-inputs": lambda ref: _counting(distinct=True),
    "loads-only": lambda ref: _counting(count_stores=False),
    "variables-as-ops": lambda ref: _counting(count_variables=True),
    "per-byte": lambda ref: _counting(per_byte=True),
    "fused": lambda ref: _fused,
    "float": lambda ref: lambda outputs: float(ref(outputs)),
    "one-flop": lambda ref: _counting(one_flop=True),
    "output-sized-inputs": lambda ref: _counting(output_sized=True),
}


def _fold(scale, shift, bias_scaled=True, axis=True):
    def fold_batchnorm(W, B, gamma, beta, mean, var, eps):
        R = scale(gamma, var, eps)
        return W * (R[:, None, None, None] if axis else R), (B * R if bias_scaled else B) + shift(
            beta, mean, R
        )

    return fold_batchnorm


_R = lambda gamma, var, eps: gamma / np.sqrt(var + eps)  # noqa: E731
_P = lambda beta, mean, R: beta - mean * R  # noqa: E731
FOLD_BATCHNORM = {
    "bias-not-scaled": lambda ref: _fold(_R, _P, bias_scaled=False),
    "eps-outside": lambda ref: _fold(lambda g, v, e: g / (np.sqrt(v) + e), _P),
    "variance-not-std": lambda ref: _fold(lambda g, v, e: g / (v + e), _P),
    "mean-sign": lambda ref: _fold(_R, lambda beta, mean, R: beta + mean * R),
    "wrong-axis": lambda ref: _fold(_R, _P, axis=False),
}


def _swiglu_with(ref, **methods):
    """The reference SwiGLU op with some of its methods replaced."""
    return type("WrongSwiGLU", (ref,), methods)


def _swiglu_gradient(da, db, summed=True):
    """SwiGLU.gradient from the partials ``da(g, a, b, s)`` and ``db(...)`` (s = sigmoid(a));
    ``summed=False`` leaves them the output's shape."""

    def gradient(self, node, g, needs):
        a, b = node.inputs
        s = cl.sigmoid(a)
        parts = [da(g, a, b, s), db(g, a, b, s)]
        return [unbroadcast(p, node, k) if summed else p for k, p in enumerate(parts)]

    return gradient


def _central_differences(self, node, g, needs):
    a, b = node.inputs
    h, fused = 1e-5, lambda x, y: apply(type(self)(), x, y)
    return [unbroadcast(g * (fused(a + h, b) - fused(a - h, b)) / (2 * h), node, 0),
            unbroadcast(g * (fused(a, b + h) - fused(a, b - h)) / (2 * h), node, 1)]  # fmt: skip


_SILU_PRIME = lambda a, s: s * (1.0 + a * (1.0 - s))  # noqa: E731
_SIZE = lambda shape: math.prod(shape)  # noqa: E731
SWIGLU = {
    "silu-derivative-is-sigmoid": lambda ref: _swiglu_with(ref, gradient=_swiglu_gradient(
        lambda g, a, b, s: g * b * s, lambda g, a, b, s: g * a * s)),
    "swapped-adjoints": lambda ref: _swiglu_with(ref, gradient=_swiglu_gradient(
        lambda g, a, b, s: g * a * s, lambda g, a, b, s: g * b * _SILU_PRIME(a, s))),
    "adjoint-ignored": lambda ref: _swiglu_with(ref, gradient=_swiglu_gradient(
        lambda g, a, b, s: cl.ones_like(g) * b * _SILU_PRIME(a, s),
        lambda g, a, b, s: cl.ones_like(g) * a * s)),
    "adjoint-not-unbroadcast": lambda ref: _swiglu_with(ref, gradient=_swiglu_gradient(
        lambda g, a, b, s: g * b * _SILU_PRIME(a, s), lambda g, a, b, s: g * a * s,
        summed=False)),
    "numerical-gradient": lambda ref: _swiglu_with(ref, gradient=_central_differences),
    "output-sized-temporaries": lambda ref: _swiglu_with(
        ref, compute=lambda self, xp, a, b: a / (1.0 + xp.exp(-a)) * b),
    "flops-not-counted": lambda ref: _swiglu_with(ref, flops=Elementwise.flops),
    "flops-miscounted": lambda ref: _swiglu_with(  # silu 3, sigmoid counted as 2
        ref, flops=lambda self, out, a, b: 4 * math.prod(out)),
    "flops-of-an-input": lambda ref: _swiglu_with(
        ref, flops=lambda self, out, a, b: 5 * math.prod(a)),
    "unfused-traffic": lambda ref: _swiglu_with(ref, accesses=lambda self, out, a, b: (
        (3 * _SIZE(a), _SIZE(b)), _SIZE(out))),
    "output-sized-inputs": lambda ref: _swiglu_with(ref, accesses=lambda self, out, a, b: (
        (_SIZE(out), _SIZE(out)), _SIZE(out))),
}  # fmt: skip


# -- 07 ---------------------------------------------------------------------------------------
def _edited(old, new):
    return lambda ref: ref.replace(old, new)


SCALE_ADD = {
    "no-bounds-check": _edited("if (i < n)", "if (true)"),
    "missed-elements": _edited("blockIdx.x * blockDim.x + threadIdx.x", "threadIdx.x"),
    "formula": _edited("a * x[i] + y[i]", "a * (x[i] + y[i])"),
    "signature": _edited("float a, int n", "int n, float a"),
    "input-written": lambda ref: ref.replace("const float* x", "float* x").replace(
        "out[i] = a * x[i] + y[i];", "x[i] = a * x[i]; out[i] = x[i] + y[i];"),
}

SOFTMAX_ROWS = {
    "overflow": _edited("expf(row[j] - m)", "expf(row[j])"),
    "not-normalised": _edited("expf(row[j] - m) / sum", "expf(row[j] - m)"),
    "shift-mismatch": _edited("sum += expf(row[j] - m)", "sum += expf(row[j])"),
    "no-bounds-check": _edited("if (r >= rows) return;", ""),
    "missed-elements": _edited("blockIdx.x * blockDim.x + threadIdx.x", "threadIdx.x"),
    "max-start": lambda ref: ref.replace("float m = row[0];", "float m = 0.0f;").replace(
        "for (int j = 1; j < cols; j++) m", "for (int j = 0; j < cols; j++) m"),
    "input-written": lambda ref: ref.replace("const float* x", "float* x").replace(
        "out[r * cols + j] = expf(row[j] - m) / sum;",
        "{ out[r * cols + j] = expf(row[j] - m) / sum; ((float*)row)[j] = 0.0f; }"),
}


NAIVE_MATMUL = """
#define TILE 16
extern "C" __global__ void tiled_matmul(const float* A, const float* B, float* C,
                                        int M, int N, int K) {
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; k++) acc += A[row * K + k] * B[col * K + k];
        C[row * N + col] = acc;
    }
}
"""


def _shipped_tiled_matmul(ref=None):
    """The library's own tiled kernel (C = A @ B, B stored K x N), renamed: the student
    release ships it, so it must not be the answer."""
    from course_lib import kernels

    return kernels.kernel_source("matmul_tiled.cu").replace("matmul_tiled", "tiled_matmul")


_B_LOAD = "b_tile[tx][ty] = (b_row < N && k0 + tx < K) ? B[b_row * K + k0 + tx] : 0.0f;"
TILED_MATMUL = {
    "not-tiled": lambda ref: NAIVE_MATMUL,
    "uncoalesced": _edited(  # the tile of B filled down B's columns: lane tx reads row col
        _B_LOAD, "b_tile[ty][tx] = (col < N && k0 + ty < K) ? B[col * K + k0 + ty] : 0.0f;"),
    "missing-barrier": _edited("b_tile[k][tx];\n        __syncthreads();", "b_tile[k][tx];"),
    "ragged-edges": lambda ref: ref.replace(
        "(row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f", "A[row * K + k0 + tx]").replace(
        "(b_row < N && k0 + tx < K) ? B[b_row * K + k0 + tx] : 0.0f", "B[b_row * K + k0 + tx]"),
    "a-times-b": _shipped_tiled_matmul,
    "tile-not-transposed": _edited("b_tile[tx][ty] =", "b_tile[ty][tx] ="),
    "no-bounds-check": _edited("if (row < M && col < N) C[", "C["),
    "missed-elements": _edited("col = blockIdx.x * TILE + tx", "col = tx"),
    "signature": _edited("float* C, int M, int N, int K", "int M, int N, int K, float* C"),
    "input-written": lambda ref: ref.replace("const float* A", "float* A").replace(
        "C[row * N + col] = acc;", "{ C[row * N + col] = acc; A[row * K] = 0.0f; }"),
}

SHARED_TREE_ROW_SUM = """
extern "C" __global__ void row_sum(const float* x, float* out, int rows, int cols) {
    __shared__ float partial[1024];
    float sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += x[blockIdx.x * cols + j];
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
"""

WARP_SUM = {
    "no-shuffle": lambda ref: SHARED_TREE_ROW_SUM,
    "shuffle-offsets": _edited("offset > 0", "offset > 1"),
    "warps-not-combined": _edited(
        "sum = warp_total(lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f);", ""),
    "no-column-guard": _edited(
        "for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += row[j];",
        "for (int j = 0; j < cols; j += blockDim.x) sum += row[j + threadIdx.x];"),
    "adds-to-out": _edited("if (lane == 0) out[blockIdx.x] = sum;",
                           "if (lane == 0) atomicAdd(out + blockIdx.x, sum);"),
    "unwritten-shared": _edited(
        "sum = warp_total(lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f);",
        "sum = warp_total(warp_totals[lane]);"),
    "missed-elements": _edited("out[blockIdx.x] = sum", "out[threadIdx.x] = sum"),
    "signature": _edited("int rows, int cols", "int rows, long long cols"),
    "input-written": lambda ref: ref.replace("const float* x", "float* x").replace(
        "int lane =", "x[blockIdx.x * cols] = 0.0f;\n    int lane ="),
}

# -- 08 ---------------------------------------------------------------------------------------
def _mean_square(x, **kwargs):
    return cl.mean(x * x, axis=-1, keepdims=True, **kwargs)


RMSNORM = {
    "eps-outside": lambda ref: lambda x, w, eps: x / (cl.sqrt(_mean_square(x)) + eps) * w,
    "no-eps": lambda ref: lambda x, w, eps: x * cl.rsqrt(_mean_square(x)) * w,
    "mean-over-all": lambda ref: lambda x, w, eps: x * cl.rsqrt(cl.mean(x * x) + eps) * w,
    "mean-over-axis-0": lambda ref: (
        lambda x, w, eps: x * cl.rsqrt(cl.mean(x * x, axis=0, keepdims=True) + eps) * w
    ),
    "no-weight": lambda ref: lambda x, w, eps: x * cl.rsqrt(_mean_square(x) + eps),
    "sum-not-mean": lambda ref: (
        lambda x, w, eps: x * cl.rsqrt(cl.sum(x * x, axis=-1, keepdims=True) + eps) * w
    ),
    "numpy-on-nodes": lambda ref: lambda x, w, eps: x / np.sqrt(_mean_square(x) + eps) * w,
    "no-keepdims": lambda ref: lambda x, w, eps: x * cl.rsqrt(cl.mean(x * x, axis=-1) + eps) * w,
    "uses-rms-norm": lambda ref: cl.rms_norm,
}


def _attention(scale=lambda d: d**-0.5, mask="future", axis=-1):
    def attention(q, k, v):
        t, d = q.shape
        scores = q @ cl.matrix_transpose(k) * scale(d)
        if mask:
            future = np.triu(np.full((t, t), -np.inf), k=1)
            if mask == "diagonal":  # j >= i hidden: a position cannot see itself
                future = np.triu(np.full((t, t), -np.inf), k=0)
            scores = scores + cl.constant(future.T if mask == "past" else future)
        return cl.softmax(scores, axis=axis) @ v

    return attention


ATTENTION = {
    "no-scale": lambda ref: _attention(scale=lambda d: 1.0),
    "scale-by-d": lambda ref: _attention(scale=lambda d: 1.0 / d),
    "no-mask": lambda ref: _attention(mask=None),
    "mask-transposed": lambda ref: _attention(mask="past"),
    "masks-the-diagonal": lambda ref: _attention(mask="diagonal"),
    "softmax-axis": lambda ref: _attention(axis=0),
    "uses-attention": lambda ref: _through_causal_attention,
}


def _through_causal_attention(q, k, v):
    """One head as a batch of one with one head, through the library's attention."""
    t, d = q.shape
    heads = [cl.reshape(z, (1, t, 1, d)) for z in (q, k, v)]
    return cl.reshape(cl.causal_attention(*heads)[0], (t, d))


def _decoding(ref, **mistake):
    """decode_step with the checker's output of one mistake and the reference's cache."""
    from course_lib.exercises.llama import _attend

    _attend = _as_answer(_attend)

    def decode_step(cache, q, k, v, position):
        out = _attend(*cache, q, k, v, position, **mistake).astype(q.dtype)
        return out, ref(cache, q, k, v, position)[1]

    return decode_step


def _caching(ref, change):
    """decode_step with the reference's output and ``change(keys, values, q, k)`` cached."""

    def decode_step(cache, q, k, v, position):
        out, (keys, values) = ref(cache, q, k, v, position)
        return out, change(keys, values, q, k)

    return decode_step


def _attends_to_the_cache_only(cache, q, k, v, position):
    """Leaves its own key and value out: on an empty cache, a softmax over nothing."""
    keys, values = cache
    scores = np.einsum("hd,shd->hs", q, np.repeat(keys, q.shape[0] // k.shape[0], axis=1))
    return np.exp(scores - scores.max(axis=-1, keepdims=True)), cache


def _unrotated_last(keys, values, q, k):
    keys = keys.copy()
    keys[-1] = k
    return keys, values


def _grown_along_heads(cache, q, k, v, position):
    return None, (np.concatenate([cache[0], k[:, None]], axis=1), cache[1])


DECODE_STEP = {
    "rope-at-zero": lambda ref: _decoding(ref, rope_at="zero"),
    "position-from-cache-length": lambda ref: _decoding(ref, rope_at="length"),
    "unrotated-in-cache": lambda ref: _caching(ref, _unrotated_last),
    "cache-rotated-twice": lambda ref: _decoding(ref, rotate_cache=True),
    "gqa-interleaved": lambda ref: _decoding(ref, kv_heads="tile"),
    "masks-own-token": lambda ref: _attends_to_the_cache_only,
    "scale-by-d": lambda ref: _decoding(ref, scale_by_d=True),
    "no-scale": lambda ref: _decoding(ref, unscaled=True),
    "cache-grows-wrong-axis": lambda ref: _grown_along_heads,
    "cache-repeats-heads": lambda ref: _caching(ref, lambda keys, values, q, k: tuple(
        np.repeat(a, q.shape[0] // k.shape[0], axis=1) for a in (keys, values))),
    "cache-upcast": lambda ref: _caching(ref, lambda keys, values, q, k: (
        keys.astype(np.float64), values.astype(np.float64))),
}  # fmt: skip

# -- 09 ---------------------------------------------------------------------------------------
def _plus(extra):
    return lambda ref: lambda config, *args: ref(config, *args) + extra(config, *args)


def _closed_form(config, b, s):
    h, n, i, v, N = config.dim, config.n_heads, config.ffn_dim, config.vocab_size, config.n_layers
    return (
        N * (6 * b * s * h**2 + 4 * b * s * s * h + 3 * b * s * s * n + 2 * b * s * h**2)
        + N * 6 * b * s * h * i
        + 2 * b * s * h * v
    )


def _rope_on_keys(ref):
    return lambda c, b, s: ref(c, b, s) + c.n_layers * 3 * b * s * c.n_kv_heads * c.head_dim


FORWARD_FLOPS = {
    "big-terms-only": lambda ref: _closed_form,
    "gqa-ignored": _plus(
        lambda c, b, s: c.n_layers * 4 * b * s * c.dim * (c.dim - c.n_kv_heads * c.head_dim)
    ),
    "norms-miscounted": _plus(lambda c, b, s: -c.n_layers * (4 * b * s * c.dim + 2 * b * s)),
    "rope-on-keys": _rope_on_keys,
    "lm-head-per-layer": _plus(lambda c, b, s: (c.n_layers - 1) * 2 * b * s * c.dim * c.vocab_size),
    "embedding-as-matmul": _plus(lambda c, b, s: 2 * b * s * c.dim * c.vocab_size),
    "causal-halved": _plus(lambda c, b, s: -c.n_layers * (  # half of QKᵀ, softmax and PV
        2 * b * s * s * c.dim + 1.5 * b * s * s * c.n_heads)),
}

COUNT_PARAMS = {
    "tied-embeddings": _plus(lambda c: -c.vocab_size * c.dim),
    "gqa-ignored": _plus(lambda c: 2 * c.n_layers * c.dim * (c.dim - c.n_kv_heads * c.head_dim)),
    "no-norm-weights": _plus(lambda c: -(2 * c.n_layers + 1) * c.dim),
    "no-final-norm": _plus(lambda c: -c.dim),
    "two-mlp-matrices": _plus(lambda c: -c.n_layers * c.dim * c.ffn_dim),
}


def _budgeting(kv_heads=False, keys_only=False, one_moment=False, no_master=False,
               master_always=False, grads_fp32=False, no_recompute=False, no_block=False,
               acts_fp32=False):
    """memory_budget() with one mistake switched on."""

    def memory_budget(config, batch, seq, dtype_bytes=2, recompute="none"):
        b, s, h, i, v = batch, seq, config.dim, config.ffn_dim, config.vocab_size
        N, d = config.n_layers, config.head_dim
        kv = (config.n_heads if kv_heads else config.n_kv_heads) * d
        P = N * (2 * h * h + 2 * h * config.n_kv_heads * d + 3 * h * i + 2 * h) + 2 * v * h + h
        master = 4 if master_always or (dtype_bytes < 4 and not no_master) else 0
        kv_width = config.n_kv_heads * d
        block = 6 * b * s * h + 2 * b * s * kv_width + 4 * b * s * i
        scores = b * config.n_heads * s * s
        final = 2 * b * s * h + 2 * b * s * v
        mode = "none" if no_recompute else recompute
        if mode == "none":
            acts = N * (block + scores) + final
        elif mode == "selective":
            acts = N * block + final
        else:
            acts = N * b * s * h + (0 if no_block else block + scores) + final
        return {"weights": P * dtype_bytes, "gradients": P * (4 if grads_fp32 else dtype_bytes),
                "optimizer": P * ((4 if one_moment else 8) + master),
                "activations": acts * (4 if acts_fp32 else dtype_bytes),
                "kv_cache": (1 if keys_only else 2) * N * kv * s * b * dtype_bytes}

    return memory_budget


TRAINING_MEMORY = {
    "kv-gqa-ignored": lambda ref: _budgeting(kv_heads=True),
    "kv-keys-only": lambda ref: _budgeting(keys_only=True),
    "kv-one-sequence": lambda ref: lambda config, batch, *args: {
        **ref(config, batch, *args), "kv_cache": ref(config, 1, *args)["kv_cache"]},
    "one-adam-moment": lambda ref: _budgeting(one_moment=True),
    "no-master-copy": lambda ref: _budgeting(no_master=True),
    "master-copy-in-fp32-training": lambda ref: _budgeting(master_always=True),
    "gradients-in-fp32": lambda ref: _budgeting(grads_fp32=True),
    "recompute-ignored": lambda ref: _budgeting(no_recompute=True),
    "full-without-the-recomputed-block": lambda ref: _budgeting(no_block=True),
    "activations-in-fp32": lambda ref: _budgeting(acts_fp32=True),
}


def _splitting(dp_splits_model=False, dp_whole_batch=False, tp_splits_every_weight=False,
               tp_acts_whole=False, tp_splits_every_act=False, ring=None, tp_forward_only=False):
    """parallel_budget() with one mistake switched on (``ring``: the bytes sent per byte of an
    all-reduced buffer, as a function of the devices)."""

    def parallel_budget(config, batch, seq, devices, strategy):
        h, i, v, N, n = config.dim, config.ffn_dim, config.vocab_size, config.n_layers, devices
        kv, tensor = config.n_kv_heads * config.head_dim, strategy == "tensor"
        b, s = (batch if tensor or dp_whole_batch else batch // n), seq
        matrices = N * (2 * h * h + 2 * h * kv + 3 * h * i)
        P = matrices + 2 * v * h + (2 * N + 1) * h
        if tensor:
            held = P // n if tp_splits_every_weight else matrices // n + P - matrices
        else:
            held = P // n if dp_splits_model else P
        replicated = N * 4 * b * s * h + 2 * b * s * h + 2 * b * s * v
        split = N * (b * s * (h + 2 * kv) + b * config.n_heads * s * s + b * s * h + 4 * b * s * i)
        acts = replicated + split
        if tensor and tp_splits_every_act:
            acts = acts // n
        elif tensor and not tp_acts_whole:
            acts = replicated + split // n
        buffer = (2 if tp_forward_only else 4) * N * b * s * h * 2 if tensor else 2 * P
        sent = (ring or (lambda n: 2 * (n - 1) / n))(n) * buffer
        return {"weights": 2 * held, "gradients": 2 * held, "optimizer": 12 * held,
                "activations": 2 * acts, "communication": sent}

    return parallel_budget


PARALLEL_MEMORY = {
    "data-parallel-splits-the-model": lambda ref: _splitting(dp_splits_model=True),
    "data-parallel-whole-batch": lambda ref: _splitting(dp_whole_batch=True),
    "tensor-parallel-splits-every-weight": lambda ref: _splitting(tp_splits_every_weight=True),
    "tensor-parallel-activations-whole": lambda ref: _splitting(tp_acts_whole=True),
    "tensor-parallel-splits-every-activation": lambda ref: _splitting(tp_splits_every_act=True),
    "all-reduce-counted-once": lambda ref: _splitting(ring=lambda n: 1),
    "all-reduce-without-(n-1)/n": lambda ref: _splitting(ring=lambda n: 2),
    "all-reduce-one-phase": lambda ref: _splitting(ring=lambda n: (n - 1) / n),
    "tensor-parallel-forward-only": lambda ref: _splitting(tp_forward_only=True),
}

WRONG_ANSWERS = {
    "01.guard_key": GUARD_KEY, "01.relu_cond": RELU_COND, "01.evaluate": EVALUATE,
    "02.central_difference": CENTRAL_DIFFERENCE, "02.dual": DUAL, "02.jvp_rules": JVP_RULES,
    "03.gradient": GRADIENT, "03.div_rule": DIV_RULE, "03.vjp_rules": VJP_RULES,
    "04.softmax_ce_grad": SOFTMAX_CE_GRAD, "04.mlp_grads": MLP_GRADS,
    "04.norm_backward": NORM_BACKWARD,
    "05.contiguous_strides": CONTIGUOUS_STRIDES, "05.permuted": PERMUTED, "05.can_view": CAN_VIEW,
    "05.add_views": ADD_VIEWS,
    "06.intensity": INTENSITY, "06.fold_batchnorm": FOLD_BATCHNORM, "06.swiglu": SWIGLU,
    "07.scale_add": SCALE_ADD, "07.softmax_rows": SOFTMAX_ROWS,
    "07.tiled_matmul": TILED_MATMUL, "07.warp_sum": WARP_SUM,
    "08.rmsnorm": RMSNORM, "08.attention": ATTENTION, "08.decode_step": DECODE_STEP,
    "09.forward_flops": FORWARD_FLOPS, "09.count_params": COUNT_PARAMS,
    "09.training_memory": TRAINING_MEMORY, "09.parallel_memory": PARALLEL_MEMORY,
}  # fmt: skip
CASES = [(e, name) for e, wrong in WRONG_ANSWERS.items() for name in wrong]


def test_every_named_mistake_has_a_wrong_answer():
    assert sorted(WRONG_ANSWERS) == sorted(EXERCISES)
    for exercise_id, wrong in WRONG_ANSWERS.items():
        assert sorted(wrong) == sorted(m.name for m in EXERCISES[exercise_id].mistakes), exercise_id


@pytest.mark.parametrize("exercise_id, mistake", CASES, ids=[f"{e}-{m}" for e, m in CASES])
def test_a_wrong_answer_gets_its_hint(exercise_id, mistake):
    answer = WRONG_ANSWERS[exercise_id][mistake](_reference(exercise_id))
    verdict = verify(exercise_id, answer)
    hint = next(m.hint for m in EXERCISES[exercise_id].mistakes if m.name == mistake)
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == mistake, verdict.message
    assert str(verdict).endswith(f"\n  Hint: {hint}")


# -- 07 on a GPU: the signature read from the source ------------------------------------------
@needs_gxx("comparing with the emulator's compiled signature")
@pytest.mark.parametrize(("exercise_id", "kernel"), [("07.scale_add", "scale_add"),
                                                     ("07.softmax_rows", "softmax_rows")])
def test_the_gpu_check_reads_the_signature_the_emulator_compiles(exercise_id, kernel):
    """CuPy's kernels do not report their parameters, so on a GPU the check reads them from
    the source: the same names as the emulator's compiled ones, swapped parameters included."""
    from course_lib.kernels import emulator

    right = _reference(exercise_id)
    swapped = SCALE_ADD["signature"](right) if kernel == "scale_add" else right.replace(
        "int rows, int cols", "int cols, float rows")
    assert swapped != right
    for source in (right, swapped):
        compiled = emulator.compile_module(source, f"{kernel}.cu").get_function(kernel)
        assert declared_params(source, kernel) == compiled.param_types



@needs_gxx("running the assignments' launches in the emulator")
@pytest.mark.parametrize(("exercise_id", "counted_mistake", "passes_uncounted"),
                         [("07.tiled_matmul", "not-tiled", True),
                          ("07.warp_sum", "no-shuffle", False)])  # fmt: skip
def test_an_assignment_says_so_where_no_emulator_counts_its_launches(
    exercise_id, counted_mistake, passes_uncounted, monkeypatch
):
    """Only the emulator counts, so on a GPU without g++ the verdict says the counters were
    not checked: the naive matmul passes there (the shared-memory tree still fails, on its
    block of 96 threads, not a power of two), and a stub is still "not done"."""
    monkeypatch.setattr(gpu_kernels._Device, "emulator", lambda device: None)
    right = _reference(exercise_id)
    verdict = verify(exercise_id, right)
    assert verdict.passed, verdict.message
    assert verdict.message.endswith("; " + gpu_assignments.NO_EMULATOR)
    wrong = WRONG_ANSWERS[exercise_id][counted_mistake](right)
    assert verify(exercise_id, wrong).passed == passes_uncounted
    stub = re.sub(r"// BEGIN SOLUTION.*?// END SOLUTION", "", right, flags=re.DOTALL)
    assert verify(exercise_id, stub).status == "not done"


@needs_gxx("running the tiled matmul in the emulator")
def test_the_librarys_tiled_matmul_renamed_is_not_the_answer():
    """07.tiled_matmul is C = A B^T with B stored N x K: matmul_tiled.cu (C = A @ B, shipped in
    the student release), renamed, reads B's floats as K x N and fails, told why."""
    assert verify("07.tiled_matmul", _reference("07.tiled_matmul")).passed
    shipped = _shipped_tiled_matmul()
    assert "B[(k0 + ty) * N + col]" in shipped  # the A @ B kernel the review found
    verdict = verify("07.tiled_matmul", shipped)
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == "a-times-b", verdict.message
    assert "M, N, K = 48, 48, 48" in verdict.message and "C is off by" in verdict.message


@pytest.mark.parametrize(("source", "want"), [
    ('extern "C" __global__ void k(const float* __restrict__ x, /* n, */ int n) {}',
     ("float32*", "int32")),
    ('extern "C" __global__ void k(void) {}', ()),
    ('extern "C" __global__ void k(double **p, // rows\n unsigned int m) {}',
     ("float64**", "uint32")),
    ("#define ARGS float* x\nextern \"C\" __global__ void k(ARGS) {}", None),
    ('extern "C" __global__ void k(half* x) {}', None),
    ('extern "C" __global__ void other(float* x) {}', None),
])  # fmt: skip
def test_a_signature_not_plain_enough_to_read_is_left_to_the_run(source, want):
    assert declared_params(source, "k") == want


# -- any exercise: an answer that changes the arrays it is given ------------------------------
def test_an_answer_that_changes_an_array_it_was_given_is_wrong():
    """fold_batchnorm that scales W in place returns the right arrays, but the caller's
    convolution has lost its weights: every check's ``call`` compares its array arguments."""
    right = _reference("06.fold_batchnorm")

    def in_place(W, B, gamma, beta, mean, var, eps):
        W2, B2 = right(W, B, gamma, beta, mean, var, eps)
        W[...] = W2
        return W, B2

    verdict = verify("06.fold_batchnorm", in_place)
    assert verdict.status == "failed" and verdict.mistake == "changed-input", verdict.message
    assert "changed its argument 1 in place" in verdict.message
    assert verify("06.fold_batchnorm", right).passed


# -- 01.evaluate: more ways to get the freeing wrong ------------------------------------------
def _deletes_each_use(outputs, feed):
    """Deletes a value at its last use once per input slot: x * x deletes x twice."""
    order = cl.topological_order(outputs)
    last_use = {source: step for step, node in enumerate(order) for source in node.inputs}
    values, peak = {}, 0
    for step, node in enumerate(order):
        values[node] = (feed[node] if node.is_variable
                        else node.op.compute(np, *[values[s] for s in node.inputs]))  # fmt: skip
        peak = max(peak, sum(np.size(v) for v in values.values()))
        for source in node.inputs:
            if last_use[source] == step and source not in outputs:
                del values[source]
    return [values[o] for o in outputs], peak


def _keeps_values_in_feed(outputs, feed):
    """Right values and peak, but the caller's feed dict is used as the store (and emptied)."""
    result = _reference("01.evaluate")(outputs, feed)
    feed.clear()
    return result


@pytest.mark.parametrize(("answer", "mistake", "says"), [
    (_deletes_each_use, "frees-too-early", "raised KeyError"),
    (lambda outputs, feed: _reference("01.evaluate")(list(dict.fromkeys(outputs)), feed),
     "outputs-out-of-order", "returned 2 values for 3 outputs"),
    (_keeps_values_in_feed, None, "changed the feed dict"),
    (lambda outputs, feed: (_reference("01.evaluate")(outputs, feed)[0], 1.0), None,
     "it must be an int"),
])  # fmt: skip
def test_evaluate_answers_that_free_twice_drop_repeats_or_change_the_feed(answer, mistake, says):
    verdict = verify("01.evaluate", answer)
    assert verdict.status == "failed" and verdict.mistake == mistake, verdict.message
    assert says in verdict.message


# -- 02 and 03: the op rules' mistakes made another way, and answers of the wrong form ----------
def _first_maximum_only(inputs, attrs):
    """1 at the first maximum along an int axis (NumPy's argmax), 0 elsewhere."""
    x, axis = inputs[0], attrs["axis"]
    mask = np.zeros_like(x)
    np.put_along_axis(mask, np.argmax(x, axis=axis, keepdims=True), 1.0, axis=axis)
    return mask


def _on_int_axis(rule):
    """``rule`` for a reduction over one int axis, the reference answer otherwise."""
    return lambda ref, ins, out, v, **a: (rule(ref, ins, out, v, **a) if type(a["axis"]) is int
                                         else ref("max", ins, out, v, **a))  # fmt: skip


@pytest.mark.parametrize(("exercise_id", "answer", "mistake"), [
    ("03.vjp_rules", _replacing("matmul", lambda ref, ins, out, g: (   # batch axes not summed
        g @ np.swapaxes(ins[1], -1, -2), np.swapaxes(ins[0], -1, -2) @ g)), "not-unbroadcast"),
    ("03.vjp_rules", _replacing("matmul", lambda ref, ins, out, g: (   # .T: every axis reversed
        _sum_to(g @ ins[1].T, ins[0].shape), _sum_to(ins[0].T @ g, ins[1].shape))),
     "matmul-transpose-order"),
    ("03.vjp_rules", _replacing("sum", lambda ref, ins, out, g, axis, keepdims: (  # last axis
        np.broadcast_to(g if keepdims else g[..., None], ins[0].shape).copy(),)),
     "reduced-axes-not-restored"),
    ("03.vjp_rules", _replacing("max", _on_int_axis(lambda ref, ins, out, g, **a: (
        ref("sum", ins, out, g, **a)[0] * _first_maximum_only(ins, a),))), "max-ties"),
    ("03.vjp_rules", _replacing("log_softmax", lambda ref, ins, out, g: (
        g - out * _rowsum(g),)), "log-softmax-exp"),
    ("03.vjp_rules", _replacing("log_softmax", lambda ref, ins, out, g: (
        g - np.exp(out) * _rowsum(g, keepdims=False),)), "row-sum-not-kept"),
    ("02.jvp_rules", _replacing("max", _on_int_axis(lambda ref, ins, out, d, **a: ref(
        "sum", ins, out, (d[0] * _first_maximum_only(ins, a),), **a))), "max-ties"),
    ("02.jvp_rules", _replacing("div", lambda ref, ins, out, d: d[0] / ins[1]), "quotient-rule"),
    ("02.jvp_rules", _replacing("mean", lambda ref, ins, out, d, **a: d[0] / out.size),
     "tangent-not-reduced"),
    ("06.swiglu", lambda ref: _swiglu_with(  # np.prod's np.int64, 4 per element
        ref, flops=lambda self, out, a, b: 4 * np.prod(out, dtype=np.int64)), "flops-miscounted"),
    ("06.swiglu", lambda ref: _swiglu_with(
        ref, flops=lambda self, out, a, b: np.int64(math.prod(out))), "flops-not-counted"),
])  # fmt: skip
def test_op_rule_mistakes_made_another_way_get_their_hint(exercise_id, answer, mistake):
    verdict = verify(exercise_id, answer(_reference(exercise_id)))
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == mistake, verdict.message


@pytest.mark.parametrize(("exercise_id", "answer", "says"), [
    ("03.vjp_rules", _replacing("sum", lambda ref, *args, **a: ref("sum", *args, **a)[0]),
     "one adjoint per input, 1 here"),
    ("03.vjp_rules", _replacing("add", lambda ref, *args: list(ref("add", *args)[:1])),
     "one adjoint per input, 2 here"),
    ("03.vjp_rules", _replacing("mul", lambda ref, ins, out, g: (ins[0].__imul__(2), g)),
     "changed an array it was given in place"),
    ("02.jvp_rules", _replacing("add", lambda ref, *args: "a string"),
     "return a NumPy array of shape"),
])  # fmt: skip
def test_op_rule_answers_of_the_wrong_form_are_told_so(exercise_id, answer, says):
    verdict = verify(exercise_id, answer(_reference(exercise_id)))
    assert verdict.status == "failed" and says in verdict.message, verdict.message


# -- the grader's blind spots a student review found --------------------------------------------
def _reference_edited(exercise_id, old, new):
    """The reference answer of ``exercise_id`` with ``old`` replaced by ``new`` in its code."""
    exercise = notebook_exercises()[exercise_id]
    code = tuple(source.replace(old, new) for source in exercise.code)
    assert code != exercise.code, f"{old!r} is not in {exercise_id}'s reference answer"
    return reference_answer(dataclasses.replace(exercise, code=code))


@needs_gxx("running the row sum in the emulator")
def test_warp_sum_reading_warp_totals_nobody_wrote_fails():
    """The first warp reads all 32 warp totals, written only for the block's warps: on a GPU
    the others hold stale data, and the emulator's shared memory starts as NaN, not 0."""
    right = _reference("07.warp_sum")
    guarded = "sum = warp_total(lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f);"
    assert guarded in right
    verdict = verify("07.warp_sum", right.replace(guarded, "sum = warp_total(warp_totals[lane]);"))
    assert verdict.status == "failed", verdict.message
    assert "out gives [nan" in verdict.message
    assert verdict.mistake == "unwritten-shared"


def test_a_softmax_gradient_label_says_the_layout_when_it_is_not_row_major():
    verdict = verify("04.softmax_ce_grad", _one_hot_through_reshape)
    assert "(column-major logits)" in verdict.message and "reshape(-1)" in verdict.message


def test_a_numpy_scalar_for_two_0d_views_is_told_to_wrap_it():
    verdict = verify("05.add_views", _scalar_for_0d)
    assert verdict.mistake == "numpy-scalar" and "np.array(" in verdict.message, verdict.message


def _scalar_for_0d(a, b):
    """The reference answer, but a NumPy scalar (not a 0-d array) for two 0-d views."""
    result = _reference("05.add_views")(a, b)
    return result[()] if result.ndim == 0 else result


def test_intensity_counting_distinct_inputs_is_told_apart_from_loads_only():
    """x * x counted as one load and one store and as two loads give the same 1/2; the answer
    on C = A + B decides which mistake it is."""
    from course_lib.exercises import fusion

    a = cl.variable("a", (16,), np.float32)
    report = cl.perf.arithmetic_intensity([a * a])
    wrong = fusion._wrong_intensities([a * a], report)
    for mistake, answer in (("distinct-inputs", _counting(distinct=True)),
                            ("loads-only", _counting(count_stores=False))):  # fmt: skip
        got = answer([a * a])
        assert got == Fraction(1, 2)
        assert fusion._intensity_mistake(answer, got, wrong).name == mistake
    verdict = verify("06.intensity", _counting(distinct=True))
    assert verdict.mistake == "distinct-inputs" and "intensity([(A*A)])" in verdict.message


def test_gradient_looking_up_an_unused_input_gets_the_unused_input_hint():
    answer = _reference_edited("03.gradient",
                               "return [adjoint.get(x, cl.zeros_like(x)) for x in wrt]",
                               "return [adjoint[x] for x in wrt]")  # fmt: skip
    verdict = verify("03.gradient", answer)
    assert verdict.status == "failed" and verdict.mistake == "unused-input", verdict.message
    assert "raised KeyError" in verdict.message
    assert "z is an input the output does not use" in verdict.message


def test_gradient_key_error_for_a_used_node_is_still_the_walk_order():
    def forward_walk(out, wrt):
        adjoint = {}
        for node in cl.topological_order(out):  # the first node has no adjoint yet
            adjoint[node] = cl.sum_n(adjoint[node], cl.ones_like(node))
        return [adjoint[x] for x in wrt]

    verdict = verify("03.gradient", forward_walk)
    assert verdict.status == "failed" and verdict.mistake == "walk-order", verdict.message


@pytest.mark.parametrize(("finish", "shapes"), [
    (np.ravel, "has shape (6,), expected (2, 3)"),
    (np.ascontiguousarray, "has shape (1,), expected ()"),
])  # fmt: skip
def test_add_views_in_the_wrong_shape_gets_the_shape_hint(finish, shapes):
    right = _reference("05.add_views")
    verdict = verify("05.add_views", lambda a, b: finish(right(a, b)))
    assert verdict.status == "failed" and verdict.mistake == "result-shape", verdict.message
    assert shapes in verdict.message


def test_norm_backward_with_eps_outside_the_root_in_the_closed_form_gets_its_hint():
    """The usual slip: r = 1/(sqrt(var) + ε) put into the right closed form (whose dr/dvar
    = −r³/2 holds for ε inside the root), off by about 1e-5."""
    answer = _reference_edited(
        "04.norm_backward",
        "r = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)",
        "r = 1.0 / (np.sqrt((centred * centred).mean(axis=-1, keepdims=True)) + eps)")
    verdict = verify("04.norm_backward", answer)
    assert verdict.status == "failed" and verdict.mistake == "eps-outside-root", verdict.message


@pytest.mark.parametrize(("old", "new", "says"), [
    ("block = 4 * b * s * h +", "block = 2 * b * s * h +",
     "per block: 817,889,280 elements, expected 851,443,712, a difference of −2·bsh elements; "
     "once (final RMSNorm, logits, softmax): 295,698,432 elements, right"),
    ("final = 2 * b * s * h + 2 * b * s * v", "final = b * s * h + b * s * v",
     "per block: 851,443,712 elements, right; once (final RMSNorm, logits, softmax): "
     "147,849,216 elements, expected 295,698,432, a difference of −bsh − bsv elements"),
])  # fmt: skip
def test_training_memory_says_which_stage_of_the_activations_differs(old, new, says):
    verdict = verify("09.training_memory", _reference_edited("09.training_memory", old, new))
    assert verdict.status == "failed" and verdict.mistake is None, verdict.message
    assert "['activations'] is" in verdict.message and says in verdict.message
