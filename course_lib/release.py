"""The student release: the course as students get it, without a single solution.

::

    python -m course_lib.release DEST [--repository https://github.com/OWNER/REPO]   # make release

DEST receives what a student needs and none of the notebooks' solutions (the package's own
functions stay, as in the repository: the checks refuse an answer that calls them):

- ``notebooks/``: the student edition of every instructor notebook (made afresh, as
  ``make student`` makes ``student/``), its Binder and Colab badges and install cell pointing
  at the release's repository;
- ``course_lib/`` without the instructor tools (the edition generator, the grader, this),
  ``pyproject.toml`` (with the repository's URL), ``README.md`` for students (from
  ``docs/release/README.md``), ``binder/``, ``environment.yml``, ``LICENSE`` and
  ``benchmarks/notebook_times.py``, which measures the running time every notebook states.

The notebooks name no other file of the repository: ``tests/test_release.py`` checks that every
path they name is in the release.

The repository is ``--repository``, or else the ``origin`` of DEST when DEST is a git clone;
without either the notebooks carry their links only. Every file is scanned before anything is
written: a solution marker anywhere (``BEGIN SOLUTION`` in any case or spacing, ``# SOLUTION``,
nbgrader's ``BEGIN HIDDEN TESTS``; in a notebook's decoded strings too, full-width letters and
zero-width spaces folded) stops the release, as do a notebook git does not track and a file
reached through a symbolic link (the release would publish what it points to). DEST must lie
outside this repository, be the user's own folder that no other user may write in, and hold
nothing but an earlier release (every file listed in its ``.course-release`` manifest) and a
``.git`` folder: a rerun replaces the earlier release file by file, so the same sources give
the same tree. Refusals exit with status 2 and change nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from . import links
from .errors import CourseLibError
from .exercises import edition

MANIFEST = ".course-release"  # in DEST: the files the release wrote, what a rerun replaces
# Taken as they are (tracked files only). notebook_times.py is the script each notebook's
# "Running time" line names; it runs the release's notebooks/ as it runs the repository's.
COPIED = ("LICENSE", "environment.yml", "binder", "benchmarks/notebook_times.py")
PACKAGE = "course_lib"
INSTRUCTOR_TOOLS = (
    "course_lib/exercises/edition.py",
    "course_lib/exercises/grade.py",
    "course_lib/exercises/guard.py",
    "course_lib/release.py",
    "course_lib/site.py",
)
README_TEMPLATE = Path("docs/release/README.md")
# edition.py's markers, and the near misses it would leave in place (case, spacing)
SOLUTION = edition.LEFTOVER
_NOTEBOOK_ROW = re.compile(r"^\| `(?P<name>\d\d_\w+)\.ipynb` \|(?P<rest>.*)$")
_WITH, _END = "<!-- with a repository -->", "<!-- end -->"  # the README's parts about badges
_WITH_REPOSITORY = re.compile(re.escape(_WITH) + r"\n.*?" + re.escape(_END) + r"\n", re.S)
_SSH_ORIGIN = re.compile(r"^git@github\.com:(?P<path>[^/]+/[^/]+?)(?:\.git)?/?$")
_CREDENTIALS = re.compile(r"^https://[^/@]*@")  # https://user:token@github.com/...


class ReleaseError(CourseLibError, ValueError):
    """A release that cannot be written: a bad destination, a solution in the tree, ..."""


def release(root: Path, dest: Path, repository: links.Repository | None) -> list[str]:
    """Write the release of the repository ``root`` into ``dest``; the files, relative."""
    check_destination(root, dest)
    repository = repository or origin_repository(dest)
    found = {f"notebooks/{path.name}" for path in (root / "notebooks").glob("*.ipynb")}
    untracked = sorted(found - set(_tracked(root, "notebooks")))
    if untracked:
        raise ReleaseError(f"{', '.join(untracked)}: not tracked by git; commit it or move it "
                           "out of notebooks/ (nothing written)")  # fmt: skip
    files = release_files(root, repository)
    refuse_solutions({path: _text(data) for path, (data, _) in files.items()})
    _write(dest, files)
    return sorted(files)


def refuse_solutions(texts: dict[str, str]) -> None:
    """Refuse ``{path: text}`` when any text holds a solution marker."""
    leaks = sorted(path for path, text in texts.items() if edition.holds_marker(text))
    if leaks:
        raise ReleaseError(f"solution markers in {', '.join(leaks)}: nothing written")


# ---------------------------------------------------------------- what the release holds


def release_files(root: Path, repository: links.Repository | None) -> dict[str, tuple]:
    """Every file of the release: ``{relative path: (bytes, mode)}``."""
    files = {}
    for path in _tracked(root, PACKAGE, *COPIED):
        if path not in INSTRUCTOR_TOOLS:
            source = root / path
            if source.resolve() != root.resolve() / path:  # what it points to, published
                raise ReleaseError(f"{path} is reached through a symbolic link: commit the "
                                   "file itself")  # fmt: skip
            executable = source.stat().st_mode & stat.S_IXUSR  # as git: not who runs this
            files[path] = (source.read_bytes(), 0o755 if executable else 0o644)
    pyproject = (root / "pyproject.toml").read_text("utf-8")
    if repository is not None:
        pyproject = links.with_repository(pyproject, repository)
    files["pyproject.toml"] = (pyproject.encode(), 0o644)
    for name, text in student_notebooks(root, repository).items():
        files[f"notebooks/{name}"] = (text.encode(), 0o644)
    files["README.md"] = (student_readme(root, repository).encode(), 0o644)
    return files


def student_notebooks(root: Path, repository: links.Repository | None) -> dict[str, str]:
    """The student edition of ``root/notebooks``, linked as the release's ``notebooks/``."""
    students = {
        path.name: edition.student_notebook(links.read_notebook(path, root), path.name)
        for path in sorted((root / "notebooks").glob("*.ipynb"))
    }
    if not students:
        raise ReleaseError(f"{root / 'notebooks'} holds no notebooks: run from the repository")
    links.link_notebooks(students, repository, links.FOLDERS[0])
    return {name: links.notebook_text(notebook) for name, notebook in students.items()}


