"""`make site` (course_lib.site): every notebook a page, offline, page-to-page links, unique
ids, and a build that refuses what it should not publish (the browser checks are in
tests/browser/test_site_pages.py)."""

import collections
import json
import re
import shutil
import subprocess
import sys

import pytest
from exercise_notebooks import NOTEBOOKS, ROOT

from course_lib.site import MARKER, jupyter_anchor

ID = re.compile(r'\sid="([^"]+)"')
LOADED = re.compile(r'<(?:script|img|link)\b[^>]*?\b(?:src|href)="([^"]+)"')


def _pages(site):
    return sorted(site.rglob("*.html"))


def test_every_notebook_is_a_page_and_the_readme_the_index(built_site):
    pages = {p.stem for p in (built_site / "notebooks").glob("*.html")}
    assert pages == {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    index = (built_site / "README.html").read_text()
    assert all(f'href="notebooks/{p}.html"' in index for p in pages)
    assert (built_site / MARKER).is_file()


def test_pages_load_nothing_from_the_network_and_link_page_to_page(built_site):
    for page in _pages(built_site):
        text = page.read_text(encoding="utf-8")
        remote = [u for u in LOADED.findall(text) if re.match(r"(https?:)?//", u)]
        assert not remote, f"{page.name} loads {remote}"
        links = re.findall(r'<a\b[^>]*href="([^"#]+)', text)
        to_sources = [u for u in links if u.endswith((".ipynb", ".md")) and "://" not in u]
        assert not to_sources, f"{page.name} links to {to_sources}"
    tour = (built_site / "notebooks" / "03_reverse_mode.html").read_text()
    assert 'href="04_training.html"' in tour and 'href="../README.html"' in tour
    assert "mathjax/tex-svg.js" in tour and (built_site / "_static/mathjax/tex-svg.js").is_file()


def test_no_page_has_a_duplicate_id(built_site):
    for page in _pages(built_site):
        counts = collections.Counter(ID.findall(page.read_text(encoding="utf-8")))
        assert not [i for i, n in counts.items() if n > 1], page.name


def test_a_link_into_another_notebooks_section_reaches_its_heading(built_site):
    anchor = jupyter_anchor("5 · Why is merged QKV faster?")
    assert anchor == "5-·-Why-is-merged-QKV-faster?"
    llama = (built_site / "notebooks" / "08_llama.html").read_text()
    fusion = (built_site / "notebooks" / "06_intensity_and_fusion.html").read_text()
    target = re.search(r'href="06_intensity_and_fusion\.html#([^"]+)"', llama).group(1)
    assert f'id="{target}"' in fusion


def _site(out, root=ROOT):
    return subprocess.run([sys.executable, "-m", "course_lib.site", str(out), "--root", str(root)],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_a_notebook_with_an_error_output_stops_the_build_before_anything_is_written(tmp_path):
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    (root / "docs" / "release").mkdir(parents=True)
    for name in ("README.md", "pyproject.toml", "docs/release/README.md"):
        shutil.copy(ROOT / name, root / name)
    notebook = json.loads((NOTEBOOKS / "00_tour.ipynb").read_text())
    code = next(i for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "code")
    notebook["cells"][code]["outputs"] = [{"output_type": "error", "ename": "ValueError",
                                           "evalue": "boom", "traceback": []}]  # fmt: skip
    (root / "notebooks" / "00_tour.ipynb").write_text(json.dumps(notebook))
    done = _site(tmp_path / "site", root)
    assert done.returncode == 2 and f"00_tour.ipynb, cell {code}" in done.stderr, done.stderr
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize("where", ["unrelated", "repository", "marker-and-mine", "linked"])
def test_an_out_folder_the_site_would_damage_is_refused(tmp_path, where):
    out = ROOT if where == "repository" else tmp_path / "mine"
    if where in ("unrelated", "marker-and-mine"):
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    if where == "marker-and-mine":  # an earlier site, and a file of the user's beside it
        (out / MARKER).write_text(json.dumps({"built": ["index.html"]}))
        (out / "index.html").write_text("<p>")
    if where == "linked":
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    done = _site(out)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "choose" in done.stderr or "symbolic link" in done.stderr
    if where in ("unrelated", "marker-and-mine"):
        assert (out / "notes.txt").read_text() == "mine"


def test_the_pages_workflow_publishes_what_make_site_builds():
    yaml = pytest.importorskip("yaml", reason="PyYAML (a repo2docker dependency) is missing")
    workflow = yaml.safe_load((ROOT / ".github/workflows/pages.yml").read_text())
    build = workflow["jobs"]["build"]["steps"]
    runs = [step["run"] for step in build if "run" in step]
    assert runs == ["make site SITE=_site"]
    upload = next(s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == "_site"
    assert workflow["jobs"]["deploy"]["needs"] == "build"
    makefile = (ROOT / "Makefile").read_text()
    assert "\nsite: " in makefile and "-m course_lib.site" in makefile


def test_every_picture_on_the_site_says_what_it_shows(built_site):
    """The notebooks' alt text (output metadata) reaches the pages' ``<img alt>``."""
    pictures = 0
    for page in _pages(built_site):
        for tag in re.findall(r"<img\b[^>]*>", page.read_text(encoding="utf-8")):
            pictures += 1
            alt = re.search(r'\balt="([^"]*)"', tag)
            assert alt and alt.group(1).strip(), f"{page.name}: {tag[:120]}"
    assert pictures > 30
