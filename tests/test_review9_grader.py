"""Grader review, round 9: forgeries the audit hook did not see.

* An answer read the checker's expected results from its frame (``sys._getframe``,
  ``inspect.currentframe``, a traceback's frame, then ``f_back`` and ``f_locals``): full marks
  for ``03.vjp_rules`` (5 points) with no flag.
* A solution cell cut a check's cases in place (``fused_op._GRADIENT_SHAPES[:] = ...``): the
  binding stays, so the hook saw nothing, and a gradient without unbroadcast passed 06.swiglu.
* A solution cell filled core's caches (its answer's code as trusted, an exercise's rules as
  empty): the answer called the library function the exercise forbids and passed.
"""

import math

import pytest
from test_grade_forgery import _armed

import course_lib as cl
from course_lib.exercises import core, verify
from course_lib.models.batchnorm import fold_batchnorm as library_fold
from course_lib.ops.elementwise import Elementwise

_FROM_FRAME = """
import inspect
def vjp_rule(op, inputs, output, adjoint, **attrs):
    f = {first}
    while f is not None and "want" not in f.f_locals:
        f = f.f_back
    return tuple(f.f_locals["want"])
grade.report('03.vjp_rules', lambda: vjp_rule)
"""


@pytest.mark.parametrize("first", ["sys._getframe(1)", "inspect.currentframe()"])
def test_an_answer_that_reads_the_checkers_expected_results_is_flagged(tmp_path, first):
    code, verdicts, notes = _armed(tmp_path, _FROM_FRAME.format(first=first))
    assert code == 0 and "03.vjp_rules" in verdicts, verdicts
    assert any("read a frame during a check" in n for n in notes), notes


def test_a_frame_read_outside_a_check_is_not_flagged(tmp_path):
    honest = """
    import inspect
    sys._getframe(0), inspect.stack()
    def contiguous_strides(shape):
        return tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))
    grade.report('05.contiguous_strides', lambda: contiguous_strides)
    """
    code, verdicts, notes = _armed(tmp_path, honest)
    assert verdicts["05.contiguous_strides"][0] == "passed" and notes == [], (verdicts, notes)


def test_a_checks_cases_cut_in_place_are_not_counted(tmp_path):
    attack = """
    from course_lib.exercises import fused_op
    fused_op._GRADIENT_SHAPES[:] = fused_op._GRADIENT_SHAPES[:1]
    def contiguous_strides(shape):
        return tuple(int(np.prod(shape[k + 1:])) for k in range(len(shape)))
    grade.report('05.contiguous_strides', lambda: contiguous_strides)
    """
    code, verdicts, notes = _armed(tmp_path, attack)
    patched = verdicts["05.contiguous_strides"][3]
    assert "course_lib.exercises.fused_op._GRADIENT_SHAPES (its contents)" in patched, verdicts


class _NoUnbroadcast(Elementwise):
    """SwiGLU whose gradient forgets to sum over broadcast axes."""

    name = "swiglu"

    def compute(self, xp, a, b):
        return a / (1.0 + xp.exp(-a)) * b

    def gradient(self, node, adjoint, needs):
        a, b = node.inputs
        s = cl.sigmoid(a)
        return [adjoint * b * s * (1.0 + a * (1.0 - s)), adjoint * a * s]

    def flops(self, out_shape, a_shape, b_shape):
        return 5 * math.prod(out_shape)


def test_the_swiglu_check_fails_a_gradient_without_unbroadcast():
    """(what the cut cases above let through)"""
    assert verify("06.swiglu", _NoUnbroadcast).status == "failed"


def _fold(W, B, gamma, beta, mean, var, eps):
    return library_fold(W, B, gamma, beta, mean, var, eps)


@pytest.mark.parametrize("in_process", [False, True])
@pytest.mark.parametrize("cache", ["_ORIGINS", "_FORBIDDEN_CACHE"])
def test_a_cache_filled_by_a_solution_cell_does_not_allow_a_forbidden_call(
    monkeypatch, cache, in_process
):
    if in_process:  # as on a GPU, where checks cannot run in a child process
        monkeypatch.setenv("COURSE_LIB_CHECK_IN_PROCESS", "1")
    if cache == "_ORIGINS":  # the answer's code as trusted
        monkeypatch.setitem(core._ORIGINS, id(_fold.__code__), (_fold.__code__, True))
    else:  # nothing forbidden
        rules = (dict(core._ORACLES), core._Forbidden({}, {}, {}, {}, {}))
        monkeypatch.setitem(core._FORBIDDEN_CACHE, core._RECORDS["06.fold_batchnorm"].forbidden,
                            rules)  # fmt: skip
    verdict = verify("06.fold_batchnorm", _fold)
    assert verdict.status == "failed" and "fold_batchnorm" in verdict.message, verdict
