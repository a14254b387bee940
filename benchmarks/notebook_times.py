"""How long each notebook takes to run top to bottom, and the "Running time" line it states.

Runs every notebook of ``notebooks/`` in a fresh kernel (nbclient, BLAS pinned to one thread
as the test suite runs them), prints the seconds, and with ``--write`` rewrites each notebook's
``**Running time**`` line (in the cell of its learning goals) with the measured figure rounded
up to 5 s. Measure on an idle 2-core machine, the one the notebooks are budgeted for:
``.venv/bin/python benchmarks/notebook_times.py [--write] [NN ...]``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LINE = re.compile(r"^\*\*Running time\*\*: .*$", re.M)
GOALS = ("**Learning goals**", "**You will learn to**", "**You will see how to**")


def running_time_line(seconds: float) -> str:
    """The line a notebook states, the time rounded up to 5 s."""
    rounded = 5 * math.ceil(seconds / 5)
    return (f"**Running time**: about {rounded} s top to bottom on 2 CPU cores "
            "(measured with `benchmarks/notebook_times.py`).")  # fmt: skip


def run(path: Path) -> float:
    """Seconds to execute the notebook at ``path`` in a fresh kernel (nothing written)."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})  # fmt: skip
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def write_line(path: Path, line: str) -> None:
    """Put ``line`` in the learning goals' cell: replace the old one, or add it after the goals."""
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    cell = next(c for c in notebook.cells
                if c.cell_type == "markdown" and any(g in c.source for g in GOALS))  # fmt: skip
    if LINE.search(cell.source):
        cell.source = LINE.sub(line, cell.source)
    else:
        cell.source = cell.source.rstrip("\n") + "\n\n" + line
    nbformat.write(notebook, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="notebook numbers (default: all)")
    parser.add_argument("--write", action="store_true", help="rewrite the Running time lines")
    args = parser.parse_args(argv)
    os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    paths = [p for p in sorted(NOTEBOOKS.glob("*.ipynb"))
             if not args.only or p.name[:2] in args.only]  # fmt: skip
    for path in paths:
        seconds = run(path)
        print(f"{path.name:34s} {seconds:6.1f} s")
        if args.write:
            write_line(path, running_time_line(seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
