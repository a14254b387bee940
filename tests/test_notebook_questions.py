"""The questions of the notebooks ("Predict, then run", "Check yourself") in the student edition:
their answers hidden (outputs cleared, guesses blank), their cells tagged, and no cell
overwriting a name the student defines in an exercise."""

import ast

import nbformat
import numpy as np
import pytest
from exercise_notebooks import NOTEBOOKS, STUDENT
from IPython.core.inputtransformer2 import TransformerManager

from course_lib.exercises import check_guess
from course_lib.exercises.edition import QUESTION_TAGS, answers_a_question, exercise_parts

NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
BLANK_GUESS = "guess = None  # YOUR GUESS HERE"
_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _read(folder, name):
    return nbformat.read(folder / name, as_version=4)


def _code(notebook):
    return [(i, c) for i, c in enumerate(notebook.cells) if c.cell_type == "code"]


# --- check_guess --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "guess, answer, rel_tol, says",
    [
        (None, 8, 0.0, "… no guess yet: replace None with your guess"),
        (8, 8, 0.0, "✓ right: 8"),
        ((1, 2, 6), (1, 2, 6), 0.0, "✓ right: (1, 2, 6)"),
        (234.0, 234.4, 0.01, "✓ right: 234.0"),
        (7, 8, 0.0, "✗ not 7: think again"),
        (230.0, 234.4, 0.01, "✗ not 230.0"),
        ("8", 8, 0.0, "✗ '8' is text: write it as a number"),
        ("8", 8, 0.1, "✗ '8' is text"),  # no number: not close, and no TypeError
        ("nine", 8, 0.1, "✗ not nine"),
        ([1, "2"], (1, 2), 0.0, "✗ [1, '2'] holds text: write each number as a number"),
        (("4", ["5"]), (4, (5,)), 0.0, "✗ ('4', ['5']) holds text"),
        ([1, "3"], (1, 2), 0.0, "✗ not [1, '3']"),  # wrong as numbers too: just wrong
        (np.array([1, 2]), np.array([1, 2]), 0.0, "✗ not [1 2]"),  # ambiguous truth: wrong
    ],
)
def test_check_guess_says_right_wrong_or_no_guess_and_never_raises(
    guess, answer, rel_tol, says, capsys
):
    check_guess(guess, answer, rel_tol=rel_tol)
    out = capsys.readouterr().out
    assert out.startswith(says), out


def test_a_wrong_guess_is_not_told_the_answer(capsys):
    check_guess(4095, 4096)
    assert "4096" not in capsys.readouterr().out


# --- the tags ---------------------------------------------------------------------------


def _expected_tags(notebook) -> dict[int, set[str]]:
    """By the text: code cells after "## Check yourself", and the code cell after a
    "Predict, then ..." prompt."""
    expected, asking = {}, False
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            asking = asking or "## Check yourself" in cell.source
            continue
        tags = {"check-yourself"} if asking else set()
        before = notebook.cells[index - 1]
        if before.cell_type == "markdown" and "Predict, then" in before.source:
            tags.add("predict")
        if tags:
            expected[index] = tags
    return expected


@pytest.mark.parametrize("name", NAMES)
def test_the_cells_that_answer_a_question_are_tagged(name):
    notebook = _read(NOTEBOOKS, name)
    tagged = {
        index: set(cell.metadata["tags"]) & set(QUESTION_TAGS)
        for index, cell in _code(notebook)
        if answers_a_question(cell)
    }
    assert tagged == _expected_tags(notebook)
    assert any("check-yourself" in tags for tags in tagged.values()), "no Check yourself cell"


def test_the_predict_prompts_are_tagged():
    predicted = [
        name
        for name in NAMES
        for cell in _read(NOTEBOOKS, name).cells
        if "predict" in cell.metadata.get("tags", [])
    ]
    assert sorted(set(predicted)) == [
        "01_programming_models.ipynb",
        "04_training.ipynb",
        "07_gpu_kernels.ipynb",
    ]


# --- the student edition ----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_the_student_edition_shows_no_answer_to_a_question(name):
    student = _read(STUDENT, name)
    questions = [(i, c) for i, c in _code(student) if answers_a_question(c)]
    assert questions
    for index, cell in questions:
        assert cell.outputs == [] and cell.execution_count is None, f"{name}, cell {index}"


@pytest.mark.parametrize("name", NAMES)
def test_every_guess_is_blank_in_the_student_edition(name):
    instructor, student = _read(NOTEBOOKS, name), _read(STUDENT, name)
    for (index, mine), (_, theirs) in zip(_code(instructor), _code(student), strict=True):
        guesses = [line for line in mine.source.split("\n") if line.startswith("guess =")]
        if "check_guess(" in mine.source:
            assert len(guesses) == 1 and answers_a_question(mine), f"{name}, cell {index}"
        assert all(line.endswith("  # SOLUTION") for line in guesses), f"{name}, cell {index}"
        blank = [line for line in theirs.source.split("\n") if line.startswith("guess =")]
        assert blank == [BLANK_GUESS] * len(guesses), f"{name}, cell {index}"
        assert "# SOLUTION" not in theirs.source


# --- no cell overwrites the student's names ---------------------------------------------


def _module_level(node):
    """The nodes of ``node`` that run in the notebook's namespace (not in a def, a class, a
    lambda or a comprehension)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, _SCOPES):
            yield from _module_level(child)


def bound_names(source: str, imports: bool = True) -> set[str]:
    """The global names a cell binds (or deletes): assignments, loop and ``with`` targets,
    ``def``, ``class``, ``except ... as``, and (with ``imports``) imports."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    names = set()
    for node in _module_level(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def test_bound_names_are_the_globals_a_cell_binds():
    source = (
        "import numpy as np, os.path\nfrom math import tau\na, (b, *c) = 1, (2, 3)\nd += 1\n"
        "for e in []:\n    f: int = 0\nwith open('x') as g:\n    pass\n"
        "try:\n    pass\nexcept OSError as h:\n    pass\n"
        "def i(j):\n    k = j\nclass L:\n    m = 1\n[n for n in ()]\n(o := 1)\ndel p\n"
        "q.r = s[0] = 1"
    )
    want = set("abcdefghio") | {"np", "os", "tau", "L", "p"}
    assert bound_names(source) == want
    assert bound_names(source, imports=False) == want - {"np", "os", "tau"}


@pytest.mark.parametrize("name", NAMES)
def test_no_cell_reassigns_a_name_the_student_defines(name):
    """No cell after a solution cell binds a name it defines (its imports are given code, not
    the student's): running the notebook on would overwrite the student's answer."""
    notebook = _read(NOTEBOOKS, name)
    solutions = {i for i, part in exercise_parts(notebook).items() if part[1] == "solution"}
    defined, clashes = {}, []
    for index, cell in _code(notebook):
        clashes += [
            f"cell {index} binds {found!r}, which the student defines in cell {defined[found]}"
            for found in sorted(bound_names(cell.source) & defined.keys())
        ]
        if index in solutions:
            for found in bound_names(cell.source, imports=False):
                defined.setdefault(found, index)
    assert not clashes, f"{name}: {clashes}"
