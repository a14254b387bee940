"""The exercises: the reference answers pass, ``check`` never raises, the notebooks hold 2–4
exercises each, and ``import course_lib.exercises`` stays light."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

from course_lib.exercises import EXERCISES, check, verify
from course_lib.exercises.core import Verdict

EXERCISE_IDS = sorted(EXERCISES)


@pytest.mark.parametrize("exercise_id", EXERCISE_IDS)
def test_the_reference_answer_passes(exercise_id):
    answer = reference_answer(notebook_exercises()[exercise_id])
    verdict = verify(exercise_id, answer)
    assert verdict.passed, verdict.message
    assert verdict.mistake is None
    assert (
        verify(exercise_id, answer).message == verdict.message
    )  # deterministic: nbval compares it


def test_every_exercise_is_in_one_notebook_and_every_notebook_has_two_to_four():
    found = notebook_exercises()
    assert sorted(found) == EXERCISE_IDS
    per_notebook = {}
    for exercise in found.values():
        assert exercise.notebook[:2] == exercise.id[:2], f"{exercise.id} is in {exercise.notebook}"
        per_notebook.setdefault(exercise.notebook, []).append(exercise.id)
    assert sorted(n[:2] for n in per_notebook) == [f"{n:02d}" for n in range(1, 10)]
    assert all(2 <= len(ids) <= 4 for ids in per_notebook.values()), per_notebook


def test_each_exercise_names_at_least_three_mistakes():
    for exercise in EXERCISES.values():
        names = [m.name for m in exercise.mistakes]
        assert len(set(names)) == len(names) >= 3, exercise.id
        assert all(m.hint.strip() for m in exercise.mistakes)


# -- check and verify never raise -------------------------------------------------------------
def _divides_by_zero(shape):
    return len(shape) / 0


def _loops_forever(shape):
    while True:
        pass


@pytest.mark.parametrize(
    "answer, expected",
    [
        (
            _divides_by_zero,
            "raised ZeroDivisionError: division by zero (at `return len(shape) / 0`)",
        ),
        (
            lambda shape: [1] * len(shape),
            "contiguous_strides(()) returned []; it must return a tuple of 0 ints",
        ),
        (lambda shape: None, "returned None; it must return a tuple"),
        (lambda shape: sys.exit(3), "raised SystemExit: 3"),
        (42, "the answer must be a function contiguous_strides(shape), got int 42"),
    ],
)
def test_answers_that_raise_or_return_the_wrong_type_fail_with_a_message(answer, expected):
    verdict = verify("05.contiguous_strides", answer)
    assert verdict.status == "failed" and not verdict.passed
    assert expected in verdict.message


def test_an_answer_that_hangs_is_stopped_and_an_outer_timer_survives():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *args: fired.append(True))
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        start = time.monotonic()
        verdict = verify("05.contiguous_strides", _loops_forever, time_limit=0.3)
        assert time.monotonic() - start < 2.0
        assert verdict.status == "failed" and "did not finish within 0.3 s" in verdict.message
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        assert 3.0 < left < 5.0 and not fired
    finally:
        signal.signal(signal.SIGALRM, previous)


def _stub(shape):
    raise NotImplementedError


@pytest.mark.parametrize("stub", [None, ..., _stub])
def test_a_stub_is_not_done_yet(stub):
    verdict = verify("05.contiguous_strides", stub)
    assert verdict.status == "not done" and verdict.message.startswith("not done yet")
    assert str(verdict).startswith("… 05.contiguous_strides: not done yet")


def test_an_unknown_exercise_is_reported_not_raised(capsys):
    check("05.nope", lambda: 1)
    check(["05.can_view"], lambda: 1)
    printed = capsys.readouterr().out.splitlines()
    known = "01.evaluate, 01.guard_key"
    assert printed[0].startswith(f"? 05.nope: there is no such exercise; known: {known}")
    assert printed[1].startswith("? ['05.can_view']: there is no such exercise")


def test_check_prints_the_verdict(capsys):
    check("05.permuted", lambda shape, strides, axes: (shape, strides))
    check("05.permuted", None)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("✗ 05.permuted: permuted(") and printed[1].startswith("  Hint: ")
    assert printed[2] == "… 05.permuted: not done yet: the answer is still empty"


def test_a_verdict_reads_as_one_line_and_a_hint():
    verdict = Verdict("05.x", "failed", "it broke\n  Hint: fix it", "m")
    assert str(verdict) == "✗ 05.x: it broke\n  Hint: fix it" and not verdict.passed


def test_answers_see_no_warnings_but_keep_numpy_error_state():
    before = np.geterr()
    verdict = verify(
        "04.softmax_ce_grad", lambda logits, targets: np.exp(logits) / 0 + np.log(-1.0)
    )
    assert verdict.status == "failed" and np.geterr() == before


def test_importing_the_exercises_loads_no_kernels_plotting_or_notebook_tools():
    heavy = [
        "course_lib.kernels.emulator",
        "course_lib.kernels.nvrtc",
        "graphviz",
        "matplotlib",
        "course_lib.viz",
        "course_lib.models",
        "nbformat",
        "nbclient",
    ]
    code = (
        "import sys; import course_lib; before = set(sys.modules); import course_lib.exercises; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules and m not in before))"
    )
    added = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert added.stdout.strip() == "[]", added.stdout


def test_the_readme_shows_what_check_prints():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    shown = readme.split("it tries your answer on random and edge cases and says:\n\n```\n")[1]
    shown = shown.split("```")[0]
    right = reference_answer(notebook_exercises()["05.contiguous_strides"])
    answers = [_stub, lambda shape: right(shape[::-1])[::-1], right]
    printed = "".join(f"{verify('05.contiguous_strides', answer)}\n" for answer in answers)
    assert shown == printed
