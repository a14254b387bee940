"""Claims in the prose of notebooks 03 and 04 checked against the stored outputs they describe."""

import json
import re
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NUMBERS = {"four": 4, "five": 5, "six": 6, "seven": 7}


def cells(name):
    return json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))["cells"]


def text(cell):
    return "".join(cell["source"])


def output(cell):
    """The stored text/plain output of a code cell."""
    for out in cell["outputs"]:
        if "data" in out:
            return "".join(out["data"]["text/plain"])
    raise AssertionError(f"no text/plain output in cell {cell.get('id')}")


def code_cell(notebook, marker):
    (cell,) = [c for c in notebook if c["cell_type"] == "code" and marker in text(c)]
    return cell


def markdown_cell(notebook, marker):
    (cell,) = [c for c in notebook if c["cell_type"] == "markdown" and marker in text(c)]
    return cell


def test_03_the_prose_says_which_weights_the_table_saves_for_backward():
    """The table's saved column holds every activation h_0..h_L but only the weights W_1..W_L-1
    (x needs no adjoint, so nothing reads W_0): the prose must not say it keeps every weight."""
    notebook = cells("03_reverse_mode.ipynb")
    table = output(code_cell(notebook, "saved for backward: MiB"))
    activation, weight = 1024 * 64 * 4 / 2**20, 64 * 64 * 4 / 2**20  # MiB, float32
    rows = [line.split() for line in table.splitlines() if re.match(r"\d+\s", line)]
    assert len(rows) == 4
    for depth, _, _, saved in ((int(r[0]), *map(float, r[1:])) for r in rows):
        assert saved == round((depth + 1) * activation + (depth - 1) * weight, 2), depth
        assert saved != round((depth + 1) * activation + depth * weight, 2), depth
    prose = text(markdown_cell(notebook, "On a chain of layers"))
    assert "W_0" in prose and "not kept" in prose


def _op(expression):
    """The op of one line of a drawing's text, such as ``v̄7 = sum_to(v̄8, v7) ≡ v̄(7→8)``."""
    expression = expression.split(" ≡ ")[0]
    if call := re.match(r"(\w+)\(", expression):
        return call.group(1)
    for symbol in ("@", "×", "−", "²", ">"):
        if symbol in expression:
            return symbol
    return "seed" if expression == "1" else "variable"


def test_04_the_count_of_ops_new_in_the_backward_box_matches_the_drawing():
    """The backward box holds six ops the forward one lacks: the seed v̄10 = 1 (ones_like) and
    five more; the prose's count must say which it leaves out."""
    notebook = cells("04_training.ipynb")
    drawing = output(code_cell(notebook, 'title="forward + backward",')).splitlines()
    forward = int(re.search(r"\((\d+) forward", drawing[0]).group(1))
    ops = [_op(line.split(" = ", 1)[1]) for line in drawing[1:] if " = " in line]
    new = set(ops[forward:]) - set(ops[:forward])
    assert new == {"seed", "unreduce", "×", "sum_to", "mT", ">"}
    prose = text(markdown_cell(notebook, "in the backward box never appear"))
    said = NUMBERS[re.search(r"(\w+) ops in the backward box", prose).group(1).lower()]
    leaves_out_seed = r"\bar v_{10} = 1" in prose.split("ops in the backward box")[0]
    assert said == len(new) - leaves_out_seed
