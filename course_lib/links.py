"""The notebooks' previous/next links, their Binder and Colab badges, and the install cell.

::

    python -m course_lib.links                      # regenerate the cells (what `make links` runs)
    python -m course_lib.links --repository https://github.com/ME/my-course [--ref main]
    python -m course_lib.links --check              # exit 1 when a notebook is out of date

Three cells of every notebook in ``notebooks/`` and ``student/`` are generated, each recognised
by a tag in its metadata; every other cell, output and the notebook's metadata stay as they are:

- ``nav-top``, the first cell: the notebook's title (its ``# `` line is kept), the Binder and
  Colab badges, and links to the previous notebook, the course index and the next notebook;
- ``install``, just before the first other code cell: on Colab, or in a kernel where
  ``course_lib`` is missing, it installs course_lib from the repository with pip; anywhere else
  it does nothing and prints nothing;
- ``nav-bottom``, the last cell: the same links again.

The repository is ONE URL, ``Repository`` under ``[project.urls]`` in ``pyproject.toml``: a
GitHub repository ``https://github.com/OWNER/REPO``, ending in ``/tree/REF`` when the badges
should open a branch or tag other than ``main``. Without it only the links are written: the
badges and the install cell need a repository to open and to install from. A fork runs the
command once with ``--repository``: it stores the URL and rewrites the cells.

The links show each neighbour's title as written (what would start Markdown or HTML in it
is escaped). Nothing is written unless every notebook can be: a file that is not a valid
nbformat 4 notebook, a notebook that is a symbolic link, one outside the repository (in a
folder that is a link), or one where two cells carry a generated cell's tag (a copy would be
deleted with it) stops the command with exit status 2 and a message naming it, as does
``--repository ''`` (leave the option out to keep the stored URL).

A notebook from before these cells (a first markdown cell ``# title``, ending in a
``Previous: ... Next: ...`` paragraph) is converted: its ``# `` line moves into ``nav-top``,
the old links go, the rest of the cell stays.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .errors import CourseLibError

TOP, INSTALL, BOTTOM = "nav-top", "install", "nav-bottom"  # the tags, also the cells' ids
FOLDERS = ("notebooks", "student")  # the instructor notebooks, and the student edition
INDEX = "../README.md"  # the course index: the README's table of notebooks
URL_KEY = "Repository"  # the key under [project.urls]
DEFAULT_REF = "main"
SET_IT = "python -m course_lib.links --repository https://github.com/OWNER/REPO"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"

INSTALL_SOURCE = """\
# On Colab, or in a fresh kernel without course_lib: install course_lib from the repository.
import importlib.util, subprocess, sys

if "google.colab" in sys.modules or importlib.util.find_spec("course_lib") is None:
    source = "{source}"
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", source])"""

_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})\Z")  # GitHub's user/organisation names
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}\Z")
_REF = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?\Z")  # a branch or tag, no "/"
_LEGACY_LINKS = re.compile(r"\n\s*\n(?:Previous|Next): [^\n]*(?:\n(?!\s*\n)[^\n]*)*\s*\Z")
_BACKTICKS = re.compile(r"`+")
_MARKUP = re.compile(r"[\\`*_\[\]<>&~$]")  # what starts markup inside a line: links, HTML, math...


class LinkError(CourseLibError, ValueError):
    """A repository URL the badges cannot use, or a notebook without a title to link to."""


