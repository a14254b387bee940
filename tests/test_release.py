"""`make release` (course_lib.release): the student release holds the student edition and
no solution, is the same tree when made twice, and refuses destinations it could damage."""

import fnmatch
import hashlib
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, ROOT, STUDENT
from test_markdown_links import LINK

from course_lib.links import BOTTOM, INSTALL, TOP, has_tag
from course_lib.release import INSTRUCTOR_TOOLS, MANIFEST, SOLUTION

URL = "https://github.com/someone/ml-systems-student"


def _release(dest, *options):
    return subprocess.run(
        [sys.executable, "-m", "course_lib.release", str(dest), *options],
        cwd=ROOT, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def _tree(dest) -> dict[str, str]:
    """Every file under ``dest`` (but .git) and the hash of its bytes."""
    return {
        str(path.relative_to(dest)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(dest.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(dest).parts
    }


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    dest = tmp_path_factory.mktemp("release") / "course"
    done = _release(dest, "--repository", URL)
    assert done.returncode == 0, done.stderr
    return dest


def test_the_release_holds_what_a_student_needs(released):
    files = set(_tree(released))
    for needed in ("README.md", "LICENSE", "environment.yml", "pyproject.toml",
                   "binder/postBuild", "binder/environment.yml", "course_lib/__init__.py",
                   "course_lib/exercises/core.py", "course_lib/kernels/vector_add.cu",
                   "benchmarks/notebook_times.py"):  # fmt: skip
        assert needed in files
    names = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    assert {f.removeprefix("notebooks/") for f in files if f.startswith("notebooks/")} == names
    assert not any(f.startswith(("tests/", "student/", "docs/", ".ci/")) for f in files)
    assert not set(INSTRUCTOR_TOOLS) & files
    assert os.access(released / "binder" / "postBuild", os.X_OK)
    assert f'Repository = "{URL}"' in (released / "pyproject.toml").read_text()


def test_no_file_of_the_release_holds_a_solution(released):
    found = [
        path for path in released.rglob("*")
        if path.is_file() and SOLUTION.search(path.read_bytes().decode("utf-8", "replace"))
    ]  # fmt: skip
    assert not found
    assert SOLUTION.search("    # BEGIN SOLUTION") and SOLUTION.search("x = 3  # SOLUTION")


def _content_cells(path):
    """A notebook's cells but the generated link, badge and install cells."""
    cells = nbformat.read(path, as_version=nbformat.NO_CONVERT).cells
    return [c for c in cells if not any(has_tag(c, t) for t in (TOP, INSTALL, BOTTOM))]


def test_the_release_notebooks_are_the_student_edition_linked_for_the_release(released):
    for student in sorted(STUDENT.glob("*.ipynb")):
        release = released / "notebooks" / student.name
        assert _content_cells(release) == _content_cells(student), student.name
        text = release.read_text()
        assert f"someone/ml-systems-student/main?labpath=notebooks%2F{student.name}" in text
        assert "git+https://github.com/someone/ml-systems-student@main" in text


def _named_paths(text: str, top: set[str]) -> list[str]:
    """The repository paths ``text`` names: a path under one of the repository's top-level
    folders, one of its top-level files, or a `make` target (the Makefile). A URL names none,
    so a link to the repository is fine. ``../`` (from notebooks/) goes to the top."""
    text = re.sub(r"https?://\S+", "", text)
    folders = "|".join(re.escape(t) for t in sorted(top) if (ROOT / t).is_dir())
    files = "|".join(re.escape(t) for t in sorted(top) if (ROOT / t).is_file())
    path = re.compile(rf"(?<![\w./-])(?:\.\./)?((?:{folders})/[\w./*-]*|(?:{files})(?![\w.-]))")
    named = [m.rstrip(".,") for m in path.findall(text)]
    return named + ["Makefile"] * len(re.findall(r"`make \w", text))


def _missing(paths: list[str], files: set[str]) -> list[str]:
    """The paths no file of ``files`` is: exactly, under that folder, or by that glob."""

    def found(path):
        if "*" in path:
            return any(fnmatch.fnmatch(f, path) for f in files)
        return path in files or any(f.startswith(path.rstrip("/") + "/") for f in files)

    return [p for p in paths if not found(p)]


def test_the_release_notebooks_name_no_file_the_release_lacks(released):
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
    top = {path.split("/")[0] for path in tracked}
    files = set(_tree(released))
    # the scan finds what it must: docs, benchmarks, tests and `make` targets, not URLs
    sample = ("see `docs/gpu_lab.md`, `make gpu-check` and [here](../tests/test_x.py); "
              "`course_lib/kernels/*.cu`, [home](../README.md), "
              "https://github.com/someone/ml-systems-student/blob/main/docs/a.md")  # fmt: skip
    assert _missing(_named_paths(sample, top), files) == [
        "docs/gpu_lab.md", "tests/test_x.py", "Makefile"]  # fmt: skip
    problems = []
    for notebook in sorted((released / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(notebook, as_version=nbformat.NO_CONVERT).cells
        for index, cell in enumerate(cells):  # what the cells say; outputs are the library's
            for path in _missing(_named_paths(cell.source, top), files):
                problems.append(f"{notebook.name}, cell {index}: {path}")
    assert not problems, "paths the student release lacks:\n" + "\n".join(problems)


def test_the_release_readme_links_reach_its_files(released):
    readme = (released / "README.md").read_text()
    targets = [t for t in LINK.findall(readme) if not t.startswith("https://")]
    assert len(targets) >= 10 and all((released / t).exists() for t in targets), targets
    assert "{{" not in readme and "<!--" not in readme and "mybinder.org/v2/gh/someone" in readme


def test_the_released_package_checks_answers_without_the_instructor_tools(released):
    code = ("from course_lib.exercises import check\n"
            "check('05.contiguous_strides', lambda shape: tuple("
            "__import__('math').prod(shape[k + 1:]) for k in range(len(shape))))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(released)}
    ran = subprocess.run([sys.executable, "-c", code], cwd=released, env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert ran.returncode == 0 and ran.stdout.startswith("✓ 05.contiguous_strides"), ran


def test_every_module_of_the_released_package_imports(released):
    """Leaving the instructor tools out must leave nothing that imports them behind."""
    code = ("import importlib, pathlib\n"
            "for path in sorted(pathlib.Path('course_lib').rglob('*.py')):\n"
            "    name = '.'.join(path.with_suffix('').parts)\n"
            "    importlib.import_module(name.removesuffix('.__init__'))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(released)}
    ran = subprocess.run([sys.executable, "-c", code], cwd=released, env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]


def test_a_second_release_writes_the_same_tree_and_drops_what_it_no_longer_holds(tmp_path):
    dest = tmp_path / "course"
    assert _release(dest).returncode == 0
    first = _tree(dest)
    manifest = json.loads((dest / MANIFEST).read_text())
    (dest / "notebooks" / "99_gone.ipynb").write_text("{}")  # as if an earlier release had it
    manifest["files"].append("notebooks/99_gone.ipynb")
    (dest / MANIFEST).write_text(json.dumps(manifest))
    (dest / ".git").mkdir()  # a clone of the published repository keeps its .git
    assert _release(dest).returncode == 0
    assert _tree(dest) == first
    readme = (dest / "README.md").read_text()
    assert "badge" not in readme and "\n\n\n" not in readme  # no repository: no badges


def test_the_badges_follow_the_destinations_git_origin(tmp_path):
    dest = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "remote", "add", "origin",
                    "git@github.com:teacher/fall-course.git"], check=True)  # fmt: skip
    assert _release(dest).returncode == 0
    assert "teacher/fall-course/main?labpath=notebooks" in (dest / "README.md").read_text()


@pytest.mark.parametrize(
    "where, options, expected",
    [
        ("inside", (), "inside the repository"),
        ("unrelated", (), "not an earlier release (thesis.tex)"),
        ("file", (), "is a file"),
        ("empty", ("--repository", "https://gitlab.com/me/course"), "not a GitHub https URL"),
        ("empty", ("--repository", ""), "no repository URL given"),
        ("bad-manifest", (), "outside the release"),
        ("git-in-manifest", (), "outside the release"),
        ("linked-folder", (), "through a symbolic link to a folder"),
        ("linked-manifest", (), "is a symbolic link"),
        ("linked-dest", (), "is a symbolic link"),
    ],
)
def test_a_release_that_could_do_harm_is_refused_and_changes_nothing(
    tmp_path, where, options, expected
):
    dest = {"inside": ROOT / "release-here"}.get(where, tmp_path / "dest")
    if where == "unrelated":
        dest.mkdir()
        (dest / "thesis.tex").write_text("mine")
    elif where == "file":
        dest.write_text("a file")
    elif where == "bad-manifest":
        dest.mkdir()
        (dest / MANIFEST).write_text(json.dumps({"files": ["/etc/passwd"]}))
    elif where == "git-in-manifest":  # a rerun would delete the clone's .git/config
        (dest / ".git").mkdir(parents=True)
        (dest / ".git" / "config").write_text("[core]")
        (dest / MANIFEST).write_text(json.dumps({"files": [".git/config", "LICENSE"]}))
    elif where in ("linked-folder", "linked-manifest", "linked-dest"):
        victim = tmp_path / "victim"
        victim.mkdir()
        (victim / "apt.txt").write_text("keep")
        if where == "linked-dest":
            dest.symlink_to(victim)
        else:
            dest.mkdir()
            files = ["binder/apt.txt", "binder/gone.txt"] if where == "linked-folder" else []
            (dest / MANIFEST).write_text(json.dumps({"files": files}))
        if where == "linked-folder":  # as a pull of a shared release could bring in
            (dest / "binder").symlink_to(victim)
        if where == "linked-manifest":
            (dest / MANIFEST).unlink()
            (dest / MANIFEST).symlink_to(victim / "made-by-the-release")
    before = _tree(tmp_path)
    done = _release(dest, *options)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert _tree(tmp_path) == before and not (ROOT / "release-here").exists()
    if where == "git-in-manifest":
        assert (dest / ".git" / "config").read_text() == "[core]"
