"""The layer table of docs/architecture.md and the import-linter contracts in pyproject.toml
are the same list, and it names every module of course_lib (`make lint` runs `lint-imports`,
which checks the imports against the contracts)."""

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # the standard library's TOML reader (Python >= 3.11)

ROOT = Path(__file__).resolve().parents[1]


def table_layers() -> list[set[str]]:
    """The modules of each row of the layer table, top row first (``viz/`` -> ``viz``)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1]
    table = section.split("\n| layer |", 1)[1].split("\n\n", 1)[0]  # up to its first blank line
    rows = re.findall(r"^\| [a-z_]+ \| ([^|]+) \|", table, re.M)
    return [{m.removesuffix(".py").rstrip("/") for m in re.findall(r"`([^`]+)`", r)} for r in rows]


def contract_layers() -> tuple[list[set[str]], set[str]]:
    """The modules of each layer of the layers contract, top first, and the optional ones."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    layers = [{m.strip() for m in re.split(r"[|:]", layer)} for layer in contract["layers"]]
    optional = {m.strip("()") for layer in layers for m in layer if m.startswith("(")}
    return [{m.strip("()") for m in layer} for layer in layers], optional


def test_the_table_and_the_contracts_list_the_same_layers():
    layers, _ = contract_layers()
    assert table_layers() == layers


def test_every_module_of_course_lib_has_a_layer():
    _, optional = contract_layers()
    declared = set().union(*table_layers())
    package = ROOT / "course_lib"
    present = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    present |= {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    assert present == declared - {m for m in optional if not (package / m).exists()}


def test_a_cycle_check_covers_the_whole_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    kinds = {c["type"]: c for c in config["contracts"]}
    assert kinds["acyclic_siblings"]["ancestors"] == ["course_lib"]
    assert kinds["layers"]["containers"] == ["course_lib"] and kinds["layers"]["exhaustive"]


def test_graph_reaches_the_eager_runtime_only_through_its_hook():
    """graph.apply runs eager inputs through ``set_eager_hook``, which the runtime calls."""
    import course_lib
    from course_lib import graph

    source = (ROOT / "course_lib" / "graph.py").read_text()
    assert "runtime" not in source and "Tensor" not in source and "apply_eager" not in source
    assert graph._eager_hook[0] == course_lib.Tensor.apply_eager
