"""Review round 5 of the exercises: honest answers in an unusual style that were refused, a
cheat that passed, and wrong answers that got no hint or a misleading one."""

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np

import course_lib as cl
from course_lib.exercises import EXERCISES, verify


def _hint(exercise_id, mistake):
    return next(m.hint for m in EXERCISES[exercise_id].mistakes if m.name == mistake)


# -- 02.dual: a Dual that is a typing.NamedTuple ----------------------------------------------
class Dual(NamedTuple):
    val: float
    dot: float = 0.0

    def _lift(other):
        return other if isinstance(other, Dual) else Dual(float(other), 0.0)

    def __add__(self, other):
        other = Dual._lift(other)
        return Dual(self.val + other.val, self.dot + other.dot)

    __radd__ = __add__

    def __sub__(self, other):
        other = Dual._lift(other)
        return Dual(self.val - other.val, self.dot - other.dot)

    def __rsub__(self, other):
        return Dual._lift(other) - self

    def __mul__(self, other):
        other = Dual._lift(other)
        return Dual(self.val * other.val, self.dot * other.val + self.val * other.dot)

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = Dual._lift(other)
        return Dual(self.val / other.val, (self.dot * other.val - self.val * other.dot)
                    / other.val**2)  # fmt: skip

    def __rtruediv__(self, other):
        return Dual._lift(other) / self


def _dual_answer(dual):
    return SimpleNamespace(
        Dual=dual,
        sin=lambda d: dual(math.sin(d.val), math.cos(d.val) * d.dot),
        exp=lambda d: dual(math.exp(d.val), math.exp(d.val) * d.dot),
        log=lambda d: dual(math.log(d.val), d.dot / d.val),
    )


def test_a_named_tuple_dual_passes():
    """It was refused: "Dual(1.5, 0.7) returned a Dual, a subclass of tuple made by your code;
    return a plain tuple" (the exact-type rule is for results compared as a whole; a Dual's
    .val and .dot are read, each at its exact type)."""
    verdict = verify("02.dual", _dual_answer(Dual))
    assert verdict.passed, verdict.message


def test_a_named_tuple_dual_with_float_subclass_parts_is_still_refused():
    class Always(float):
        def __eq__(self, other):
            return True

    class Forged(NamedTuple):
        val: float
        dot: float

        def __add__(self, other):
            return Forged(Always(0.0), Always(0.0))

    verdict = verify("02.dual", _dual_answer(Forged))
    assert verdict.status == "failed" and "subclass of float" in verdict.message, verdict.message


# -- 05.permuted: transposes of helper arrays, arrays of the layout ---------------------------
def _permuted_by_a_table(shape, strides, axes):
    """Shape and strides side by side, transposed with .transpose() (an unrelated array)."""
    table = np.array([shape, strides], dtype=np.int64).reshape(2, len(shape)).transpose()
    picked = table[list(axes)].transpose()
    return tuple(int(n) for n in picked[0]), tuple(int(s) for s in picked[1])


def test_transposing_a_helper_array_is_not_refused():
    """``table.transpose()`` was refused as numpy.ndarray.transpose while ``table.T`` passed."""
    verdict = verify("05.permuted", _permuted_by_a_table)
    assert verdict.passed, verdict.message


def _permuted_by_an_ndarray_of_the_layout(shape, strides, axes):
    """An array with the given strides (np.ndarray over a buffer, not as_strided), permuted by
    np.einsum: NumPy does the whole exercise."""
    if 0 in shape:
        return tuple(shape[a] for a in axes), tuple(strides[a] for a in axes)
    offset = sum((1 - n) * s for n, s in zip(shape, strides) if s < 0)
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    view = np.ndarray(shape, np.int8, bytearray(extent), offset, strides)
    view = np.einsum(view, list(range(len(shape))), list(axes)) if shape else view
    return view.shape, view.strides


def test_an_array_of_the_layout_fails_on_a_layout_larger_than_memory():
    """It passed: np.ndarray(shape, dtype, buffer, offset, strides) is no forbidden function,
    and np.einsum permutes as transpose does."""
    verdict = verify("05.permuted", _permuted_by_an_ndarray_of_the_layout)
    assert verdict.status == "failed" and verdict.mistake == "makes-an-array", verdict.message
    assert str(verdict).endswith(_hint("05.permuted", "makes-an-array"))


