"""Answers that call the checkers' own code, or NumPy doing the exercise (grader review, round
3, severity 2): refused as ``uses-library``, wherever the call comes from (a renamed copy, a
helper compiled under a course_lib file name, an answer's ``__eq__``, a ``functools.partial``),
while honest answers that use NumPy or what the exercise hands them still pass."""

import functools
import os
import sys
import types

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import course_lib as cl
from course_lib.exercises import programming_models, strided_add, training, verify
from course_lib.strides import row_major_strides


def _oracle_sum(a, b):
    from course_lib.exercises.strided_add import _sum

    n = max(len(a.shape), len(b.shape))
    shapes = [(1,) * (n - len(v.shape)) + v.shape for v in (a, b)]
    return np.array(_sum(a, b, tuple(k if m == 1 else m for m, k in zip(*shapes))))


def _frame_globals_sum(a, b):  # no import: the checker's globals, read from the stack
    g = sys._getframe(2).f_globals
    return np.array(g["_sum"](a, b, g["_broadcast_shape"](a.shape, b.shape)))


class _OracleKey:
    """A jit guard key whose ``__eq__`` (answer code, called by the checker) asks the oracle."""

    def __init__(self, args):
        self.args = args

    def __hash__(self):
        return 0

    def __eq__(self, other):
        return programming_models._jit_reuses(self.args, other.args)


def _renamed_copy(function):
    return types.FunctionType(function.__code__.replace(co_name="mine"), function.__globals__)


def _via_a_course_lib_file_name():
    space = {}
    source = "def via(f, *a):\n    return f(*a)\n"
    exec(compile(source, os.path.join(os.path.dirname(cl.__file__), "helpers.py"), "exec"), space)
    return lambda shape: space["via"](row_major_strides, shape)


ORACLE_CALLS = [
    ("05.add_views", _oracle_sum, "_sum"),
    ("05.add_views", _frame_globals_sum, "the checker's own code"),
    ("04.norm_backward", lambda *args: training._numpy_norm_grads(*args), "_numpy_norm_grads"),
    ("04.norm_backward", lambda *args: training._oracle_norm_grads(*args), "_oracle_norm_grads"),
    ("04.mlp_grads", lambda x, y, w1, w2: tuple(training._mlp_gradients(
        {"x": x, "y": y, "w1": w1, "w2": w2})), "_mlp_gradients"),  # it calls cl.grad itself
    ("04.softmax_ce_grad", lambda logits, targets: training._finite_differences(
        np.array(logits), targets), "_finite_differences"),
    ("05.add_views", functools.partial(strided_add._sum), "own function"),
    ("05.contiguous_strides", _renamed_copy(row_major_strides), "own function"),
    ("05.contiguous_strides", _via_a_course_lib_file_name(), "row_major_strides"),
    ("05.contiguous_strides", functools.partial(row_major_strides), "own function"),
]  # fmt: skip


def _refused(exercise_id, answer, named) -> None:
    verdict = verify(exercise_id, answer)
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == "uses-library", verdict.message
    assert named in verdict.message


@pytest.mark.parametrize("exercise_id, answer, named", ORACLE_CALLS)
def test_an_answer_calling_the_checkers_own_code_is_refused(exercise_id, answer, named):
    _refused(exercise_id, answer, named)


def test_a_key_whose_eq_asks_the_oracle_is_refused_before_its_eq_runs():
    """A key of the answer's own class is refused as such (review 10), so the checker never
    calls its ``__eq__``, which would ask ``_jit_reuses``."""
    verdict = verify("01.guard_key", _OracleKey)
    assert verdict.status == "failed", verdict.message
    assert "a class made by your code" in verdict.message


def _view(v):
    itemsize = v.buffer.itemsize
    return as_strided(v.buffer[v.offset:], v.shape, tuple(s * itemsize for s in v.strides))


def _can_view_by_numpy(shape, strides, new_shape):
    view = as_strided(np.zeros(1, np.int8), shape, strides)
    return view.size == 0 or np.shares_memory(view.reshape(new_shape), view)


def _can_view_by_reshape(shape, strides, new_shape):
    return np.reshape(np.zeros(shape, np.int8), new_shape) is not None


