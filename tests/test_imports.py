"""What importing course_lib loads: the calculators and the engine need no plotting stack,
and no kernel machinery (g++ builds, NVRTC, CuPy) until a kernel is used."""

import json
import subprocess
import sys

import pytest

from course_lib import kernels

PLOTTING = ["graphviz", "matplotlib", "ipywidgets", "course_lib.viz"]
KERNEL_MACHINERY = [
    "course_lib.kernels.emulator",
    "course_lib.kernels.native",
    "course_lib.kernels.nvrtc",
    "course_lib.kernels.gpu",
    "cupy",
    "cupyx",
]


def loaded_after_import(module: str, watched: list[str]) -> list[str]:
    """The modules of ``watched`` (or their submodules) a fresh interpreter has loaded after
    ``import module``."""
    code = (
        f"import json, sys, {module}\n"
        f"print(json.dumps(sorted(m for m in sys.modules if any(m == w or m.startswith(w + '.') "
        f"for w in {watched!r}))))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


@pytest.mark.parametrize("module", ["course_lib", "course_lib.models"])
def test_import_loads_no_plotting_stack(module):
    assert loaded_after_import(module, PLOTTING) == [], f"import {module} loaded plotting"


@pytest.mark.parametrize("module", ["course_lib", "course_lib.models"])
def test_import_loads_no_kernel_machinery(module):
    assert loaded_after_import(module, KERNEL_MACHINERY) == [], f"import {module} loaded kernels"


def test_every_kernel_name_resolves_on_first_use():
    """The lazy names of course_lib.kernels: each one in __all__ resolves, ``fused`` is the
    launcher (not the template module of the same name), and a typo is an AttributeError."""
    assert sorted(kernels.__all__) == dir(kernels)
    for name in kernels.__all__:
        assert getattr(kernels, name) is not None, name
    assert kernels.fused is kernels.launch.fused and callable(kernels.fused)
    assert kernels.FusedElementwise.__module__ == "course_lib.kernels.fused_template"
    with pytest.raises(AttributeError, match="has no attribute 'fusedd'"):
        kernels.fusedd  # noqa: B018
