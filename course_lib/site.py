"""The course site: every notebook a web page with its stored outputs, built offline.

::

    python -m course_lib.site OUT [--edition student|instructor] [--repository URL]  # make site

The pages are the student edition as the release holds it (``course_lib.release``, and like
the release refused when a solution marker is left in it), or the instructor notebooks with
``--edition instructor``, and the index is the release's README.
Sphinx with MyST-NB renders them without running anything, with the math typeset by a copy of
MathJax 3 served by the site itself (no CDN; SVG output, so no web fonts), the
``StepThrough`` players working at the page's full width without a kernel, and links going
page to page (a link into a notebook's section keeps JupyterLab's anchors). The build fails
on any Sphinx warning, and before it starts on a notebook with an error output; OUT is written
only when the build succeeded, and must be a new or empty folder or an earlier site (its
``.course-site`` marker).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from . import links, release
from .errors import CourseLibError
from .exercises.edition import EditionError

MARKER = ".course-site"  # in OUT: this folder holds a site the command built
EDITIONS = ("student", "instructor")
CONF = r'''
project = "ML systems, one notebook at a time"
extensions = ["myst_nb"]
root_doc = "README"
exclude_patterns = ["_build"]
nb_execution_mode = "off"  # the stored outputs, as the notebooks hold them
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 6
myst_heading_slug_func = "course_lib.site.jupyter_anchor"
html_theme = "alabaster"
html_theme_options = {"page_width": "min(1400px, 96vw)", "body_max_width": "none"}
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_title = project
mathjax_path = "mathjax/tex-svg.js"  # MathJax 3, math drawn as SVG: no web fonts to fetch
nb_ipywidgets_js = {}  # widgets would load require.js and their manager from a CDN
'''
CSS = """\
/* the players and tables use the page's width; wide outputs scroll instead of overflowing */
div.cell_output .output { overflow-x: auto; }
div.cell_output .cl-player, div.cell_output .cl-player svg { max-width: 100%; }
"""
INSTRUCTOR_NOTE = "> **Instructor edition**: the notebooks below include the solutions.\n\n"


class SiteError(CourseLibError, ValueError):
    """A site that cannot be built: a notebook with an error output, a warning, a bad OUT."""


def jupyter_anchor(heading: str) -> str:
    """A heading's anchor as JupyterLab writes it (code marks dropped, spaces as '-'): the
    notebooks' links into each other's sections work in JupyterLab and on the site alike."""
    return heading.replace("`", "").strip().replace(" ", "-")


def build(root: Path, out: Path, edition: str = "student",
          repository: links.Repository | None = None) -> int:  # fmt: skip
    """Build the site of the repository ``root`` into ``out``; the number of pages."""
    _check_out(root, out)
    notebooks, readme = _sources(root, edition, repository)
    failed = [f"{name}, cell {i}" for name, text in notebooks.items() for i in _errors(text)]
    if failed:
        raise SiteError(f"error outputs in {'; '.join(failed)}: run the notebooks again first")
    with tempfile.TemporaryDirectory(prefix="course-site-") as work:
        stage, html = Path(work) / "source", Path(work) / "html"
        _stage(stage, notebooks, readme)
        _sphinx(root, stage, html)
        _replace(out, html)
    return len(notebooks) + 1


def _sources(root: Path, edition: str, repository) -> tuple[dict[str, str], str]:
    """The notebooks' texts by file name, and the index page's Markdown."""
    if edition not in EDITIONS:
        raise SiteError(f"edition {edition!r}: choose one of {', '.join(EDITIONS)}")
    repository = repository or links.configured_repository(root / "pyproject.toml")
    readme = release.student_readme(root, repository)
    if edition == "student":
        notebooks = release.student_notebooks(root, repository)
        release.refuse_solutions({**notebooks, "README.md": readme})
        return notebooks, readme
    paths = sorted((root / "notebooks").glob("*.ipynb"))
    notebooks = {p.name: links.notebook_text(links.read_notebook(p, root)) for p in paths}
    title, _, rest = readme.partition("\n\n")
    return notebooks, f"{title}\n\n{INSTRUCTOR_NOTE}{rest}"


def _errors(text: str) -> list[int]:
    """The numbers of the cells of a notebook (as text) that hold an error output."""
    import nbformat  # noqa: PLC0415  (an instructor tool: the lab extra brings nbformat)

    cells = nbformat.reads(text, as_version=nbformat.NO_CONVERT).cells
    return [i for i, cell in enumerate(cells)
            if any(o.get("output_type") == "error" for o in cell.get("outputs", []))]  # fmt: skip


def _stage(stage: Path, notebooks: dict[str, str], readme: str) -> None:
    """The Sphinx project: the notebooks, the index with its (hidden) table of contents,
    conf.py, the stylesheet and MathJax."""
    (stage / "notebooks").mkdir(parents=True)
    for name, text in notebooks.items():
        (stage / "notebooks" / name).write_text(_alt_for_mystnb(text), encoding="utf-8")
    pages = "\n".join(f"notebooks/{Path(name).stem}" for name in notebooks)
    toc = f"\n```{{toctree}}\n:hidden:\n\n{pages}\n```\n"
    (stage / "README.md").write_text(readme + toc, encoding="utf-8")
    (stage / "conf.py").write_text(CONF, encoding="utf-8")
    static = stage / "_static"
    shutil.copytree(_mathjax(), static / "mathjax")
    (static / "course.css").write_text(CSS, encoding="utf-8")


def _alt_for_mystnb(text: str) -> str:
    """The notebook with each picture's alt text (kept in its output's metadata, where
    nbconvert reads it) also where MyST-NB reads it: the cell's ``mystnb.image.alt``."""
    import nbformat  # noqa: PLC0415

    notebook = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
    for cell in notebook.cells:
        alts = [meta["alt"] for output in cell.get("outputs", [])
                for meta in output.get("metadata", {}).values()
                if isinstance(meta, dict) and meta.get("alt")]  # fmt: skip
        if alts:
            cell.metadata.setdefault("mystnb", {})["image"] = {"alt": " / ".join(alts)}
    return links.notebook_text(notebook)