@dataclass(frozen=True)
class Repository:
    """A GitHub repository and the branch or tag the badges open and pip installs."""

    owner: str
    name: str
    ref: str = DEFAULT_REF

    @classmethod
    def parse(cls, url: str, ref: str | None = None) -> Repository:
        """``https://github.com/OWNER/REPO`` (``.git``, a final ``/`` or ``/tree/REF`` allowed).

        ``ref`` overrides the default branch ``main``; it must agree with a ``/tree/REF``.
        """
        prefix = "https://github.com/"
        shape = "expected https://github.com/OWNER/REPO, optionally ending in /tree/REF"
        if not isinstance(url, str) or not url.strip():
            raise LinkError(f"no repository URL given; {shape}")
        url = url.strip()
        if url[: len(prefix)].lower() != prefix:  # the scheme and the host ignore case
            raise LinkError(
                f"{url!r} is not a GitHub https URL: Binder's gh/ and Colab's github/ links "
                f"open GitHub repositories only; {shape}"
            )
        if any(c in url for c in "?#"):
            raise LinkError(f"{url!r} has a query or a fragment; {shape}")
        parts = url[len(prefix) :].rstrip("/").split("/")
        if len(parts) >= 4 and parts[2] == "tree":
            parts, url_ref = parts[:2], "/".join(parts[3:])
        else:
            url_ref = None
        if len(parts) != 2:
            raise LinkError(f"{url!r} does not name one repository; {shape}")
        if ref is not None and url_ref is not None and ref != url_ref:
            raise LinkError(f"the URL names ref {url_ref!r} but --ref says {ref!r}; give one")
        owner, name = parts[0], parts[1].removesuffix(".git")
        return cls(owner, name, ref if ref is not None else url_ref or DEFAULT_REF)

    def __post_init__(self):
        checks = [
            ("owner", self.owner, _OWNER, "letters, digits and '-'"),
            ("repository name", self.name, _NAME, "letters, digits, '.', '_' and '-'"),
            ("ref", self.ref, _REF, "a branch or tag name without '/'"),
        ]
        for what, value, pattern, allowed in checks:
            if not pattern.match(value) or value in (".", "..") or ".." in value:
                raise LinkError(f"{what} {value!r} is not valid on GitHub: use {allowed}")

    @property
    def url(self) -> str:
        """The URL ``pyproject.toml`` stores (``/tree/REF`` only for a ref other than main)."""
        base = f"https://github.com/{self.owner}/{self.name}"
        return base if self.ref == DEFAULT_REF else f"{base}/tree/{self.ref}"

    @property
    def pip_source(self) -> str:
        """What ``pip install`` is given: ``git+https://github.com/OWNER/REPO@REF``."""
        return f"git+https://github.com/{self.owner}/{self.name}@{self.ref}"

    def binder(self, path: str) -> str:
        """JupyterLab on mybinder.org, opened at ``path`` (e.g. ``notebooks/00_tour.ipynb``)."""
        repo = f"{self.owner}/{self.name}/{self.ref}"
        return f"https://mybinder.org/v2/gh/{repo}?labpath={quote(path, safe='')}"

    def colab(self, path: str) -> str:
        """The notebook at ``path`` opened in Google Colab."""
        repo = f"{self.owner}/{self.name}/blob/{self.ref}"
        return f"https://colab.research.google.com/github/{repo}/{quote(path)}"


# ---------------------------------------------------------------- pyproject.toml


def configured_repository(pyproject: Path) -> Repository | None:
    """The repository of ``[project.urls] Repository``, or None when there is none."""
    if not pyproject.is_file():
        raise LinkError(f"{pyproject} is missing: it holds the repository URL the links use")
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except tomllib.TOMLDecodeError as error:
        raise LinkError(f"{pyproject} is not valid TOML: {error}") from None
    url = project.get("urls", {}).get(URL_KEY)
    if url is None:
        return None
    try:
        return Repository.parse(url)
    except LinkError as error:
        raise LinkError(f"{pyproject}, [project.urls] {URL_KEY}: {error}") from None


def with_repository(text: str, repository: Repository) -> str:
    """The text of a ``pyproject.toml`` with ``Repository = "URL"`` under ``[project.urls]``.

    Only that line changes (or, with the table, two lines and a blank one are added after the
    ``[project]`` table); the result is read back to make sure it says what was meant.
    """
    lines = text.splitlines(keepends=True)
    line = f'{URL_KEY} = "{repository.url}"\n'
    if "[project.urls]" in (s.strip() for s in lines):
        start = [s.strip() for s in lines].index("[project.urls]") + 1
        end = _table_end(lines, start)
        keys = [i for i in range(start, end) if re.match(rf'\s*"?{URL_KEY}"?\s*=', lines[i])]
        if keys:
            lines[keys[0]] = line
        else:
            lines.insert(_last_filled(lines, start, end), line)
    else:
        if "[project]" not in (s.strip() for s in lines):
            raise LinkError("pyproject.toml has no [project] table to add [project.urls] to")
        start = [s.strip() for s in lines].index("[project]") + 1
        at = _last_filled(lines, start, _table_end(lines, start))
        lines[at:at] = ["\n", "[project.urls]\n", line]
    new = "".join(lines)
    try:
        stored = tomllib.loads(new)["project"]["urls"][URL_KEY]
    except (tomllib.TOMLDecodeError, KeyError) as error:
        problem = f"could not add {URL_KEY} to pyproject.toml ({error}); add it by hand"
        raise LinkError(problem) from error
    if stored != repository.url:
        raise LinkError(f"pyproject.toml would say {stored!r}, not {repository.url!r}")
    return new


