"""Review 9 (publishing): solutions the edition leaves in place stop the release and the
student site, an untracked notebook is not published, a folder another user can write in is
not a destination, an origin's token is never shown, the edition writes over no one's
notebooks, and a Colab badge of any file name is a link."""

import os
import shutil
import subprocess

import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, ROOT
from markdown_it import MarkdownIt

from course_lib import links, release, site
from course_lib.exercises.edition import EditionError, write_edition

COPIED = ("README.md", "pyproject.toml", "docs/release/README.md", "LICENSE", "environment.yml",
          "binder/postBuild", "benchmarks/notebook_times.py")  # fmt: skip


def _course(tmp_path, extra_cell=None, git=True):
    """A small course: the repository's release inputs, course_lib/__init__.py and 00_tour
    (the README's only notebook), with ``extra_cell`` (code) added; tracked by git when ``git``."""
    root = tmp_path / "course"
    for name in COPIED:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    readme = (root / "README.md").read_text().splitlines(keepends=True)
    rows = [line for line in readme if not line.startswith("| `0") or "00_tour" in line]
    (root / "README.md").write_text("".join(rows))  # the table lists 00_tour alone
    (root / "course_lib").mkdir()
    (root / "course_lib" / "__init__.py").write_text('"""course_lib."""\n')
    notebook = nbformat.read(NOTEBOOKS / "00_tour.ipynb", as_version=nbformat.NO_CONVERT)
    if extra_cell is not None:
        notebook.cells.insert(2, nbformat.v4.new_code_cell(extra_cell, id="extra"))
    (root / "notebooks").mkdir()
    nbformat.write(notebook, root / "notebooks" / "00_tour.ipynb")
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    return root


def test_the_small_course_releases(tmp_path):
    written = release.release(_course(tmp_path), tmp_path / "dest", None)
    assert "notebooks/00_tour.ipynb" in written and "course_lib/__init__.py" in written


@pytest.mark.parametrize("begin, end", [("# begin solution", "# end solution"),
                                        ("# BEGIN  SOLUTION", "# END  SOLUTION"),
                                        ("# Begin Solution", "# End Solution")])  # fmt: skip
def test_a_marker_the_edition_does_not_know_stops_the_release(tmp_path, begin, end):
    root = _course(tmp_path, f"def f(x):\n    {begin}\n    return 42 * x\n    {end}\n")
    with pytest.raises(release.ReleaseError, match="solution markers in notebooks/00_tour"):
        release.release(root, tmp_path / "dest", None)
    assert not (tmp_path / "dest").exists()


def test_the_student_site_refuses_a_solution_the_edition_left(tmp_path):
    solution = "def f(x):\n    #BEGIN SOLUTION\n    return 42 * x\n    #END SOLUTION\n"
    root = _course(tmp_path, solution, git=False)
    with pytest.raises(release.ReleaseError, match="solution markers in 00_tour.ipynb"):
        site.build(root, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_an_untracked_notebook_is_not_released(tmp_path):
    root = _course(tmp_path)
    shutil.copy(root / "notebooks" / "00_tour.ipynb", root / "notebooks" / "01_draft.ipynb")
    with pytest.raises(release.ReleaseError, match=r"notebooks/01_draft\.ipynb: not tracked"):
        release.release(root, tmp_path / "dest", None)
    assert not (tmp_path / "dest").exists()


def test_a_destination_anyone_may_write_in_is_refused(tmp_path):
    dest = tmp_path / "shared"
    dest.mkdir()
    dest.chmod(0o777)  # as another user's /tmp/release, or a folder left open
    with pytest.raises(release.ReleaseError, match="may be written by anyone"):
        release.release(_course(tmp_path), dest, None)
    assert not any(dest.iterdir())


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="no user ids")
def test_a_destination_of_another_user_is_refused(tmp_path, monkeypatch):
    dest = tmp_path / "theirs"
    dest.mkdir()
    uid = dest.stat().st_uid
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    with pytest.raises(release.ReleaseError, match="belongs to another user"):
        release.check_destination(ROOT, dest)


def test_an_origin_with_a_token_names_its_repository_and_hides_the_token(tmp_path):
    dest = tmp_path / "clone"
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    origin = "https://x-access-token:SECRET@github.com/teacher/fall.git"
    subprocess.run(["git", "-C", str(dest), "remote", "add", "origin", origin], check=True)
    assert release.origin_repository(dest) == links.Repository("teacher", "fall")


def _with_solutions(tmp_path):
    source = tmp_path / "notebooks"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(NOTEBOOKS / "05_strides.ipynb", source / "05_strides.ipynb")
    return source


def test_the_edition_is_not_written_over_the_instructor_notebooks(tmp_path):
    source = _with_solutions(tmp_path)
    before = (source / "05_strides.ipynb").read_bytes()
    with pytest.raises(EditionError, match="instructor notebooks"):
        write_edition(source, source)
    assert (source / "05_strides.ipynb").read_bytes() == before


def test_the_edition_removes_only_the_student_notebooks_it_wrote(tmp_path):
    source = _with_solutions(tmp_path)
    target = tmp_path / "student"
    shutil.copy(source / "05_strides.ipynb", source / "04_gone.ipynb")
    write_edition(source, target)  # 04_gone.ipynb: a student notebook, soon stale
    (source / "04_gone.ipynb").unlink()
    mine = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", id="a")])
    nbformat.write(mine, target / "thesis.ipynb")
    shutil.copy(NOTEBOOKS / "06_intensity_and_fusion.ipynb", target / "06_backup.ipynb")
    write_edition(source, target)
    assert sorted(p.name for p in target.glob("*.ipynb")) == [
        "05_strides.ipynb", "06_backup.ipynb", "thesis.ipynb"]  # fmt: skip


def test_a_colab_badge_is_a_link_whatever_the_file_is_called():
    badges = links.badges(links.Repository("me", "course"), "notebooks/my notebook.ipynb")
    tokens = MarkdownIt().parseInline(badges)[0].children
    targets = [t.attrGet("href") for t in tokens if t.type == "link_open"]
    assert len(targets) == 2 and targets[1].endswith("/notebooks/my%20notebook.ipynb"), badges


def test_the_edition_is_not_written_through_a_link_to_an_instructor_notebook(tmp_path):
    source = _with_solutions(tmp_path)
    before = (source / "05_strides.ipynb").read_bytes()
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "05_strides.ipynb").symlink_to(source / "05_strides.ipynb")
    with pytest.raises(EditionError, match="symbolic link"):
        write_edition(source, tmp_path / "student")
    assert (source / "05_strides.ipynb").read_bytes() == before
