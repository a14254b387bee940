"""Review round 5 of the exercises: honest answers in an unusual style that were refused, a
cheat that passed, and wrong answers that got no hint or a misleading one."""

import dataclasses
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from course_lib.exercises import EXERCISES, check, check_guess, verify


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
        shape.append(k if m == 1 else m)
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


# -- review round 6: a wrong answer that passed, messages, hints ------------------------------
def _softmax_ce_grad_in_float64(logits, targets):
    """Right numbers, but float32 logits give a float64 gradient (upcast, never cast back)."""
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    p[np.arange(len(targets)), targets] -= 1.0
    return p / len(targets)


def test_a_softmax_gradient_in_float64_for_float32_logits_fails():
    """It passed: every case was float64."""
    verdict = verify("04.softmax_ce_grad", _softmax_ce_grad_in_float64)
    assert verdict.mistake == "keeps-dtype", verdict.message
    assert "float32 logits" in verdict.message and "returned a float64 array" in verdict.message


def test_a_softmax_gradient_in_the_logits_dtype_passes_on_float32():
    def softmax_ce_grad(logits, targets):  # the one-hot in the logits' dtype
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        one_hot = np.eye(logits.shape[1], dtype=logits.dtype)[targets]
        return (e / e.sum(axis=-1, keepdims=True) - one_hot) / len(targets)

    verdict = verify("04.softmax_ce_grad", softmax_ce_grad)
    assert verdict.passed and "float32" in verdict.message, verdict.message


def test_a_result_of_the_wrong_type_is_named_without_a_stray_space():
    """It said "returned list ; it must return ..." (an empty shape for a list)."""
    verdict = verify("04.softmax_ce_grad", lambda logits, targets: [0.0])
    assert "returned list; it must return an array" in verdict.message, verdict.message
    verdict = verify("04.norm_backward", lambda kind, dy, x, gamma, eps: [dy])
    assert "returned list; it must return a dict" in verdict.message, verdict.message


def test_rmsnorm_with_the_mean_down_axis_0_gets_a_hint():
    verdict = verify("08.rmsnorm", lambda x, w, eps: x * cl.rsqrt(
        cl.mean(x * x, axis=0) + eps) * w)  # fmt: skip
    assert verdict.mistake == "mean-over-axis-0", verdict.message


def test_contiguous_strides_wrapping_around_in_int32_gets_the_overflow_hint():
    def contiguous_strides(shape):
        strides = [1] * len(shape)
        for k, stride in enumerate(np.cumprod(shape[:0:-1], dtype=np.int32)):
            strides[-2 - k] = stride
        return tuple(strides)

    verdict = verify("05.contiguous_strides", contiguous_strides)
    assert verdict.mistake == "overflow", verdict.message


def test_a_central_difference_of_half_steps_gets_a_hint():
    verdict = verify("02.central_difference", lambda f, x, e: (f(x + e / 2) - f(x - e / 2)) / e)
    assert verdict.mistake == "half-steps", verdict.message


_CALLS_THE_CHECKERS_OWN_STRIDES = '''
import course_lib
from course_lib.exercises import layouts, verify

print(course_lib.__file__)
print(verify("05.contiguous_strides", lambda shape: layouts._strides_of(shape, "C")).status)
'''


