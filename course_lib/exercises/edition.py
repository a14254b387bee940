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
question) and of every cell with a guess are cleared, with the saved state of the widgets
only those outputs showed; every other cell, output and the notebook's metadata stay exactly
as they are, except that the Binder and Colab badges of the generated cells
(``course_lib.links``) open ``student/``, and that the solution and check cells of each
exercise carry ``{"exercise": {"id": "NN.name", "part": "solution" | "check"}}`` in their
metadata: how ``python -m course_lib.exercises.grade`` finds a submission's answers, whatever
the file is called.

A stub that leaves its cell invalid Python (markers around part of a statement) and a marker
left in the student edition (a near miss such as ``#BEGIN SOLUTION``, nbgrader's
``### BEGIN HIDDEN TESTS``, in any cell) are refused, with nothing written; so are a source
folder without notebooks (a mistyped name: every student notebook would look stale and be
removed) and a file there that is not a valid notebook (a merge conflict's markers).
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
import unicodedata
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
# The markers, the near misses student_source leaves in place (case, spacing) and nbgrader's
# hidden tests, which it does not remove: any of them left in a student edition is a leak
LEFTOVER = re.compile(r"(?i)\b(BEGIN|END)\s+(SOLUTION|HIDDEN\s+TESTS)\b|#\s*SOLUTION\b")
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # an output showing a widget
_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"  # the notebook's saved widgets
_WIDGET_REF = re.compile(r'(?:IPY_MODEL_|"model_id":\s*")(\w+)')


class EditionError(ValueError):
    """A notebook whose solution markers do not pair up, whose stub is not valid Python or
    that keeps a marker the edition does not recognise, or a target the edition would write
    over the instructor notebooks through (the source folder itself, a symbolic link)."""


def holds_marker(text: str) -> bool:
    """Whether ``text`` holds a :data:`LEFTOVER` marker as a reader sees it: a notebook's
    strings with their JSON escapes decoded (``BEGIN\\tSOLUTION``), compatibility characters
    folded (``ＢＥＧＩＮ``) and invisible ones dropped (zero-width spaces)."""
    try:
        decoded = "\n".join(_strings(json.loads(text)))
    except ValueError:
        decoded = ""
    folded = unicodedata.normalize("NFKC", f"{text}\n{decoded}")
    seen = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    return bool(LEFTOVER.search(seen))


def _strings(value):
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


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
    parts, cleared = exercise_parts(student), []
    for index, cell in enumerate(student.cells):
        if cell.get("cell_type") != "code":
            continue
        where = f"{name}, cell {index}"
        source = student_source(cell.source, where)
        if source != cell.source:
            _check_python(cell.source, source, where)
        if source != cell.source or is_exercise_cell(cell) or answers_a_question(cell):
            cleared += cell.get("outputs", [])
            cell.source, cell.outputs, cell.execution_count = source, [], None
        if index in parts:
            cell.metadata[METADATA] = {"id": parts[index][0], "part": parts[index][1]}
    _drop_widgets(student, cleared)
    return student


def _check_python(instructor: str, student: str, where: str) -> None:
    """Refuse a stub that breaks its cell: the instructor's cell is Python, the student's not
    (a block that is part of a statement, such as the items of a dict)."""
    try:
        ast.parse(instructor)
    except SyntaxError:
        return  # IPython's own syntax (magics): nothing to compare with
    try:
        ast.parse(student)
    except SyntaxError as error:
        raise EditionError(f"{where}, line {error.lineno}: the student cell is not valid Python "
                           f"({error.msg}): put the solution markers around whole "
                           "statements") from None  # fmt: skip


def _drop_widgets(notebook, cleared: list) -> None:
    """Remove from the notebook's saved widget state the widgets that only the ``cleared``
    outputs showed (their values, or what an Output widget captured, would stay in it)."""
    state = notebook.metadata.get("widgets", {}).get(_WIDGET_STATE, {}).get("state")
    if state:
        kept = [output for cell in notebook.cells for output in cell.get("outputs", [])]
        for model in _widgets(cleared, state) - _widgets(kept, state):
            del state[model]


def _widgets(outputs: list, state: dict) -> set[str]:
    """The ids of the widgets ``outputs`` show, and of the widgets those refer to."""
    todo = [output.get("data", {}).get(_WIDGET_VIEW, {}).get("model_id") for output in outputs]
    found = set()
    while todo:
        model = todo.pop()
        if model in state and model not in found:
            found.add(model)
            todo += _WIDGET_REF.findall(json.dumps(state[model]))
    return found


def write_edition(source_dir: Path, target_dir: Path) -> list[Path]:
    """Write the student edition of every notebook of ``source_dir`` into ``target_dir``;
    student notebooks whose instructor notebook is gone are removed (a notebook with a solution,
    or with cells and no generated ``nav-top`` cell, is someone's work, not one: it stays).
    Returns the written paths.

    The generated cells (``course_lib.links``) are written for the edition's folder in the
    repository (``student/``), so its Binder and Colab badges open the student notebooks; the
    repository is the one of ``pyproject.toml`` next to ``source_dir``.
    """
    if target_dir.resolve() == source_dir.resolve():
        raise EditionError(f"{target_dir} is the folder of the instructor notebooks: writing "
                           "the student edition there would replace every solution")  # fmt: skip
    sources = sorted(source_dir.glob("*.ipynb"))
    if not sources:  # a mistyped folder: every student notebook would look stale, and go
        raise EditionError(f"{source_dir} holds no notebooks: give the folder of the instructor "
                           "notebooks (notebooks/); nothing written")  # fmt: skip
    target_dir.mkdir(parents=True, exist_ok=True)
    linked = [target_dir / p.name for p in sources if (target_dir / p.name).is_symlink()]
    if linked:
        raise EditionError(f"{linked[0]} is a symbolic link: the student edition would be "
                           "written through it, over the file it points to; remove it")  # fmt: skip
    students = {
        path.name: student_notebook(links.read_notebook(path, source_dir), path.name)
        for path in sources
    }
    repository = links.configured_repository(source_dir.parent / "pyproject.toml")
    links.link_notebooks(students, repository, links.FOLDERS[1])
    texts = {name: links.notebook_text(notebook) for name, notebook in students.items()}
    leaks = [name for name, text in texts.items() if holds_marker(text)]
    if leaks:
        raise EditionError(f"{source_dir / leaks[0]}: a solution marker the edition does not "
                           "recognise would stay in the student edition; write it as "
                           "`# BEGIN SOLUTION` (nothing written)")  # fmt: skip
    for stale in set(target_dir.glob("*.ipynb")) - {target_dir / p.name for p in sources}:
        if not _someones_work(stale):
            stale.unlink()
    for name, text in texts.items():
        (target_dir / name).write_text(text, encoding="utf-8")
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