def _table_end(lines: list[str], start: int) -> int:
    """The index of the next table header at or after ``start`` (or the end)."""
    return next((i for i in range(start, len(lines)) if lines[i].startswith("[")), len(lines))


def _last_filled(lines: list[str], start: int, end: int) -> int:
    """The index just after the last non-blank line of ``lines[start:end]`` (that line gets
    its missing final newline, so a line can be inserted after it)."""
    filled = [i for i in range(start, end) if lines[i].strip()]
    if filled and not lines[filled[-1]].endswith("\n"):
        lines[filled[-1]] += "\n"
    return filled[-1] + 1 if filled else start


# ---------------------------------------------------------------- the cells


@dataclass(frozen=True)
class Page:
    """A notebook as its neighbours link to it: file name and title."""

    name: str
    title: str


def has_tag(cell, tag: str) -> bool:
    """Whether ``cell`` carries ``tag`` in its metadata."""
    return tag in cell.get("metadata", {}).get("tags", [])


def title_of(notebook, name: str = "notebook") -> str:
    """The notebook's title: the ``# `` line of its ``nav-top`` cell, or of its first cell."""
    top = [c for c in notebook.cells if has_tag(c, TOP)]
    cell = top[0] if top else (notebook.cells[0] if notebook.cells else None)
    first = cell.source.split("\n", 1)[0] if cell and cell.cell_type == "markdown" else ""
    if not first.startswith("# ") or not first[2:].strip():  # an empty title: an empty link
        raise LinkError(
            f"{name}: no title; the first cell (or the one tagged {TOP!r}) must be a markdown "
            f"cell whose first line is '# <title>', found {first[:60]!r}"
        )
    return first[2:].strip()


def nav_line(previous: Page | None, following: Page | None) -> str:
    """``Previous: [..](..) · [All notebooks](../README.md) · Next: [..](..)``."""
    items = [f"Previous: {_link(previous)}"] if previous else []
    items.append(f"[All notebooks]({INDEX})")
    items += [f"Next: {_link(following)}"] if following else []
    return " · ".join(items)


def _link(page: Page) -> str:
    """A Markdown link to ``page``: its title as text, its file name as the target."""
    return f"[{link_text(page.title)}]({quote(page.name)})"


def link_text(title: str) -> str:
    """``title`` as a Markdown link's text that shows it as written: every character that
    would start markup (``[``, ``<``, ``*``, ``$``, ...) is escaped, so a title such as
    ``[x](javascript:...)`` is text, not a link; a code span that opens and closes within
    the title stays one (notebook 00's title ends in one)."""
    parts, at = [], 0
    for start, end in _code_spans(title):
        parts += [_escaped(title[at:start]), title[start:end]]
        at = end
    return "".join(parts) + _escaped(title[at:])


def _escaped(text: str) -> str:
    return _MARKUP.sub(r"\\\g<0>", text)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the code spans of ``text`` as CommonMark reads them: a run of
    backticks up to the next run of the same length; a run without one is plain text."""
    runs, spans, i = list(_BACKTICKS.finditer(text)), [], 0
    while i < len(runs):
        length = len(runs[i].group())
        close = next((j for j in range(i + 1, len(runs)) if len(runs[j].group()) == length), None)
        if close is not None:
            spans.append((runs[i].start(), runs[close].end()))
        i = i + 1 if close is None else close + 1
    return spans


def badges(repository: Repository, path: str) -> str:
    """The Binder and Colab badges of the notebook at ``path`` in the repository."""
    binder = f"[![Open in Binder]({BINDER_BADGE})]({repository.binder(path)})"
    colab = f"[![Open In Colab]({COLAB_BADGE})]({repository.colab(path)})"
    return f"{binder} {colab}"


def install_source(repository: Repository) -> str:
    """The install cell's code for ``repository``."""
    return INSTALL_SOURCE.format(source=repository.pip_source)


def link_notebooks(notebooks: dict, repository: Repository | None, folder: str) -> None:
    """Give every notebook of ``notebooks`` (file name -> nbformat node, in course order) its
    generated cells, in place; ``folder`` is where they sit in the repository."""
    for name, notebook in notebooks.items():
        _check_tags(notebook, name)
    pages = [Page(name, title_of(nb, name)) for name, nb in notebooks.items()]
    install = install_source(repository) if repository is not None else None
    for i, page in enumerate(pages):
        previous = pages[i - 1] if i > 0 else None
        following = pages[i + 1] if i + 1 < len(pages) else None
        notebook = notebooks[page.name]
        top = [f"# {page.title}"]
        if repository is not None:
            top.append(badges(repository, f"{folder}/{page.name}"))
        top.append(nav_line(previous, following))
        _set_cells(notebook, "\n\n".join(top), install, f"---\n\n{nav_line(previous, following)}")