def _mathjax() -> Path:
    """MathJax 3, as the ``sphinx-mathjax-offline`` package ships it (the site serves it)."""
    try:
        found = metadata.distribution("sphinx-mathjax-offline")
    except metadata.PackageNotFoundError:
        raise SiteError("sphinx-mathjax-offline is missing: pip install -e '.[site]'") from None
    return Path(found.locate_file("sphinx-mathjax-offline/static/mathjax"))


def _sphinx(root: Path, stage: Path, html: Path) -> None:
    """Run Sphinx on ``stage``; every warning is an error."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
               "-d", str(stage.parent / "doctrees"), str(stage), str(html)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(root.resolve())}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        problems = (done.stderr or done.stdout).strip().replace(str(stage) + "/", "")
        raise SiteError(f"the site did not build:\n{problems}")


def _check_out(root: Path, out: Path) -> None:
    """OUT must be new, empty or an earlier site holding only what it built (its marker lists
    it), not a symbolic link, and neither the repository nor above it."""
    if out.is_symlink():
        raise SiteError(f"{out} is a symbolic link: give the folder itself")
    where, home = out.resolve(), root.resolve()
    if where == home or home.is_relative_to(where):
        raise SiteError(f"{out} holds the repository: choose a folder for the site alone")
    if where.exists() and not where.is_dir():
        raise SiteError(f"{out} is a file, not a folder")
    if not where.exists() or not any(where.iterdir()):
        return
    marker = where / MARKER
    built = _built(marker) if marker.is_file() and not marker.is_symlink() else None
    others = None if built is None else {e.name for e in where.iterdir()} - built - {MARKER}
    if built is None or others:
        shown = f" ({', '.join(sorted(others)[:5])})" if others else ""
        raise SiteError(f"{out} holds files that are not a site built here{shown}: choose an "
                        "empty folder")  # fmt: skip


def _built(marker: Path) -> set[str] | None:
    """The entries an earlier build wrote, as its marker lists them (None: not a marker)."""
    try:
        return set(json.loads(marker.read_text("utf-8"))["built"])
    except (ValueError, KeyError, TypeError):
        return None


def _replace(out: Path, html: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(html, out)
    built = sorted(entry.name for entry in out.iterdir())
    (out / MARKER).write_text(json.dumps({"built": built}) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder of the site")
    parser.add_argument("--edition", choices=EDITIONS, default="student")
    parser.add_argument("--repository", metavar="URL", help="the badges' GitHub repository")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    args = parser.parse_args(argv)
    try:
        given = args.repository is not None
        repository = links.Repository.parse(args.repository) if given else None
        pages = build(args.root, args.out, args.edition, repository)
    except (SiteError, release.ReleaseError, links.LinkError, EditionError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"built {pages} pages ({args.edition} edition) in {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
