"""The student edition of the notebooks: every solution replaced by a stub.

::

    python -m course_lib.exercises.edition notebooks student      # what `make student` runs

The notebooks in ``notebooks/`` are the instructor edition. A solution sits between two
marker lines, in Python or inside CUDA source held in a Python string::

    # BEGIN SOLUTION                    // BEGIN SOLUTION
    ...                                 ...
    # END SOLUTION                      // END SOLUTION

(the markers nbgrader and otter-grader use). In the student edition a Python solution becomes
``# YOUR CODE HERE`` and ``raise NotImplementedError`` at the marker's indentation, so the
function exists and its check says "not done yet"; a CUDA solution becomes
``// YOUR CODE HERE`` (an empty kernel body). A guess, one line ``name = value  # SOLUTION``
(otter-grader's one-line marker), becomes ``name = None  # YOUR GUESS HERE``. The outputs of
exercise cells (cells with a solution, and ``check(...)`` cells), of cells tagged ``predict``
or ``check-yourself`` (the cells that answer a "Predict, then run" or "Check yourself"
question) and of every cell with a guess are cleared; every other cell, output and the
notebook's metadata stay exactly as they are, except that the Binder and Colab badges of the
generated cells (``course_lib.links``) open ``student/``, and that the solution and check
cells of each exercise carry ``{"exercise": {"id": "NN.name", "part": "solution" | "check"}}``
in their metadata: how ``python -m course_lib.exercises.grade`` finds a submission's answers,
whatever the file is called.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

from .. import links

_BEGIN = re.compile(r"^(?P<indent>\s*)(?P<mark>#|//) BEGIN SOLUTION\s*$")
_END = re.compile(r"^\s*(?P<mark>#|//) END SOLUTION\s*$")
_CHECK = re.compile(r"^check\(\s*[\"'](?P<id>\d\d\.\w+)[\"']", re.MULTILINE)
_HEADING = re.compile(r"^### Exercise (?P<id>\d\d\.\w+)\s*$", re.MULTILINE)
_CHECK_CELL = re.compile(r"^check\(\s*[\"'](?P<id>\d\d\.\w+)[\"']\s*,\s*(?P<answer>.+)\)\s*$")
METADATA = "exercise"  # the cell metadata key: {"id": "NN.name", "part": "solution" | "check"}
_STUB = {"#": ["# YOUR CODE HERE", "raise NotImplementedError"], "//": ["// YOUR CODE HERE"]}
_GUESS = re.compile(r"^(?P<name>\s*\w+ = )\S.*\s# SOLUTION\s*$")
_BLANK_GUESS = r"\g<name>None  # YOUR GUESS HERE"
QUESTION_TAGS = ("predict", "check-yourself")  # cells whose output answers a question


class EditionError(ValueError):
    """A notebook whose solution markers do not pair up, or a target the edition would write
    over the instructor notebooks through (the source folder itself, a symbolic link)."""


def student_source(source: str, where: str = "cell") -> str:
    """``source`` with every solution block replaced by its stub, and every guess blank."""
    lines, out, block = source.split("\n"), [], None
    for number, line in enumerate(lines, start=1):
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin:
            if block is not None:
                raise EditionError(
                    f"{where}, line {number}: BEGIN SOLUTION inside another solution"
                )
            block = begin
            out += [begin["indent"] + stub for stub in _STUB[begin["mark"]]]
        elif end:
            if block is None or end["mark"] != block["mark"]:
                raise EditionError(
                    f"{where}, line {number}: END SOLUTION without its BEGIN SOLUTION"
                )
            block = None
        elif block is None:
            out.append(_GUESS.sub(_BLANK_GUESS, line))
    if block is not None:
        raise EditionError(f"{where}: BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def exercise_ids(source: str) -> list[str]:
    """The exercise ids a cell checks: ``check("05.can_view", ...)`` at the start of a line."""
    return _CHECK.findall(source)


def is_exercise_cell(cell) -> bool:
    """A code cell with a solution block or a ``check(...)`` call."""
    source = cell.get("source", "")
    has_solution = any(_BEGIN.match(line) for line in source.split("\n"))
    return cell.get("cell_type") == "code" and (has_solution or bool(exercise_ids(source)))


def answers_a_question(cell) -> bool:
    """A cell tagged ``predict`` or ``check-yourself``: its output is the answer."""
    return any(links.has_tag(cell, tag) for tag in QUESTION_TAGS)


def has_solution(cell) -> bool:
    return cell.get("cell_type") == "code" and any(
        _BEGIN.match(line) for line in cell.get("source", "").split("\n")
    )


def exercise_parts(notebook) -> dict[int, tuple[str, str, str]]:
    """``cell index -> (exercise id, part, answer expression)`` for the solution and check cells
    of the instructor notebook's exercises (a ``### Exercise NN.name`` markdown cell, code
    cells, ``check("NN.name", answer)``); ``part`` is ``"solution"`` or ``"check"``."""
    parts, current = {}, None
    for index, cell in enumerate(notebook.cells):
        source = cell.get("source", "")
        heading = _HEADING.search(source) if cell.get("cell_type") == "markdown" else None
        if heading:
            current = heading["id"]
            continue
        if cell.get("cell_type") != "code" or current is None:
            continue
        found = _CHECK_CELL.match(source.strip())
        if found and found["id"] == current:
            parts[index] = (current, "check", found["answer"])
            current = None
        elif has_solution(cell):
            parts[index] = (current, "solution", "")
    return parts


def student_notebook(notebook, name: str = "notebook"):
    """A copy of ``notebook`` (an ``nbformat`` node) as the student edition."""
    student = copy.deepcopy(notebook)
    parts = exercise_parts(student)
    for index, cell in enumerate(student.cells):
        if cell.get("cell_type") != "code":
            continue
        source = student_source(cell.source, f"{name}, cell {index}")
        if source != cell.source or is_exercise_cell(cell) or answers_a_question(cell):
            cell.source, cell.outputs, cell.execution_count = source, [], None
        if index in parts:
            cell.metadata[METADATA] = {"id": parts[index][0], "part": parts[index][1]}
    return student


def write_edition(source_dir: Path, target_dir: Path) -> list[Path]:
    """Write the student edition of every notebook of ``source_dir`` into ``target_dir``;
    student notebooks whose instructor notebook is gone are removed (a notebook with a solution,
    or with cells and no generated ``nav-top`` cell, is someone's work, not one: it stays).
    Returns the written paths.

    The generated cells (``course_lib.links``) are written for the edition's folder in the
    repository (``student/``), so its Binder and Colab badges open the student notebooks; the
    repository is the one of ``pyproject.toml`` next to ``source_dir``.
    """
    import nbformat  # noqa: PLC0415  (an instructor tool: the lab extra brings nbformat)

    if target_dir.resolve() == source_dir.resolve():
        raise EditionError(f"{target_dir} is the folder of the instructor notebooks: writing "
                           "the student edition there would replace every solution")  # fmt: skip
    target_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(source_dir.glob("*.ipynb"))
    linked = [target_dir / p.name for p in sources if (target_dir / p.name).is_symlink()]
    if linked:
        raise EditionError(f"{linked[0]} is a symbolic link: the student edition would be "
                           "written through it, over the file it points to; remove it")  # fmt: skip
    for stale in set(target_dir.glob("*.ipynb")) - {target_dir / p.name for p in sources}:
        if not _someones_work(stale):
            stale.unlink()
    students = {
        path.name: student_notebook(nbformat.read(path, as_version=nbformat.NO_CONVERT), path.name)
        for path in sources
    }
    repository = links.configured_repository(source_dir.parent / "pyproject.toml")
    links.link_notebooks(students, repository, links.FOLDERS[1])
    for name, notebook in students.items():
        (target_dir / name).write_text(links.notebook_text(notebook), encoding="utf-8")
    return [target_dir / name for name in students]


def _someones_work(path: Path) -> bool:
    """Whether the file ``path`` holds what this module would not have written: a solution, or
    cells without the generated ``nav-top`` cell, or anything but a notebook's JSON."""
    try:
        cells = json.loads(path.read_text("utf-8")).get("cells", [])
        sources = ["".join(cell.get("source", "")) for cell in cells]
        generated = any(links.has_tag(cell, links.TOP) for cell in cells)
    except (OSError, ValueError, AttributeError, TypeError):
        return True
    solution = any(_BEGIN.match(line) for text in sources for line in text.split("\n"))
    return solution or (bool(cells) and not generated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="folder of instructor notebooks (notebooks/)")
    parser.add_argument("target", type=Path, help="folder for the student edition (student/)")
    args = parser.parse_args(argv)
    try:
        written = write_edition(args.source, args.target)
    except (EditionError, links.LinkError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} student notebooks to {args.target}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