def _check_tags(notebook, name: str) -> None:
    """Refuse a notebook where two cells carry one generated tag (a cell copied with its
    tags): the copy would be deleted with the generated cell."""
    for tag in (TOP, INSTALL, BOTTOM):
        tagged = [i for i, c in enumerate(notebook.cells) if has_tag(c, tag)]
        if len(tagged) > 1:
            raise LinkError(
                f"{name}: cells {tagged} are all tagged {tag!r}, the tag of one generated cell; "
                "remove the tag from the copies (a cell copied in Jupyter keeps its tags)"
            )


def _set_cells(notebook, top: str, install: str | None, bottom: str) -> None:
    """Replace the generated cells of ``notebook``; a cell whose source is unchanged is kept
    as it is (outputs, execution count and other metadata included)."""
    old = {tag: _pop_tagged(notebook, tag) for tag in (TOP, INSTALL, BOTTOM)}
    if old[TOP] is None:
        _convert_title_cell(notebook)
    cells, ids = notebook.cells, (notebook.nbformat, notebook.get("nbformat_minor", 0)) >= (4, 5)
    cells.insert(0, _cell(old[TOP], "markdown", top, TOP, ids))
    if install is not None:
        first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
        cells.insert(first_code, _cell(old[INSTALL], "code", install, INSTALL, ids))
    cells.append(_cell(old[BOTTOM], "markdown", bottom, BOTTOM, ids))


def _pop_tagged(notebook, tag: str):
    """Remove the cells tagged ``tag``; return the first of them (or None)."""
    tagged = [c for c in notebook.cells if has_tag(c, tag)]
    notebook.cells = [c for c in notebook.cells if not has_tag(c, tag)]
    return tagged[0] if tagged else None


def _convert_title_cell(notebook) -> None:
    """A notebook without generated cells: drop the first cell's ``# `` line and its trailing
    ``Previous:/Next:`` paragraph (the new cells hold both); drop the cell if nothing is left."""
    first = notebook.cells[0]
    body = first.source.split("\n", 1)[1] if "\n" in first.source else ""
    body = _LEGACY_LINKS.sub("", "\n\n" + body.strip("\n")).strip("\n")
    if body:
        first.source = body
    else:
        del notebook.cells[0]


def _cell(old, kind: str, source: str, tag: str, ids: bool = True):
    """The generated cell: ``old`` when it already says ``source``, else a new cell (with an
    id only when ``ids``: nbformat 4.5 added cell ids, an older notebook with one is invalid)."""
    import nbformat  # noqa: PLC0415  (an instructor tool: the lab extra brings nbformat)

    if old is not None and old.cell_type == kind and old.source == source:
        return old
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    cell = make(source, id=old.get("id", tag) if old else tag, metadata={"tags": [tag]})
    if not ids:
        del cell["id"]
    return cell


# ---------------------------------------------------------------- files


def notebook_text(notebook) -> str:
    """The bytes ``nbformat.write`` stores, as text."""
    import nbformat  # noqa: PLC0415

    text = nbformat.writes(notebook)
    return text if text.endswith("\n") else text + "\n"


def linked_texts(root: Path, repository: Repository | None) -> dict[Path, str]:
    """What every notebook of ``root/notebooks`` and ``root/student`` should contain."""
    texts = {}
    for folder in FOLDERS:
        paths = sorted((root / folder).glob("*.ipynb"))
        notebooks = {p.name: read_notebook(p, root) for p in paths}
        link_notebooks(notebooks, repository, folder)
        texts.update({p: notebook_text(notebooks[p.name]) for p in paths})
    return texts