NUMPY_ROUTES = [
    ("05.permuted", lambda s, st, ax: (lambda v: (v.shape, v.strides))(
        as_strided(np.zeros(1, np.int8), s, st).transpose(ax)), "as_strided"),
    ("05.can_view", _can_view_by_numpy, "as_strided"),
    ("05.can_view", _can_view_by_reshape, "numpy.reshape"),
    ("05.add_views", lambda a, b: np.array(_view(a) + _view(b)), "as_strided"),
    ("05.add_views", lambda a, b: np.add(*np.broadcast_arrays(a.buffer[:1], b.buffer[:1])),
     "numpy.broadcast_arrays"),
]  # fmt: skip


@pytest.mark.parametrize("exercise_id, answer, named", NUMPY_ROUTES)
def test_numpy_doing_the_exercise_is_refused(exercise_id, answer, named):
    _refused(exercise_id, answer, named)


def test_strides_read_off_a_numpy_array_fail_on_a_shape_too_large_to_allocate():
    verdict = verify("05.contiguous_strides", lambda shape: tuple(np.empty(shape, np.int8).strides))
    assert verdict.status == "failed" and verdict.mistake == "makes-an-array", verdict.message


HONEST = [
    ("05.contiguous_strides",
     lambda s: tuple(int(x) for x in np.cumprod((s[1:] + (1,))[::-1])[::-1]) if s else ()),
    ("05.permuted", lambda s, st, ax: (tuple(np.array(s, int)[list(ax)].tolist()),
                                       tuple(np.array(st, int)[list(ax)].tolist()))),
]  # fmt: skip


@pytest.mark.parametrize("exercise_id, answer", HONEST)
def test_honest_answers_using_numpy_still_pass(exercise_id, answer):
    verdict = verify(exercise_id, answer)
    assert verdict.passed, verdict.message


def test_printing_a_dataclass_is_not_calling_the_checkers_code(capsys):
    """Every dataclass's repr runs one standard-library wrapper, which functools.wraps labels
    with the module of the first dataclass it wrapped (course_lib.exercises.core's): printing
    the LlamaConfig an answer is given was refused as calling the checker's own code."""
    def count_params(config):
        print("config:", config)
        h, i, v, n = config.dim, config.ffn_dim, config.vocab_size, config.n_layers
        kv = config.n_kv_heads * config.head_dim
        return n * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + 2 * v * h + h

    verdict = verify("09.count_params", count_params)
    assert verdict.status == "passed", verdict.message


def test_a_dataclass_dual_is_the_students_own():
    """A @dataclass Dual(val, dot): its generated __eq__ has the bytecode of the library's
    frozen Dual's (same fields), compiled under "<string>": not a renamed copy."""
    import dataclasses
    import math
    from types import SimpleNamespace

    @dataclasses.dataclass
    class Dual:
        val: float
        dot: float = 0.0

        @staticmethod
        def lift(o):
            return o if isinstance(o, Dual) else Dual(float(o), 0.0)

        def __add__(self, o):
            o = Dual.lift(o)
            return Dual(self.val + o.val, self.dot + o.dot)

        __radd__ = __add__

        def __sub__(self, o):
            o = Dual.lift(o)
            return Dual(self.val - o.val, self.dot - o.dot)

        def __rsub__(self, o):
            return Dual.lift(o) - self

        def __mul__(self, o):
            o = Dual.lift(o)
            return Dual(self.val * o.val, self.dot * o.val + self.val * o.dot)

        __rmul__ = __mul__

        def __truediv__(self, o):
            o = Dual.lift(o)
            return Dual(self.val / o.val, (self.dot * o.val - self.val * o.dot) / o.val**2)

        def __rtruediv__(self, o):
            return Dual.lift(o) / self

    answer = SimpleNamespace(
        Dual=Dual,
        sin=lambda d: Dual(math.sin(d.val), math.cos(d.val) * d.dot),
        exp=lambda d: Dual(math.exp(d.val), math.exp(d.val) * d.dot),
        log=lambda d: Dual(math.log(d.val), d.dot / d.val),
    )
    verdict = verify("02.dual", answer)
    assert verdict.status == "passed", verdict.message
