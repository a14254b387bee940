"""Review 11 (publishing): `make student` given a mistyped source folder removes no student
notebook, and a file of notebooks/ that is no notebook (a merge conflict) is named, not a
traceback; nothing is written in either case."""

import shutil

from exercise_notebooks import NOTEBOOKS, ROOT

from course_lib.exercises import edition


def _course(tmp_path):
    """notebooks/05_strides.ipynb and pyproject.toml, and its student edition in student/."""
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(NOTEBOOKS / "05_strides.ipynb", tmp_path / "notebooks" / "05_strides.ipynb")
    edition.write_edition(tmp_path / "notebooks", tmp_path / "student")
    return tmp_path / "student" / "05_strides.ipynb"


def test_a_mistyped_source_folder_removes_no_student_notebook(tmp_path, capsys):
    written = _course(tmp_path)
    before = written.read_bytes()
    assert edition.main([str(tmp_path / "notebook"), str(tmp_path / "student")]) == 1
    assert "holds no notebooks" in capsys.readouterr().err
    assert written.read_bytes() == before


def test_a_file_that_is_no_notebook_is_named_and_nothing_is_written(tmp_path, capsys):
    written = _course(tmp_path)
    before = written.read_bytes()
    conflict = tmp_path / "notebooks" / "06_conflict.ipynb"
    conflict.write_text('<<<<<<< HEAD\n{"cells": []}\n=======\n>>>>>>> theirs\n')
    assert edition.main([str(tmp_path / "notebooks"), str(tmp_path / "student")]) == 1
    assert f"{conflict} is not a notebook" in capsys.readouterr().err
    assert written.read_bytes() == before
    assert sorted(p.name for p in written.parent.iterdir()) == ["05_strides.ipynb"]