def read_notebook(path: Path, root: Path):
    """The notebook at ``path``, a file of the repository ``root`` that nbformat reads and
    validates; anything else is a :class:`LinkError` naming the file, before any is written."""
    import nbformat  # noqa: PLC0415

    _check_rewritable(path, root)
    invalid: dict = {}
    unreadable = (OSError, ValueError, AttributeError, KeyError, TypeError)  # what reading
    try:  # a file that is no notebook (or no JSON, or no text) raises
        notebook = nbformat.read(path, nbformat.NO_CONVERT, capture_validation_error=invalid)
    except (*unreadable, nbformat.ValidationError) as error:
        raise LinkError(f"{path} is not a notebook nbformat can read: {error}") from None
    if invalid:
        problem = getattr(invalid["ValidationError"], "message", invalid["ValidationError"])
        raise LinkError(f"{path} is not a valid notebook: {problem}")
    if notebook.nbformat != 4:
        raise LinkError(
            f"{path} is an nbformat {notebook.nbformat} notebook; the cells are written in "
            "nbformat 4: open it in Jupyter and save it, which converts it"
        )
    return notebook


def _check_rewritable(path: Path, root: Path) -> None:
    """Refuse a notebook that is a symbolic link, or that is outside ``root`` (in a folder
    that is a link): rewriting it would change a file elsewhere."""
    if path.is_symlink():
        raise LinkError(
            f"{path} is a symbolic link to {path.resolve()}; the notebooks are rewritten in "
            "place, which would change that file: replace the link with a copy of the notebook"
        )
    if not path.resolve().is_relative_to(root.resolve()):
        raise LinkError(
            f"{path} is {path.resolve()}, outside the repository {root.resolve()}; the "
            "notebooks are rewritten in place: make the folder a folder of the repository"
        )


def stale(texts: dict[Path, str]) -> list[Path]:
    """The notebooks whose file differs from what they should contain."""
    return [path for path, text in texts.items() if path.read_text(encoding="utf-8") != text]


def _run(root: Path, repository: Repository | None) -> int:
    """Regenerate the cells (with ``repository``: store it in pyproject.toml first)."""
    pyproject, configure = _pyproject(root), repository is not None
    repository = repository or configured_repository(pyproject)
    if repository is None:
        print(
            f"pyproject.toml has no {URL_KEY} under [project.urls]: writing the previous/next "
            "links only. The Binder and Colab badges and the install cell need a repository "
            f"to open and install from; a fork sets it with\n    {SET_IT}"
        )
    texts = linked_texts(root, repository)  # every notebook was readable: now write
    if configure:
        pyproject.write_text(with_repository(pyproject.read_text("utf-8"), repository), "utf-8")
        print(f"pyproject.toml: [project.urls] {URL_KEY} = {repository.url!r}")
    out_of_date = stale(texts)
    for path in out_of_date:
        path.write_text(texts[path], encoding="utf-8")
    where = ", ".join(f"{f}/" for f in FOLDERS if (root / f).is_dir())
    print(f"rewrote {len(out_of_date)} of {len(texts)} notebooks in {where}")
    return 0


def _check(root: Path) -> int:
    """1 (and the notebooks named) when a notebook differs from what it should contain."""
    out_of_date = stale(linked_texts(root, configured_repository(_pyproject(root))))
    for path in out_of_date:
        print(f"out of date: {path.relative_to(root)}", file=sys.stderr)
    if out_of_date:
        print("regenerate them with `python -m course_lib.links` (make links)", file=sys.stderr)
    return 1 if out_of_date else 0


def _pyproject(root: Path) -> Path:
    if not (root / FOLDERS[0]).is_dir() or not (root / "pyproject.toml").is_file():
        raise LinkError(f"{root.resolve()} has no pyproject.toml and notebooks/: run from the root")
    return root / "pyproject.toml"


def _given_repository(url: str | None, ref: str | None) -> Repository | None:
    """The repository of ``--repository`` (None without the option; an empty URL is refused:
    the option is left out to keep the stored one)."""
    if ref is not None and url is None:
        raise LinkError("--ref goes with --repository: give the repository URL too")
    if url is not None and not url.strip():
        raise LinkError(
            f"--repository {url!r} names no repository: give https://github.com/OWNER/REPO, or "
            f"leave the option out to keep the one in pyproject.toml ([project.urls] {URL_KEY}; "
            "without one, only the previous/next links are written)"
        )
    return None if url is None else Repository.parse(url, ref)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--repository", metavar="URL", help="a fork's https://github.com/OWNER/REPO")
    mode.add_argument("--check", action="store_true", help="exit 1 if a notebook is out of date")
    parser.add_argument("--ref", help=f"the branch or tag to open and install ({DEFAULT_REF})")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    args = parser.parse_args(argv)
    try:
        repository = _given_repository(args.repository, args.ref)
        return _check(args.root) if args.check else _run(args.root, repository)
    except LinkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
