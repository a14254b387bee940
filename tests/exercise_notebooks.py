"""Where the exercises live in the instructor notebooks, and their reference answers.

An exercise is a markdown cell opening with ``### Exercise NN.name``, the code cells after it
(the solution between ``BEGIN SOLUTION`` / ``END SOLUTION`` markers, and any code it needs),
and a cell ``check("NN.name", answer)``. The reference answer is ``answer`` evaluated after the
notebook's first code cell (its imports) and the exercise's code cells: each exercise stands on
its own, so it can be checked without running the whole notebook.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_lib.links import INSTALL, has_tag

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS, STUDENT = ROOT / "notebooks", ROOT / "student"
_HEADING = re.compile(r"^### Exercise (\d\d\.\w+)\s*$", re.MULTILINE)
_CHECK = re.compile(r'^check\("(\d\d\.\w+)", (.+)\)\s*$')


@dataclass(frozen=True)
class NotebookExercise:
    id: str
    notebook: str  # file name without .ipynb
    code: tuple[str, ...]  # the code cells between the task and the check
    answer: str  # the expression the check cell passes


def _exercises_in(name: str, cells: list[tuple[str, str]]) -> list[NotebookExercise]:
    """The exercises in a list of (cell type, source); each must be task, code..., check."""
    found, current = [], None
    for kind, source in cells:
        heading = _HEADING.search(source) if kind == "markdown" else None
        if heading:
            current = (heading.group(1), [])
        elif kind == "code" and current is not None:
            check = _CHECK.match(source.strip())
            if check:
                assert check.group(1) == current[0], (
                    f"{name}: {check.group(1)} checked under {current[0]}"
                )
                found.append(NotebookExercise(current[0], name, tuple(current[1]), check.group(2)))
                current = None
            else:
                current[1].append(source)
    assert current is None, f"{name}: exercise {current[0]} has no check cell"
    return found


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source) for c in nbformat.read(path, as_version=4).cells]


@functools.cache
def notebook_exercises() -> dict[str, NotebookExercise]:
    """Every exercise of the instructor notebooks, by id."""
    found = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        found += _exercises_in(path.stem, _cells(path))
    ids = [e.id for e in found]
    assert len(ids) == len(set(ids)), f"an exercise appears twice: {sorted(ids)}"
    return {e.id: e for e in found}


def first_code_cell(notebook: str) -> str:
    """The notebook's imports: its first code cell other than the generated install cell."""
    cells = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4).cells
    return next(c.source for c in cells if c.cell_type == "code" and not has_tag(c, INSTALL))


def reference_answer(exercise: NotebookExercise):
    """The answer the instructor notebook passes to ``check``."""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):  # the first cell prints the device
        for source in (first_code_cell(exercise.notebook), *exercise.code):
            exec(compile(source, f"<{exercise.notebook}: {exercise.id}>", "exec"), namespace)
    return eval(compile(ast.parse(exercise.answer, mode="eval"), exercise.id, "eval"), namespace)
