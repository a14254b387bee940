"""The student edition: generated from the instructor notebooks, in sync, and runnable with every
exercise unfinished; and the grade command over submitted notebooks."""


import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, STUDENT
from nbclient import NotebookClient

from course_lib import links
from course_lib.exercises.edition import (
    EditionError,
    answers_a_question,
    student_notebook,
    student_source,
    write_edition,
)

INSTRUCTOR = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_a_python_solution_becomes_a_stub_at_its_indentation():
    source = "def f(x):\n    y = 1\n    # BEGIN SOLUTION\n    return x + y\n    # END SOLUTION\n"
    source += "\nprint(f)"
    assert student_source(source) == (
        "def f(x):\n    y = 1\n    # YOUR CODE HERE\n    raise NotImplementedError\n\nprint(f)"
    )


def test_a_cuda_solution_inside_a_string_becomes_an_empty_body():
    body = "    // BEGIN SOLUTION\n    int i = 0;\n    // END SOLUTION\n"
    source = f'k = r"""\n__global__ void k() {{\n{body}}}\n"""'
    assert (
        student_source(source) == 'k = r"""\n__global__ void k() {\n    // YOUR CODE HERE\n}\n"""'
    )


def test_a_guess_becomes_blank():
    source = "n = 3\nguess = (1, 2, 6)  # SOLUTION\nif n:\n    x = 4 # SOLUTION\n"
    source += "check_guess(guess, n)"
    assert student_source(source) == (
        "n = 3\nguess = None  # YOUR GUESS HERE\nif n:\n    x = None  # YOUR GUESS HERE\n"
        "check_guess(guess, n)"
    )
    assert student_source("guess = 1  # SOLUTIONS") == "guess = 1  # SOLUTIONS"


@pytest.mark.parametrize(
    "source, problem",
    [
        ("# BEGIN SOLUTION\nx = 1", "BEGIN SOLUTION without END SOLUTION"),
        ("x = 1\n# END SOLUTION", "line 2: END SOLUTION without its BEGIN SOLUTION"),
        (
            "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION",
            "line 2: BEGIN SOLUTION inside another",
        ),
        ("// BEGIN SOLUTION\n# END SOLUTION", "line 2: END SOLUTION without its BEGIN SOLUTION"),
    ],
)
def test_markers_that_do_not_pair_up_are_refused(source, problem):
    with pytest.raises(EditionError, match=problem):
        student_source(source, "nb, cell 3")


def test_only_exercise_cells_change():
    notebook = nbformat.v4.new_notebook()
    plain = nbformat.v4.new_code_cell(
        "print(1)", execution_count=1, outputs=[nbformat.v4.new_output("stream", text="1\n")]
    )
    solution = nbformat.v4.new_code_cell(
        "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION", execution_count=2
    )
    checked = nbformat.v4.new_code_cell(
        'check("05.permuted", f)',
        execution_count=3,
        outputs=[nbformat.v4.new_output("stream", text="✓ ...\n")],
    )
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# BEGIN SOLUTION is only text here"),
        plain,
        solution,
        checked,
    ]
    student = student_notebook(notebook)
    assert student.cells[:2] == notebook.cells[:2]
    assert (
        student.cells[2].source == "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError"
    )
    assert [c.execution_count for c in student.cells[2:]] == [None, None] and student.cells[
        3
    ].outputs == []
    assert (
        notebook.cells[3].outputs and notebook.cells[2].source.count("SOLUTION") == 2
    )  # not modified


def test_the_cells_that_answer_a_question_lose_their_outputs():
    def ran(source, tags=()):
        output = nbformat.v4.new_output("stream", text="2\n")
        cell = nbformat.v4.new_code_cell(source, execution_count=1, outputs=[output])
        cell.metadata["tags"] = list(tags)
        return cell

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        ran("print(2)", ["predict"]),
        ran("print(2)", ["check-yourself", "other"]),
        ran("guess = 2  # SOLUTION\nprint(guess)"),
        ran("print(2)", ["other"]),
    ]
    student = student_notebook(notebook)
    assert [(c.outputs, c.execution_count) for c in student.cells[:3]] == [([], None)] * 3
    assert student.cells[2].source == "guess = None  # YOUR GUESS HERE\nprint(guess)"
    assert student.cells[3] == notebook.cells[3]


def test_the_student_edition_is_in_sync_with_the_notebooks(tmp_path):
    (tmp_path / "00_gone.ipynb").write_text("{}")  # a notebook no longer in notebooks/ is removed
    write_edition(NOTEBOOKS, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == sorted(p.name for p in INSTRUCTOR)
    stale = [
        p.name
        for p in INSTRUCTOR
        if (tmp_path / p.name).read_bytes() != (STUDENT / p.name).read_bytes()
    ]
    assert not stale, f"student/ is out of date for {stale}: run `make student`"
    assert sorted(p.name for p in STUDENT.glob("*.ipynb")) == sorted(p.name for p in INSTRUCTOR)


def _with_exercises(path):
    return any(
        "# BEGIN SOLUTION" in cell.source or "// BEGIN SOLUTION" in cell.source
        for cell in nbformat.read(path, as_version=4).cells
    )


WITH_EXERCISES = [p.name for p in INSTRUCTOR if _with_exercises(p)]


def test_notebooks_without_exercises_are_copied_unchanged():
    """Unchanged but for the generated cells, whose badges (with a repository) open student/,
    and the outputs of the cells that answer a question."""
    instructor = {p.name: nbformat.read(p, as_version=nbformat.NO_CONVERT) for p in INSTRUCTOR}
    for notebook in instructor.values():
        for cell in filter(answers_a_question, notebook.cells):
            cell.outputs, cell.execution_count = [], None
    repository = links.configured_repository(NOTEBOOKS.parent / "pyproject.toml")
    links.link_notebooks(instructor, repository, "student")
    for name, notebook in instructor.items():
        if name not in WITH_EXERCISES:
            assert (STUDENT / name).read_text(encoding="utf-8") == links.notebook_text(notebook)


@pytest.mark.parametrize("name", WITH_EXERCISES)
def test_the_student_edition_runs_top_to_bottom_with_every_exercise_unfinished(name):
    notebook = nbformat.read(STUDENT / name, as_version=4)
    NotebookClient(notebook, timeout=600, resources={"metadata": {"path": str(STUDENT)}}).execute()
    checks = [
        cell
        for cell in notebook.cells
        if cell.cell_type == "code" and cell.source.startswith("check(")
    ]
    assert len(checks) >= 2
    for cell in checks:
        text = "".join(output.get("text", "") for output in cell.outputs)
        exercise_id = cell.source.split('"')[1]
        assert text.startswith(f"… {exercise_id}: not done yet"), text
    for cell in notebook.cells:
        if "check_guess(" in cell.source:
            text = "".join(output.get("text", "") for output in cell.outputs)
            assert "… no guess yet: replace None with your guess" in text, text


