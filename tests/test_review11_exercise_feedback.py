"""Review 11: the feedback a student gets from the exercise checks, for mistakes the earlier
reviews did not try: each must be told its own cause, without naming what the answer does not
use."""

import dataclasses
import math
from types import SimpleNamespace

from exercise_notebooks import notebook_exercises, reference_answer

import course_lib as cl
from conftest import needs_gxx
from course_lib.exercises import verify


def _reference(exercise_id):
    return reference_answer(notebook_exercises()[exercise_id])


def _reference_edited(exercise_id, old, new):
    """The reference answer of ``exercise_id`` with ``old`` replaced by ``new`` in its code."""
    exercise = notebook_exercises()[exercise_id]
    code = tuple(source.replace(old, new) for source in exercise.code)
    assert code != exercise.code, f"{old!r} is not in {exercise_id}'s reference answer"
    return reference_answer(dataclasses.replace(exercise, code=code))


def test_relu_cond_zero_as_x_minus_x_is_told_that_x_minus_x_is_nan():
    """x − x at x = -inf is NaN as x · 0 is; the hint spoke of multiplying x by 0 only."""
    verdict = verify("01.relu_cond", lambda x: cl.cond(x > 0, lambda: x, lambda: x - x))
    assert verdict.status == "failed" and verdict.mistake == "times-zero", verdict.message
    assert "x − x" in verdict.message


def test_dual_message_for_a_function_of_u_does_not_name_w():
    """sin(u) reads u only: its message gave w's value as well."""
    ref = _reference("02.dual")
    answer = SimpleNamespace(Dual=ref.Dual, exp=ref.exp, log=ref.log,
                             sin=lambda u: ref.Dual(math.sin(u.val), math.cos(u.val)))  # fmt: skip
    verdict = verify("02.dual", answer)
    assert verdict.status == "failed" and verdict.mistake == "chain-rule", verdict.message
    assert verdict.message.startswith("sin(u) with u = Dual(1.5, 0.7) gives"), verdict.message
    assert "w = " not in verdict.message


def test_norm_backward_beta_summed_over_the_first_axis_only_gets_the_rows_hint():
    """gamma summed over every leading axis but beta over axis 0 only: the hint was missing
    because the mistake was recognised only when every gradient had it."""
    answer = _reference_edited("04.norm_backward", 'grads["beta"] = dy.sum(axis=rows)',
                               'grads["beta"] = dy.sum(axis=0)')  # fmt: skip
    verdict = verify("04.norm_backward", answer)
    assert verdict.status == "failed", verdict.message
    assert "the gradient of beta has shape (3, 6)" in verdict.message
    assert verdict.mistake == "not-summed-over-rows", verdict.message


def test_add_views_with_the_larger_length_is_told_1_against_0_is_0():
    answer = _reference_edited("05.add_views", "shape.append(n if m == 1 else m)  # (1, 0) -> 0",
                               "shape.append(max(m, n))")  # fmt: skip
    verdict = verify("05.add_views", answer)
    assert verdict.status == "failed" and verdict.mistake == "result-shape", verdict.message
    assert "1 against 0 is 0" in verdict.message


@needs_gxx("running the tiled matmul in the emulator")
def test_tiled_matmul_loading_a_without_its_k_guard_fails():
    """Without k0 + tx < K the last row of A reads past A's end; B's tile is 0 there, and the
    finite marker after A times 0 was a silent 0: the kernel passed (on a GPU such a read is
    out of bounds, and garbage NaN times 0 is NaN)."""
    right = _reference("07.tiled_matmul")
    guarded = "(row < M && k0 + tx < K) ?"
    assert guarded in right
    verdict = verify("07.tiled_matmul", right.replace(guarded, "(row < M) ?"))
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == "ragged-edges", verdict.message


def test_mlp_grads_failing_on_the_all_active_batch_is_named():
    """A dw1 that is wrong (dw2 right) is tried once more on a batch where every ReLU is
    active; an answer that raised there got a message with no name before "raised"."""
    right = _reference("04.mlp_grads")

    def answer(x, y, w1, w2):
        if (x @ w1 > 0).all():
            raise ValueError("only written for dead units")
        dw1, dw2 = right(x, y, w1, w2)
        return 1.1 * dw1, dw2

    verdict = verify("04.mlp_grads", answer)
    assert verdict.status == "failed"
    assert "mlp_grads on a batch where every ReLU is active raised ValueError" in verdict.message
