"""The claims docs/architecture.md makes that code can check: the walk from ``cl.grad`` to
``Mul``'s rule names the files those functions live in, and the only module-level tables keyed
by op names are the three the document names as exceptions."""

import ast
import inspect
import re
from pathlib import Path

import course_lib as cl
from course_lib.autodiff import reverse
from course_lib.ops import broadcast, elementwise

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "course_lib"
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _walk_files() -> list[str]:
    section = DOC.split("## From `cl.grad` to `Mul`'s rule", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d\. `([\w/]+\.py)`", section, re.MULTILINE)


def test_the_walk_from_grad_to_muls_rule_names_the_files_the_code_is_in():
    where = [cl.grad, reverse.gradient, cl.graph.Op.gradient, elementwise.Mul.gradient,
             broadcast.unbroadcast]  # fmt: skip
    files = sorted({str(Path(inspect.getsourcefile(f)).relative_to(PACKAGE)) for f in where})
    assert sorted(_walk_files()) == files
    assert len(files) == 4 and "(four files)" in DOC


def _op_class_names() -> set[str]:
    """The ``name`` of every op class (``rms_norm_grad_x``, ``adam_moment``, ...)."""
    import course_lib.models.optim  # noqa: F401, PLC0415  (AdamW's update ops are ops too)

    names, classes = set(), [cl.graph.Op]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        names.add(getattr(cls, "name", None))
    return names - {None}


def _op_name_tables(path: Path) -> list[str]:
    """Module-level dicts whose keys are string literals naming ops of the library."""
    ops = set(cl.ops.__all__) | _op_class_names()
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target, value = (node.target, node.value) if isinstance(node, ast.AnnAssign) else (
            (node.targets[0], node.value) if isinstance(node, ast.Assign) else (None, None))
        if isinstance(value, ast.Dict) and value.keys:
            keys = [k.value for k in value.keys if isinstance(k, ast.Constant)]
            if keys and sum(isinstance(k, str) and k in ops for k in keys) > len(keys) // 2:
                found.append(f"{path.relative_to(PACKAGE)}:{getattr(target, 'id', '?')}")
    return found


def test_the_only_tables_keyed_by_op_names_are_the_stated_exceptions():
    tables = sorted(t for p in PACKAGE.rglob("*.py") for t in _op_name_tables(p))
    for table in tables:
        module, name = table.split(":")
        assert f"`{name}`" in DOC and module.split("/")[-1] in DOC, table
    assert "kernels/dispatch.py:_ENABLED" in tables
