"""Grade submitted notebooks: run each one and collect the verdict of every exercise.

::

    python -m course_lib.exercises.grade submissions/*.ipynb [--timeout 600]

Each notebook is executed from top to bottom in a fresh kernel (in its own folder, errors
allowed, so one broken cell does not hide the later exercises). Every ``check(...)`` call
reports its verdict through the file named by ``$COURSE_LIB_EXERCISE_LOG``; the exercises of
that notebook's number that were never checked are listed as "missing". The table shows one
row per notebook and exercise. This runs the submitted code: run it in a container or a
sandbox, and remember that code in a notebook can print anything it likes (only the checks'
own verdicts are counted).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from ..tables import Table
from . import EXERCISES, LOG_ENV

MISSING = "missing"


def _run(path: Path, log: Path, timeout: int) -> str | None:
    """Execute the notebook with the verdict log set; the error that stopped it, if any."""
    import nbformat  # noqa: PLC0415  (instructor side: the lab extra brings these)
    from nbclient import NotebookClient  # noqa: PLC0415

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=timeout, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    saved = os.environ.get(LOG_ENV)
    os.environ[LOG_ENV] = str(log)  # the kernel inherits the environment
    try:
        client.execute()
    except Exception as error:  # a cell timed out, or the kernel died
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    finally:
        if saved is None:
            del os.environ[LOG_ENV]
        else:
            os.environ[LOG_ENV] = saved
    return None


def grade_notebook(path: Path, timeout: int = 600) -> list[tuple[str, str, str]]:
    """(exercise id, status, first line of the message) for every exercise of ``path``."""
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "verdicts.jsonl"
        log.touch()
        stopped = _run(path, log, timeout)
        verdicts = {}
        for line in log.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            verdicts[record["exercise"]] = (record["status"], record["message"].splitlines()[0])
    number = path.name[:2]
    expected = sorted(set(verdicts) | {e for e in EXERCISES if e.startswith(f"{number}.")})
    why_missing = "never checked" + (f" ({stopped})" if stopped else "")
    return [(e, *verdicts.get(e, (MISSING, why_missing))) for e in expected]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="submitted .ipynb files")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)
    rows, passed, total = [], 0, 0
    for path in args.notebooks:
        for exercise_id, status, message in grade_notebook(path, args.timeout):
            rows.append([str(path), exercise_id, status, message])
            passed, total = passed + (status == "passed"), total + 1
    print(
        Table(
            ["notebook", "exercise", "verdict", "message"],
            rows,
            f"{passed} of {total} exercises passed",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
