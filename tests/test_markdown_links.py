"""Every relative link in the notebooks' markdown, the README and docs/ reaches a file that
exists, and a link into a section names a heading that file has: a notebook's
(`NN_x.ipynb#Heading-text`) spelled as JupyterLab and nbconvert spell anchors (spaces become
hyphens), a Markdown file's (`docs/x.md#a-heading`) as GitHub spells them."""

import re
from pathlib import Path

import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, ROOT, STUDENT

LINK = re.compile(r"\]\(([^)\s]+)\)")  # a markdown link's or image's target
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, data: ...
FENCED = re.compile(r"```.*?```", re.S)  # code blocks: their "# comments" are no headings
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # code blocks and spans: no links in there


def _markdown_of(path: Path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    return "\n\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


def anchor_of(heading: str) -> str:
    """The anchor JupyterLab gives a heading: its text (code marks dropped), spaces as '-'."""
    return heading.replace("`", "").strip().replace(" ", "-")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading in a .md file: lower case, punctuation dropped (but
    hyphens and underscores), spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(document: Path) -> set[str]:
    spell = github_anchor if document.suffix == ".md" else anchor_of
    return {spell(h) for h in HEADING.findall(FENCED.sub("", _markdown_of(document)))}


def _documents() -> list[Path]:
    return [
        *sorted(NOTEBOOKS.glob("*.ipynb")),
        *sorted(STUDENT.glob("*.ipynb")),
        *sorted(ROOT.glob("*.md")),
        *sorted((ROOT / "docs").glob("*.md")),
    ]


def _relative_links(path: Path) -> list[str]:
    prose = CODE.sub("", _markdown_of(path))
    return [t for t in LINK.findall(prose) if not EXTERNAL.match(t)]


def test_the_documents_have_relative_links():
    assert sum(len(_relative_links(p)) for p in _documents()) > 50


@pytest.mark.parametrize("path", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    broken = []
    for target in _relative_links(path):
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        if not destination.exists():
            broken.append(f"{target}: no file {destination}")
        elif anchor and destination.suffix in (".ipynb", ".md") and anchor not in _anchors(
            destination
        ):
            broken.append(f"{target}: {destination.name} has no heading with that anchor")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_github_anchor_matches_github():
    assert github_anchor("Adding an op (a checklist)") == "adding-an-op-a-checklist"
    assert github_anchor("Exercises and the student edition (`course_lib/exercises/`)") == (
        "exercises-and-the-student-edition-course_libexercises"
    )


def test_anchor_of_matches_jupyterlab():
    assert anchor_of("7 · Why is merged QKV faster?") == "7-·-Why-is-merged-QKV-faster?"
    assert anchor_of("What does `jit` cache?") == "What-does-jit-cache?"