def test_the_checkers_own_code_is_refused_in_a_checkout_reached_through_a_symbolic_link(
        tmp_path):  # fmt: skip
    """core._EXERCISES and _PACKAGE held the resolved folders only (guard.py its own, unresolved
    one): with course_lib imported through a link, no code counted as the checkers' own, and an
    answer calling the checker's oracle passed."""
    linked = tmp_path / "linked-checkout"
    linked.symlink_to(Path(cl.__file__).resolve().parent.parent, target_is_directory=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(linked)}
    done = subprocess.run([sys.executable, "-c", _CALLS_THE_CHECKERS_OWN_STRIDES], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines[:1] == [str(linked / "course_lib" / "__init__.py")], done.stdout + done.stderr
    assert lines[-1:] == ["failed"], done.stdout + done.stderr


# -- review round 6: exercises the earlier rounds did not reach ------------------------------
def _edited(exercise_id, old, new):
    """The reference answer of ``exercise_id`` with ``old`` replaced by ``new`` in its code."""
    exercise = notebook_exercises()[exercise_id]
    code = tuple(source.replace(old, new) for source in exercise.code)
    assert code != exercise.code, f"{old!r} is not in {exercise_id}'s reference answer"
    return reference_answer(dataclasses.replace(exercise, code=code))


@pytest.mark.parametrize(("exercise_id", "old", "new", "mistake"), [
    ("01.evaluate", "sum(np.size(value) for value in values.values())",
     "sum(value.nbytes for value in values.values())", "peak-not-elements"),
    ("02.jvp_rules", "return output * (dx - np.sum(output * dx, axis=-1, keepdims=True))",
     "return output * (1 - output) * dx", "softmax-diagonal-only"),
    ("03.vjp_rules", "return (output * (g - np.sum(output * g, axis=-1, keepdims=True)),)",
     "return (output * (1 - output) * g,)", "softmax-diagonal-only"),
    ("02.jvp_rules", "return dx - np.sum(np.exp(output) * dx, axis=-1, keepdims=True)",
     "return dx - np.exp(output) * np.sum(dx, axis=-1, keepdims=True)",
     "log-softmax-other-mode"),
    ("03.vjp_rules", "return (g - np.exp(output) * np.sum(g, axis=-1, keepdims=True),)",
     "return (g - np.sum(np.exp(output) * g, axis=-1, keepdims=True),)",
     "log-softmax-other-mode"),
    ("04.norm_backward", "rows = tuple(range(x.ndim - 1))", "rows = 0",  # the batch axis only
     "not-summed-over-rows"),
    ("06.swiglu", "return 5 * math.prod(out_shape)", "return 4 * math.prod(out_shape)",
     "flops-miscounted"),
    ("06.swiglu", "return 5 * math.prod(out_shape)", "return 5 * math.prod(a_shape)",
     "flops-of-an-input"),
    ("09.count_params", "3 * h * i + 2 * h", "3 * h * i + h", "no-norm-weights"),
    ("09.forward_flops",
     "2 * b * s * s * n * d + 3 * b * s * s * n + 2 * b * s * s * n * d  # QKᵀ, softmax, PV",
     "(2 * b * s * s * n * d + 3 * b * s * s * n + 2 * b * s * s * n * d) / 2",
     "causal-halved"),
    ("09.training_memory", "2 * N * kv * s * b * dtype_bytes", "2 * N * kv * s * dtype_bytes",
     "kv-one-sequence"),
    ("09.parallel_memory", "ring = 2 * (n - 1) / n", "ring = (n - 1) / n",
     "all-reduce-one-phase"),
    ("09.parallel_memory", "params = block_matrices // split + 2 * v * h",
     "params = (block_matrices + 2 * v * h) // split", "tensor-parallel-splits-every-weight"),
])  # fmt: skip
def test_a_typical_wrong_answer_gets_its_hint(exercise_id, old, new, mistake):
    """Each got no hint."""
    verdict = verify(exercise_id, _edited(exercise_id, old, new))
    assert verdict.status == "failed" and verdict.mistake == mistake, verdict.message


# -- review round 7: what students met in the notebooks -------------------------------------
def _endless_strides(shape):
    if len(shape) == 0:
        return ()
    return _endless_strides(shape)


def test_endless_recursion_is_reported_as_such():
    """It said "your answer switched off the profiler that watches library calls": the
    RecursionError had killed the profile hook too."""
    verdict = verify("05.contiguous_strides", _endless_strides)
    assert verdict.status == "failed", verdict.message
    assert "RecursionError: maximum recursion depth exceeded — a recursive call that never " \
        "reaches its base case" in verdict.message, verdict.message
    assert "profiler" not in verdict.message, verdict.message


def _down(depth):
    return _down(depth + 1)


def test_killing_the_profiler_by_a_recursion_it_catches_is_still_caught():
    """The profiler is off after the recursion; the library's strides behind it must not pass."""

    def contiguous_strides(shape):
        try:
            _down(0)
        except RecursionError:
            pass
        return cl.strides.row_major_strides(shape)

    verdict = verify("05.contiguous_strides", contiguous_strides)
    assert verdict.status == "failed", verdict.message
    assert "switched off the profiler" in verdict.message, verdict.message


def test_switching_the_profiler_off_is_still_caught():
    def contiguous_strides(shape):
        sys.setprofile(None)
        return cl.strides.row_major_strides(shape)

    verdict = verify("05.contiguous_strides", contiguous_strides)
    assert verdict.status == "failed", verdict.message
    assert "switched off the profiler" in verdict.message, verdict.message


@pytest.mark.parametrize(("guess", "answer"), [([3, 2], (3, 2)), ([1, 2, 6], (1, 2, 6)),
                                               ([5.546, 2], (5.545, 2))])  # fmt: skip
def test_a_list_guess_of_the_right_numbers_is_right(guess, answer, capsys):
    """It printed "✗ not [3, 2]: think again" for the answer (3, 2)."""
    check_guess(guess, answer, rel_tol=1e-3)
    assert capsys.readouterr().out == f"✓ right: {guess}\n"


@pytest.mark.parametrize(("guess", "answer"), [("2", 2), ("0.5", Fraction(1, 2)),
                                               ("1/2", Fraction(1, 2))])  # fmt: skip
def test_the_right_number_as_text_is_told_to_be_a_number(guess, answer, capsys):
    check_guess(guess, answer)
    assert capsys.readouterr().out == (
        f"✗ {guess!r} is text: write it as a number, not text (without the quotes)\n")


@pytest.mark.parametrize(("guess", "answer"), [([3, 1], (3, 2)), ([3, 2, 1], (3, 2)),
                                               ("3", 2), ("1/0", 2), ("two", 2)])  # fmt: skip
def test_a_wrong_guess_is_still_wrong(guess, answer, capsys):
    check_guess(guess, answer)
    assert capsys.readouterr().out == f"✗ not {guess}: think again (the answer is under the cell)\n"


def test_swapped_arguments_are_named(capsys):
    """It printed "? <function evaluate at 0x…>: there is no such exercise; known: …"."""

    def evaluate(nodes, feed):
        return []

    check(evaluate, "01.evaluate")
    assert capsys.readouterr().out == (
        '? 01.evaluate: the first argument is the exercise id: check("01.evaluate", evaluate)\n')


def test_a_misspelt_id_gets_the_closest_one(capsys):
    check("01.evalute", lambda nodes, feed: [])
    assert capsys.readouterr().out == '? 01.evalute: there is no such exercise; did you mean ' \
        '"01.evaluate"?\n'


def test_the_pseudocodes_seed_of_1_is_told_to_be_a_node():
    """It got the numbers-not-nodes hint, "(no evaluate)": the seed and the sum as the
    pseudocode writes them, {out: [1]} and sum(node_to_grad[i])."""
    exercise = notebook_exercises()["03.gradient"]
    code = tuple(source.replace("{out: [cl.ones_like(out)]}", "{out: [1]}").replace(
        "cl.sum_n(*node_to_grad[i])", "sum(node_to_grad[i])") for source in exercise.code)
    verdict = verify("03.gradient", reference_answer(dataclasses.replace(exercise, code=code)))
    assert verdict.mistake == "seed-not-a-node", verdict.message
    assert _hint("03.gradient", "seed-not-a-node").startswith(
        "the seed must be a node: cl.ones_like(out)")


def test_rmsnorm_without_eps_gets_a_hint():
    """It said "off by up to 9.7e-06" and nothing else."""
    verdict = verify("08.rmsnorm", lambda x, w, eps: x * cl.rsqrt(
        cl.mean(x * x, axis=-1, keepdims=True)) * w)  # fmt: skip
    assert verdict.mistake == "no-eps", verdict.message
