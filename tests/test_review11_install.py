"""Review 11 (install routes): the Makefile's setup as a new user meets it. Fake programs stand
in for apt-get, dot, g++, Chromium and Python, so nothing is installed."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")

pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _tools(folder: Path, *names: str) -> Path:
    """A folder holding a do-nothing program for each of ``names``, and a fake apt-get that
    records its arguments in ``apt.log``."""
    folder.mkdir()
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
    (folder / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {folder / "apt.log"}\n')
    for program in folder.iterdir():
        program.chmod(0o755)
    return folder


def _system_deps(tools: Path, root: bool, ci: bool = False) -> subprocess.CompletedProcess:
    env = {"PATH": str(tools), **({"CI": "true"} if ci else {})}
    return subprocess.run(
        [MAKE, "--no-print-directory", "-f", str(ROOT / "Makefile"), "system-deps",
         "NEED_BROWSER=yes", f"IS_ROOT={'yes' if root else 'no'}", f"APT={tools / 'apt-get'}"],
        cwd=tools, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _apt_calls(tools: Path) -> str:
    log = tools / "apt.log"
    return log.read_text() if log.exists() else ""


def test_as_root_it_installs_gxx_when_missing(tmp_path):
    """The CPU kernels and the emulator compile with g++; CI fails without it (needs_gxx)."""
    tools = _tools(tmp_path / "bin", "dot", "chromium")
    result = _system_deps(tools, root=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "install -y -qq" in _apt_calls(tools) and "g++" in _apt_calls(tools)


def test_ubuntus_chromium_browser_is_chromium(tmp_path):
    """The browser tests take ``chromium-browser`` too: apt-get must not look for another."""
    tools = _tools(tmp_path / "bin", "dot", "g++", "chromium-browser")
    result = _system_deps(tools, root=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _apt_calls(tools) == ""


def test_a_missing_tool_fails_in_ci_rather_than_skipping(tmp_path):
    """Not root: the hint, and with CI set a failure (the browser tests would skip)."""
    tools = _tools(tmp_path / "bin", "dot", "g++")
    local = _system_deps(tools, root=False)
    assert local.returncode == 0 and "sudo apt-get install -y" in local.stdout, local.stdout
    ci = _system_deps(tools, root=False, ci=True)
    assert ci.returncode != 0 and "chromium" in ci.stdout, ci.stdout + ci.stderr
    assert _apt_calls(tools) == ""


def _fake_python(tmp_path: Path, version_ok: bool) -> Path:
    """A Python whose ``-c`` version check passes or not, and whose ``-m venv`` fails halfway
    as Debian's does without python3-venv: bin/python made, pip never installed."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path)
    python = tmp_path / "fake-python"
    python.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path / "python.log"}\n'
        f'case "$1" in -c) exit {0 if version_ok else 1};; esac\n'
        "mkdir -p .venv/bin && printf '#!/bin/sh\\n' > .venv/bin/python\n"
        "chmod +x .venv/bin/python\necho 'ensurepip is not available' >&2\nexit 1\n"
    )
    python.chmod(0o755)
    return python


def _make_lab_stamp(tmp_path: Path, python: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAKE, "--no-print-directory", ".venv/.lab-stamp", f"PYTHON={python}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "MAKEFLAGS": ""},
    )  # fmt: skip


def test_a_failed_venv_is_not_taken_as_done(tmp_path):
    """Without .DELETE_ON_ERROR the half-made .venv/bin/python stayed, and every later run
    failed on a missing .venv/bin/pip instead of making the venv again."""
    python = _fake_python(tmp_path, version_ok=True)
    assert _make_lab_stamp(tmp_path, python).returncode != 0
    assert not (tmp_path / ".venv" / "bin" / "python").exists()
    _make_lab_stamp(tmp_path, python)
    assert (tmp_path / "python.log").read_text().count("-m venv") == 2


def test_an_old_python_is_refused_before_the_venv(tmp_path):
    """A Python 3.10 venv failed only at pip's install and stayed, whatever PYTHON said next."""
    python = _fake_python(tmp_path, version_ok=False)
    result = _make_lab_stamp(tmp_path, python)
    assert result.returncode != 0
    assert "needs Python >= 3.11" in result.stdout, result.stdout + result.stderr
    assert "-m venv" not in (tmp_path / "python.log").read_text()
    assert not (tmp_path / ".venv").exists()


def test_the_conda_route_says_where_cupy_is_built():
    """conda-forge builds cupy and cuda-nvrtc for Linux and Windows only (no macOS CUDA), so
    ``conda env create -f environment.yml`` cannot solve on a Mac unless told what to drop."""
    readme = (ROOT / "README.md").read_text()
    conda = readme.split("## Conda, Binder and Colab", 1)[1].split("- Binder:", 1)[0]
    assert "macOS" in conda and "`cupy`" in conda and "`cuda-nvrtc`" in conda
    assert "macOS" in (ROOT / "environment.yml").read_text()
