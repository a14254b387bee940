"""Review 10 (publishing): markers hidden by a tab, an invisible or a full-width character,
nbgrader's hidden tests, a stub that breaks its cell, a near miss `make student` would have
written, the saved widgets of cleared outputs, a file left in an earlier release and a tracked
symbolic link are not published."""

import shutil
import subprocess

import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, ROOT
from test_review9_release import _course

from course_lib import release, site
from course_lib.exercises import edition

HIDDEN_MARKERS = {
    "tab": "def f(x):\n    # BEGIN\tSOLUTION\n    return 42 * x\n    # END\tSOLUTION\n",
    "tab guess": "guess = 42  #\tSOLUTION\n",
    "zero-width space": "def f(x):\n    # BEGIN\u200b SOLUTION\n    return 42 * x\n"
    "    # END\u200b SOLUTION\n",
    "full-width": "def f(x):\n    # ＢＥＧＩＮ ＳＯＬＵＴＩＯＮ\n    return 42 * x\n"
    "    # ＥＮＤ ＳＯＬＵＴＩＯＮ\n",
    "nbgrader's hidden tests": "### BEGIN HIDDEN TESTS\nassert f(1) == 42\n### END HIDDEN TESTS\n",
}


@pytest.mark.parametrize("kind", HIDDEN_MARKERS)
def test_a_marker_the_json_escapes_or_a_lookalike_hides_stops_the_release(tmp_path, kind):
    root = _course(tmp_path, HIDDEN_MARKERS[kind])
    with pytest.raises(release.ReleaseError, match="solution markers in notebooks/00_tour"):
        release.release(root, tmp_path / "dest", None)
    assert not (tmp_path / "dest").exists()


def test_the_student_site_refuses_a_marker_hidden_by_a_tab(tmp_path):
    root = _course(tmp_path, HIDDEN_MARKERS["tab"], git=False)
    with pytest.raises(release.ReleaseError, match="solution markers in 00_tour.ipynb"):
        site.build(root, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_a_stub_that_breaks_its_cell_is_refused():
    cell = "weights = {\n    # BEGIN SOLUTION\n    'a': 42,\n    # END SOLUTION\n}\n"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell, id="a")])
    with pytest.raises(edition.EditionError, match="cell 0, line 3: .* not valid Python"):
        edition.student_notebook(notebook)


@pytest.mark.parametrize("cell", [
    nbformat.v4.new_code_cell("def f(x):\n    #BEGIN SOLUTION\n    return 42 * x\n"
                              "    #END SOLUTION\n", id="near"),
    nbformat.v4.new_markdown_cell("# BEGIN SOLUTION\n`return 42 * x`\n# END SOLUTION", id="md"),
])  # fmt: skip
def test_make_student_refuses_a_marker_it_would_leave(tmp_path, cell):
    source = tmp_path / "notebooks"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    notebook = nbformat.read(NOTEBOOKS / "00_tour.ipynb", as_version=nbformat.NO_CONVERT)
    notebook.cells.insert(2, cell)
    nbformat.write(notebook, source / "00_tour.ipynb")
    with pytest.raises(edition.EditionError, match="marker the edition does not recognise"):
        edition.write_edition(source, tmp_path / "student")
    assert not list((tmp_path / "student").glob("*"))


def _widget(model_id):
    view = {"model_id": model_id, "version_major": 2, "version_minor": 0}
    data = {"application/vnd.jupyter.widget-view+json": view}
    return nbformat.v4.new_output("display_data", data)


def test_the_saved_widgets_of_a_cleared_output_are_dropped():
    predict = nbformat.v4.new_code_cell("show_answer()", id="p", metadata={"tags": ["predict"]})
    predict.outputs = [_widget("answer")]
    kept = nbformat.v4.new_code_cell("slider()", id="k")
    kept.outputs = [_widget("slider")]
    state = {
        "answer": {"model_name": "OutputModel", "state": {
            "layout": "IPY_MODEL_layout", "outputs": [{"text": "the answer is 42"}]}},
        "slider": {"model_name": "IntSliderModel", "state": {"layout": "IPY_MODEL_layout"}},
        "layout": {"model_name": "LayoutModel", "state": {}},
    }  # fmt: skip
    widgets = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    notebook = nbformat.v4.new_notebook(cells=[predict, kept], metadata={"widgets": widgets})
    student = edition.student_notebook(notebook)
    saved = student.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert sorted(saved) == ["layout", "slider"] and student.cells[1].outputs
    assert "answer" in state  # the instructor notebook is left as it was


def test_a_file_the_earlier_release_did_not_write_stops_the_rerun(tmp_path):
    root, dest = _course(tmp_path), tmp_path / "dest"
    release.release(root, dest, None)
    answers = dest / "notebooks" / "05_answers.ipynb"
    shutil.copy(NOTEBOOKS / "05_strides.ipynb", answers)  # a copy left there by hand
    with pytest.raises(release.ReleaseError, match=r"not an earlier release \(notebooks/05_answ"):
        release.release(root, dest, None)
    assert answers.exists()  # refused, nothing changed


def test_a_tracked_symbolic_link_is_not_published(tmp_path):
    root = _course(tmp_path)
    (tmp_path / "answers.py").write_text("def f(x):\n    return 42 * x\n")
    (root / "course_lib" / "answers.py").symlink_to(tmp_path / "answers.py")
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    with pytest.raises(release.ReleaseError, match="answers.py is reached through a symbolic"):
        release.release(root, tmp_path / "dest", None)
    assert not (tmp_path / "dest").exists()
