"""Each notebook opens with what it teaches and how long it runs (issue 24, item 3): its
goals, and a "Running time" line measured by benchmarks/notebook_times.py, within the 90 s
budget of a 2-core machine."""

import re
import sys
from pathlib import Path

import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from notebook_times import GOALS, LINE, running_time_line  # noqa: E402


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_the_goals_cell_states_the_running_time(path: Path):
    cells = nbformat.read(path, as_version=4).cells
    goals = [c for c in cells if c.cell_type == "markdown" and any(g in c.source for g in GOALS)]
    assert len(goals) == 1, "one cell with the notebook's goals"
    line = LINE.search(goals[0].source)
    assert line, "no **Running time** line: run benchmarks/notebook_times.py --write"
    seconds = int(re.search(r"about (\d+) s", line.group(0)).group(1))
    assert 0 < seconds <= 90 and line.group(0) == running_time_line(seconds)
