"""Review 8 of the exercise checkers, from the student's side: correct answers written in
another reasonable style must not be failed with a misleading message, and a hint must not
recommend what does not work."""

import math

from exercise_notebooks import notebook_exercises, reference_answer

from course_lib.exercises import gpu_kernels, verify


def _reference(exercise_id):
    return reference_answer(notebook_exercises()[exercise_id])


def test_swiglu_flops_of_the_right_count_as_a_float_is_told_to_return_an_int():
    """``5.0 * math.prod(out_shape)`` is the right count: the check used to crash in perf's
    Fraction ("checking your answer raised TypeError: both arguments should be Rational
    instances"); it now says that flops must return an int."""
    reference = _reference("06.swiglu")

    class FloatFlops(reference):
        name = "swiglu_float_flops"

        def flops(self, out_shape, a_shape, b_shape):
            return 5.0 * math.prod(out_shape)

    verdict = verify("06.swiglu", FloatFlops)
    assert verdict.status == "failed", verdict.message
    assert "checking your answer raised" not in verdict.message, verdict.message
    assert "return an int" in verdict.message and "flops" in verdict.message


def test_the_max_start_hint_recommends_minus_infinity_that_nvrtc_compiles():
    """NVRTC compiles without math.h (notebook 07 says so): ``-INFINITY`` does not compile on
    a GPU, so the hint names the bit pattern the notebook uses."""
    hint = gpu_kernels.MAX_START.hint
    assert "-INFINITY" not in hint
    assert "__int_as_float(0xff800000)" in hint
