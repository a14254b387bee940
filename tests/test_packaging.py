"""The conda and Binder routes install what pyproject.toml says the package needs."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

yaml = pytest.importorskip("yaml", reason="PyYAML (a repo2docker dependency) is not installed")

ROOT = Path(__file__).resolve().parents[1]
# PyPI name -> conda-forge name when they differ
CONDA_NAME = {"graphviz": "python-graphviz", "cupy-cuda12x": "cupy",
              "nvidia-cuda-nvrtc-cu12": "cuda-nvrtc"}  # fmt: skip


def _conda_packages(path: Path) -> set[str]:
    deps = yaml.safe_load(path.read_text())["dependencies"]
    return {re.split(r"[=<> ]", d)[0] for d in deps if isinstance(d, str)}


def _conda_pins(path: Path) -> dict[str, str]:
    deps = yaml.safe_load(path.read_text())["dependencies"]
    return dict(d.split("=", 1) for d in deps if isinstance(d, str) and "=" in d)


def _constraints() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_the_environment_files_pin_the_versions_the_tests_install():
    """constraints.txt is what `make setup` installs with; the conda files pin the same."""
    pins = _conda_pins(ROOT / "environment.yml")
    expected = {CONDA_NAME.get(name, name): version for name, version in _constraints().items()}
    assert pins == {"python": "3.11", **expected}
    assert _conda_pins(ROOT / "binder" / "environment.yml") == pins
    assert {"cxx-compiler", "graphviz"} <= _conda_packages(ROOT / "environment.yml")


def test_the_installed_versions_are_the_pinned_ones():
    from importlib import metadata

    installed = {}
    for name in _constraints():
        try:
            installed[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if os.environ.get("CI"):
                raise
    assert installed == {n: v for n, v in _constraints().items() if n in installed}, (
        "the environment differs from constraints.txt: run make setup"
    )


def test_environment_names_every_runtime_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    (python,) = [d.split("=")[1] for d in environment if str(d).startswith("python=")]
    required = [Requirement(d) for d in project["dependencies"]]  # those for the env's Python:
    needed = {
        CONDA_NAME.get(r.name, r.name)
        for r in required
        if r.marker is None or r.marker.evaluate({"python_version": python})
    }
    missing = needed - _conda_packages(ROOT / "environment.yml")
    assert not missing, f"environment.yml lacks {sorted(missing)}"
    assert "graphviz" in _conda_packages(ROOT / "environment.yml"), "the dot binary itself"


def test_binder_builds_the_same_environment():
    assert _conda_packages(ROOT / "binder" / "environment.yml") == _conda_packages(
        ROOT / "environment.yml"
    )
    assert "pip install --no-deps -e ." in (ROOT / "binder" / "postBuild").read_text()


def test_repo2docker_accepts_the_repository(tmp_path):
    exe = shutil.which("repo2docker", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("jupyter-repo2docker is not installed (it is in the test extra)")
    result = subprocess.run(
        [exe, "--no-build", "--no-run", str(ROOT)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    dockerfile = result.stdout
    assert "binder/environment.yml" in dockerfile and "./binder/postBuild" in dockerfile


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_repository_url_in_pyproject_does_not_reinstall(tmp_path):
    """`make links --repository` writes [project.urls]; pip must run again only when what it
    installs from changes (issue 24, item 5). A fake pip records its calls."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("#!/bin/sh\n")
    (bin_dir / "pip").write_text('#!/bin/sh\necho "$@" >> "$(dirname "$0")/pip.log"\n')
    for tool in ("python", "pip"):
        (bin_dir / tool).chmod(0o755)
    pyproject = tmp_path / "pyproject.toml"

    def installs() -> int:
        subprocess.run(["make", "-s", ".venv/.lab-stamp"], cwd=tmp_path, check=True,
                       capture_output=True)  # fmt: skip
        log = bin_dir / "pip.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    assert installs() == 1
    text = pyproject.read_text()
    urls = '\n[project.urls]\nRepository = "https://github.com/me/course"\n'
    pyproject.write_text(text.replace("\n[project.optional-dependencies]",
                                      urls + "\n[project.optional-dependencies]"))  # fmt: skip
    assert "[project.urls]" in pyproject.read_text()
    assert installs() == 1  # a URL: nothing to install
    pyproject.write_text(pyproject.read_text().replace("me/course", "you/course"))
    assert installs() == 1
    pyproject.write_text(pyproject.read_text().replace('"tqdm>=4.60"', '"tqdm>=4.61"'))
    assert installs() == 2  # a dependency: pip again