def student_readme(root: Path, repository: links.Repository | None) -> str:
    """``docs/release/README.md`` with the README's table of notebooks, and the badges (or,
    without a repository, without its parts about them)."""
    rows = ["| notebook | what it teaches |", "|---|---|"]
    for line in (root / "README.md").read_text("utf-8").splitlines():
        row = _NOTEBOOK_ROW.match(line)
        if row:
            name = row["name"]
            rows.append(f"| [{name}](notebooks/{name}.ipynb) |{row['rest']}")
    text = (root / README_TEMPLATE).read_text("utf-8").replace("{{NOTEBOOKS}}", "\n".join(rows))
    if repository is None:  # no badges to show: the parts about them go
        return re.sub(r"\n{3,}", "\n\n", _WITH_REPOSITORY.sub("", text))
    text = text.replace("{{BADGES}}", links.badges(repository, "notebooks/00_tour.ipynb"))
    return text.replace(_WITH + "\n", "").replace(_END + "\n", "")


def origin_repository(dest: Path) -> links.Repository | None:
    """The GitHub repository of ``dest``'s git ``origin`` (None when it has none)."""
    if not (dest / ".git").exists():
        return None
    found = subprocess.run(["git", "-C", str(dest), "remote", "get-url", "origin"],
                           capture_output=True, text=True, check=False)  # fmt: skip
    if found.returncode != 0:
        return None
    url = _CREDENTIALS.sub("https://", found.stdout.strip())  # never shown, nor needed
    ssh = _SSH_ORIGIN.match(url)
    try:
        return links.Repository.parse(f"https://github.com/{ssh['path']}" if ssh else url)
    except links.LinkError as error:
        raise ReleaseError(f"{dest}'s origin {url!r}: {error}; pass --repository") from None


