"""The grader (issue 22, items 3-5): three fake submissions of notebook 05 (solved, blank,
cheating) and bad input, graded in one run into a gradebook; nothing passed in is modified.

The cheating submission (tests/grading/cheat_05.ipynb) patches NumPy, ``verify`` and every
checker, forges the old verdict log and a verdict line, answers with the library's function,
checks on its own (another notebook's exercise too) and answers an exercise of notebook 01.
"""

import csv
import hashlib
import shutil
from pathlib import Path

import pytest

from course_lib.exercises import grade

ROOT = Path(__file__).resolve().parent.parent
GRADING = ROOT / "tests" / "grading"


def _digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    shutil.copy(GRADING / "solved_05.ipynb", folder / "solved_05.ipynb")
    shutil.copy(ROOT / "student" / "05_strides.ipynb", folder / "blank.ipynb")
    shutil.copy(GRADING / "cheat_05.ipynb", folder / "homework.ipynb")  # no NN prefix
    shutil.copy(GRADING / "other_course.ipynb", folder / "other_course.ipynb")
    (folder / "notes.txt").write_text("not a notebook")
    (folder / "broken.ipynb").write_text('{"cells": [')
    (folder / "roster.csv").write_text(
        "student,file\nalice,solved_05.ipynb\nbob,blank.ipynb\ncarol,homework.ipynb\n"
        "dave,other_course.ipynb\nerin,notes.txt\nfrank,broken.ipynb\ngina,late.ipynb\n"
    )
    before = _digest(folder)
    out = tmp_path_factory.mktemp("grades")
    names = ["solved_05.ipynb", "blank.ipynb", "homework.ipynb", "other_course.ipynb",
             "notes.txt", "broken.ipynb", "missing.ipynb"]  # fmt: skip
    code = grade.main(
        [*(str(folder / n) for n in names), "--roster", str(folder / "roster.csv"),
         "--out", str(out), "--kernel", "python3", "--timeout", "300"]
    )  # fmt: skip
    assert code == 0
    assert _digest(folder) == before  # nothing the instructor passed is modified
    with (out / "grades.csv").open(encoding="utf-8") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    return rows, out


def test_the_solved_submission_gets_every_point(gradebook):
    rows, out = gradebook
    alice = rows["alice"]
    assert alice["notebook"] == "05_strides.ipynb" and alice["total"] == alice["max"] == "8"
    assert "passed" in (out / "feedback" / "alice.md").read_text()


def test_the_blank_submission_gets_none_and_its_feedback_says_not_done(gradebook):
    rows, out = gradebook
    assert rows["bob"]["total"] == "0" and rows["bob"]["max"] == "8"
    assert "not done yet" in (out / "feedback" / "bob.md").read_text()


def test_the_cheating_submission_fools_nothing_and_is_flagged(gradebook):
    rows, out = gradebook
    carol = rows["carol"]
    assert carol["notebook"] == "05_strides.ipynb"  # found by its cells, not its name
    assert carol["total"] == "0", carol
    assert "01.guard_key" not in carol or not carol.get("01.guard_key")
    feedback = (out / "feedback" / "carol.md").read_text()
    assert "uses-library" in feedback or "library" in feedback
    assert "05.can_view: missing" in feedback  # no solution cell: a row, not a gap
    assert "patched" in carol["notes"] and "review" in carol["notes"]
    assert "ignored solutions of other notebooks: 01.guard_key" in carol["notes"]


@pytest.mark.parametrize(
    "student, says",
    [
        ("dave", "not a notebook of this course"),
        ("erin", "not a notebook: the file is not JSON"),
        ("frank", "not a notebook"),
        ("gina", "no submission"),
        ("?missing", "no such file"),
    ],
)
def test_bad_input_is_a_row_with_its_reason(gradebook, student, says):
    rows, _ = gradebook
    assert says in rows[student]["notes"], rows[student]


def test_a_file_off_the_roster_is_flagged(gradebook):
    rows, _ = gradebook
    assert "missing.ipynb is not on the roster" in rows["?missing"]["notes"]


def test_a_bad_roster_or_notebooks_folder_is_a_message(tmp_path, capsys):
    (tmp_path / "roster.csv").write_text("name\nx\n")
    assert grade.main([str(tmp_path / "a.ipynb"), "--roster", str(tmp_path / "roster.csv")]) == 2
    assert "the roster needs the columns student and file" in capsys.readouterr().err
    assert grade.main([str(tmp_path / "a.ipynb"), "--roster", str(tmp_path / "none.csv")]) == 2
    assert grade.main([str(tmp_path / "a.ipynb"), "--notebooks", str(tmp_path)]) == 2
    assert "no instructor notebooks" in capsys.readouterr().err
