"""Claims of the README, docs/architecture.md and CONTRIBUTING.md that review 9 found false and
corrected, pinned: the names the architecture gives exist, its trace-memory figure is what
``gradient_trace`` takes, GPU measurements are dated as the earlier run they were, and the
version rule says what pyproject.toml holds."""

import re
import tomllib
import tracemalloc
from pathlib import Path

import numpy as np

import course_lib as cl
from course_lib.ops.shape import ScatterLike
from course_lib.runtime import executor

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")

# Names in backticks that are Python's, NumPy's, PyTorch's or Hugging Face's, not course_lib's
EXTERNAL = {"AttributeError", "BaseException", "Fraction", "GeneratorExit", "IndexError",
            "LlamaForCausalLM", "None", "NotImplementedError", "SystemExit", "True",
            "TypeError", "ValueError", "_private", "_name"}  # fmt: skip


def _defined_names() -> set[str]:
    names = set()
    for path in [*ROOT.glob("course_lib/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"^\s*(?:class|def) (\w+)", text, re.M))
        names |= set(re.findall(r"^\s*(\w+)\s*[:=]", text, re.M))
    return names


def test_every_class_the_architecture_names_exists():
    """It named `Scatter` for the op class `ScatterLike`."""
    named = set(re.findall(r"`([A-Z][a-z]\w*)(?:\.\w+)?(?:\([^`]*\))?`", ARCHITECTURE))
    assert sorted(named - _defined_names() - EXTERNAL) == []
    assert ScatterLike.name == "scatter" and "`ScatterLike`" in ARCHITECTURE


def test_every_private_name_the_architecture_names_exists():
    """It named `_aliases` for the executor's overlap check, `_Earlier.aliased_by`."""
    named = set(re.findall(r"`(_[A-Za-z]\w*)(?:\.(\w+))?(?:\([^`]*\))?`", ARCHITECTURE))
    sources = "\n".join(p.read_text(encoding="utf-8") for p in ROOT.glob("course_lib/**/*")
                        if p.suffix in {".py", ".hpp", ".cu", ".cuh"})
    missing = [f"{a}.{b}" if b else a for a, b in sorted(named) if a not in EXTERNAL
               and not all(re.search(rf"\b{n}\b", sources) for n in (a, b) if n)]
    assert missing == []
    assert callable(executor._Earlier.aliased_by) and "`_Earlier.aliased_by`" in ARCHITECTURE


def test_the_trace_memory_figure_is_what_gradient_trace_takes():
    """The architecture said 4 MB for a 4,000-op chain; the peak is about 7 MiB now."""
    found = re.search(r"4,000-op\s+chain of `sin`: ([\d.]+) MiB", ARCHITECTURE)
    assert found, "the figure moved: update this test with it"
    x = cl.variable("x", (), np.float64)
    y = x
    for _ in range(4000):
        y = cl.sin(y)
    tracemalloc.start()
    try:
        cl.gradient_trace(y, [x])
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    stated = float(found.group(1))
    assert 0.75 * stated < peak < 1.25 * stated, f"measured {peak:.1f} MiB, stated {stated}"


def _paragraphs(text: str) -> list[str]:
    return re.split(r"\n\s*\n|\n(?=- )|\n(?=\| )", text)


def test_gpu_measurements_carry_the_date_of_their_run():
    """No GPU has run the code since 2026-11-27: a figure from an H100 or H200 says when."""
    for text in (README, ARCHITECTURE):
        for para in _paragraphs(text):
            if re.search(r"H100|H200", para) and re.search(r"measured|found by|cost", para, re.I):
                assert "2026-11" in para, para[:200]
    measured = next(p for p in _paragraphs(README) if p.startswith("Measured by `make gpu-check`"))
    measured = " ".join(measured.split())
    assert "earlier run" in measured
    assert "none of what follows is a measurement of the current code" in measured
    assert "CI proves" not in README  # the strict stand-in cannot show what a GPU computes


def test_the_version_rule_says_what_pyproject_holds():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    if not re.fullmatch(r"\d{4}\.[123](\.\d+)?", version):  # no release tagged yet
        assert f"stays `{version}`" in CONTRIBUTING