def test_the_shape_read_off_a_transposed_empty_array_gets_a_hint_that_names_it():
    """Refused before as "numpy.ndarray.transpose, which this exercise rules out", while .T of
    the same array passed: now both fail the same way, on the layout too large to allocate."""
    for transpose in (lambda a, axes: a.transpose(axes), lambda a, axes: np.transpose(a, axes)):
        verdict = verify("05.permuted", lambda s, st, ax, t=transpose: (
            t(np.empty(s, np.int8), ax).shape, tuple(st[a] for a in ax)))  # fmt: skip
        assert verdict.mistake == "makes-an-array", verdict.message


# -- where installed code lies: one definition, symbolic links too ----------------------------
_ADD_VIEWS_WITH_NDINDEX = '''
import numpy as np
from course_lib.exercises import verify


def add_views(a, b):
    n = max(len(a.shape), len(b.shape))
    padded = [((1,) * (n - len(v.shape)) + v.shape, (0,) * (n - len(v.shape)) + v.strides)
              for v in (a, b)]
    shape = []
    for m, k in zip(padded[0][0], padded[1][0]):
        if m != k and 1 not in (m, k):
            raise ValueError(f"shapes {a.shape} and {b.shape} do not broadcast")
        shape.append(max(m, k))
    strides = [[0 if size == 1 else s for size, s in zip(*p)] for p in padded]
    out = np.empty(shape, np.result_type(a.buffer, b.buffer))
    for index in np.ndindex(*shape):  # NumPy's ndindex calls as_strided itself
        i = a.offset + sum(k * s for k, s in zip(index, strides[0]))
        j = b.offset + sum(k * s for k, s in zip(index, strides[1]))
        out[index] = a.buffer[i] + b.buffer[j]
    return out


print(verify("05.add_views", add_views).status)
'''


def test_numpy_is_trusted_in_a_virtualenv_reached_through_a_symbolic_link(tmp_path):
    """core._INSTALLED held the resolved folders only: with the virtualenv reached through a
    link, NumPy's code (its file names unresolved) counted as the answer's, and np.ndindex
    calling as_strided was refused as the answer calling it."""
    prefix = Path(sys.prefix)
    linked = tmp_path / "linked-env"
    linked.symlink_to(prefix, target_is_directory=True)
    python = linked / Path(sys.executable).relative_to(prefix)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(python), "-c", _ADD_VIEWS_WITH_NDINDEX], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)  # fmt: skip
    assert done.stdout.strip().splitlines()[-1:] == ["passed"], done.stdout + done.stderr


# -- wrong answers without a hint, or with a misleading one -----------------------------------
def test_a_central_difference_divided_by_2_then_times_eps_is_told_about_precedence():
    verdict = verify("02.central_difference", lambda f, x, eps: (f(x + eps) - f(x - eps)) / 2 * eps)
    assert verdict.mistake == "precedence", verdict.message


def test_relu_cond_taking_x_at_zero_is_told_why_the_slope_is_wrong():
    verdict = verify("01.relu_cond", lambda x: cl.cond(x >= 0, lambda: x, lambda: 0.0))
    assert verdict.mistake == "takes-x-at-zero", verdict.message


def test_attention_masking_the_diagonal_is_told_so():
    def attention(q, k, v):
        t, d = q.shape
        scores = q @ cl.matrix_transpose(k) / np.sqrt(d)
        return cl.softmax(scores + cl.constant(np.triu(np.full((t, t), -np.inf))), axis=-1) @ v

    verdict = verify("08.attention", attention)
    assert verdict.mistake == "masks-the-diagonal", verdict.message


def test_softmax_shifted_by_the_whole_arrays_max_gets_a_hint_that_says_so():
    """The hint spoke of exp(1000) overflowing; this answer underflows (a row far below the
    array's maximum is 0/0)."""
    def softmax_ce_grad(logits, targets):
        p = np.exp(logits - logits.max())
        p /= p.sum(axis=-1, keepdims=True)
        p[np.arange(len(targets)), targets] -= 1.0
        return p / len(targets)

    verdict = verify("04.softmax_ce_grad", softmax_ce_grad)
    assert verdict.mistake == "overflow", verdict.message
    assert "not the whole array's max" in verdict.message
