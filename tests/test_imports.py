"""What importing course_lib loads: the calculators and the engine need no plotting stack."""

import subprocess
import sys

import pytest

PLOTTING = ["graphviz", "matplotlib", "ipywidgets", "course_lib.viz"]


@pytest.mark.parametrize("module", ["course_lib", "course_lib.models"])
def test_import_loads_no_plotting_stack(module):
    code = f"import sys, {module}; print([m for m in {PLOTTING!r} if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()  # fmt: skip
    assert loaded == "[]", f"import {module} loaded {loaded}"