def _tracked(root: Path, *paths: str) -> list[str]:
    """The files git tracks under ``paths`` (what a clone of the repository has)."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", *paths],
                            capture_output=True, text=True, check=False)  # fmt: skip
    if listed.returncode != 0:
        raise ReleaseError(f"{root} is not a git checkout: run from the instructor repository")
    return [path for path in listed.stdout.split("\0") if path and (root / path).is_file()]


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- the destination


def check_destination(root: Path, dest: Path) -> None:
    """Refuse a destination inside the repository, a file, a symbolic link, a folder of another
    user's or one anyone may write in, or a folder holding anything but an earlier release and
    ``.git``."""
    if dest.is_symlink():
        raise ReleaseError(f"{dest} is a symbolic link: give the folder itself")
    where = dest.resolve()
    if where.is_relative_to(root.resolve()):
        raise ReleaseError(f"{dest} is inside the repository {root.resolve()}: choose a folder "
                           "outside it (the release is published on its own)")  # fmt: skip
    if where.exists() and not where.is_dir():
        raise ReleaseError(f"{dest} is a file, not a folder")
    if not where.exists():
        return
    _check_owner(dest, where)
    if (where / MANIFEST).is_symlink():
        raise ReleaseError(f"{dest / MANIFEST} is a symbolic link: remove the folder")
    listed = _manifest(where)
    linked = [path for path in listed if _linked_folder(where, path)]
    if linked:
        raise ReleaseError(f"{dest} reaches {linked[0]} through a symbolic link to a folder: "
                           "remove the link (the release writes only inside DEST)")  # fmt: skip
    unrelated = _unlisted(where, set(listed))
    if unrelated:
        shown = ", ".join(unrelated[:5]) + (", ..." if len(unrelated) > 5 else "")
        raise ReleaseError(f"{dest} holds files that are not an earlier release ({shown}): "
                           "choose an empty folder or an earlier release")  # fmt: skip


def _unlisted(dest: Path, listed: set[str]) -> list[str]:
    """The files and links under ``dest`` (but ``.git`` and the manifest) that ``listed``
    lacks: a rerun would leave them in the release (a notebook copied into ``notebooks/``)."""
    found = []
    for folder, folders, names in os.walk(dest):
        here = Path(folder).relative_to(dest)
        if here == Path("."):
            folders[:] = [name for name in folders if name != ".git"]
            names = [name for name in names if name not in (".git", MANIFEST)]
        linked = [name for name in folders if (Path(folder) / name).is_symlink()]
        found += [(here / name).as_posix() for name in names + linked]
    return sorted(path for path in found if path not in listed)


def _check_owner(dest: Path, where: Path) -> None:
    """Refuse a folder another user owns or anyone may write in: while the release is written,
    they could swap a folder of it for a link to the user's files."""
    info = where.stat()
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise ReleaseError(f"{dest} belongs to another user: choose a folder of your own")
    if info.st_mode & stat.S_IWOTH:
        raise ReleaseError(f"{dest} may be written by anyone: choose a folder of your own")


def _manifest(dest: Path) -> list[str]:
    path = dest / MANIFEST
    if not path.is_file():
        return []
    try:
        files = json.loads(path.read_text("utf-8"))["files"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseError(f"{path} is not a release manifest: remove the folder") from None
    if not all(isinstance(f, str) and _inside(f) for f in files):
        raise ReleaseError(f"{path} lists paths outside the release: remove the folder")
    return files


def _inside(path: str) -> bool:
    """Whether a manifest's ``path`` names a file of the release: relative, no ``..``, and
    neither in ``.git`` nor the manifest itself."""
    parts = path.split("/")
    return (bool(path) and not path.startswith("/") and "" not in parts and ".." not in parts
            and parts[0] not in (".git", MANIFEST))  # fmt: skip


def _linked_folder(dest: Path, path: str) -> bool:
    """Whether a folder on the way from ``dest`` to ``path`` is a symbolic link."""
    folder = dest
    for part in path.split("/")[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return True
    return False


def _write(dest: Path, files: dict[str, tuple]) -> None:
    """Replace the earlier release in ``dest`` by ``files``, without following links."""
    dest.mkdir(parents=True, exist_ok=True)
    linked = [path for path in files if _linked_folder(dest, path)]
    if linked:
        raise ReleaseError(f"{dest} reaches {linked[0]} through a symbolic link to a folder: "
                           "remove the link (the release writes only inside DEST)")  # fmt: skip
    for old in set(_manifest(dest)) - set(files):
        target = dest / old
        if target.is_symlink() or target.is_file():
            target.unlink()
        _remove_empty_parents(target.parent, dest)
    for path, (data, mode) in sorted(files.items()):
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        target.chmod(mode)
    manifest = json.dumps({"files": sorted(files)}, indent=1) + "\n"
    (dest / MANIFEST).write_text(manifest, encoding="utf-8")


def _remove_empty_parents(folder: Path, dest: Path) -> None:
    while folder != dest and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="the folder to write (outside the repository)")
    parser.add_argument("--repository", metavar="URL", help="https://github.com/OWNER/REPO")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    args = parser.parse_args(argv)
    try:
        given = args.repository is not None
        repository = links.Repository.parse(args.repository) if given else None
        written = release(args.root, args.dest, repository)
    except (ReleaseError, links.LinkError, edition.EditionError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote the student release ({len(written)} files) to {args.dest}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
