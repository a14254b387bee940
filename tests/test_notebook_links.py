"""The notebooks' generated cells (course_lib.links): previous/next links at both ends, in
course order, to files that exist; Binder/Colab badges and the install cell only with a
repository URL in pyproject.toml, all naming that repository; the fork command on a copy of
the repository; the install cell run as Colab would run it; URLs the badges cannot use."""

import functools
import json
import re
import shutil
import subprocess
import sys
import types

import nbformat
import pytest
from exercise_notebooks import NOTEBOOKS, ROOT, STUDENT

import course_lib
from course_lib import links
from course_lib.exercises.edition import write_edition
from course_lib.links import BOTTOM, INSTALL, TOP, LinkError, Repository

FOLDERS = [NOTEBOOKS, STUDENT]
NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")  # a markdown link, not an image
TEST_URL = "https://github.com/test-owner/test-course"  # a fixture, never written to notebooks/


def _read(path):
    return nbformat.read(path, as_version=nbformat.NO_CONVERT)


def _generated(cell) -> bool:
    return any(links.has_tag(cell, tag) for tag in (TOP, INSTALL, BOTTOM))


def _nav_links(source: str) -> list[tuple[str, str, str]]:
    """(word before the link, text, target) of the links of the nav line (the last line)."""
    line = source.rstrip().rsplit("\n", 1)[-1]
    return [
        (line[: m.start()].rstrip().rsplit(" ", 1)[-1], m.group(1), m.group(2))
        for m in LINK.finditer(line)
    ]


@functools.cache
def _titles() -> tuple[str, ...]:
    return tuple(links.title_of(_read(NOTEBOOKS / n)) for n in NAMES)


def _expected_nav(i: int) -> list[tuple[str, str, str]]:
    titles = _titles()
    expected = [("Previous:", titles[i - 1], NAMES[i - 1])] if i > 0 else []
    expected.append(("·" if i > 0 else "", "All notebooks", "../README.md"))
    if i + 1 < len(NAMES):
        expected.append(("Next:", titles[i + 1], NAMES[i + 1]))
    return expected


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_every_notebook_links_its_neighbours_at_both_ends(folder):
    assert NAMES == [f"{n:02d}_{p.split('_', 1)[1]}" for n, p in enumerate(NAMES)]  # 00, 01...
    assert sorted(p.name for p in folder.glob("*.ipynb")) == NAMES
    for i, name in enumerate(NAMES):
        cells = _read(folder / name).cells
        top, bottom = cells[0], cells[-1]
        assert links.has_tag(top, TOP) and links.has_tag(bottom, BOTTOM), name
        installs = sum(links.has_tag(c, INSTALL) for c in cells)
        assert sum(_generated(c) for c in cells) == 2 + installs and installs <= 1
        assert top.source.startswith(f"# {name[:2]} · "), name
        for cell in (top, bottom):
            assert cell.cell_type == "markdown"
            found = _nav_links(cell.source)
            assert found == _expected_nav(i), (name, found)
            for _, _, target in found:
                assert (folder / target).resolve().is_file(), (name, target)
    first, last = _nav_links(_read(folder / NAMES[0]).cells[0].source), _nav_links(
        _read(folder / NAMES[-1]).cells[0].source
    )
    assert "Previous:" not in [w for w, _, _ in first] and "Next:" not in [w for w, _, _ in last]


def test_links_name_each_neighbour_by_its_title():
    top = _read(NOTEBOOKS / "03_reverse_mode.ipynb").cells[0].source
    assert "Previous: [02 · Forward-mode automatic differentiation](02_forward_mode.ipynb)" in top
    assert "Next: [04 · Training: the master equation](04_training.ipynb)" in top


def test_the_stored_notebooks_are_in_sync_with_the_generator(capsys):
    repository = links.configured_repository(ROOT / "pyproject.toml")
    assert links.stale(links.linked_texts(ROOT, repository)) == []
    assert links.main(["--check", "--root", str(ROOT)]) == 0
    assert capsys.readouterr().err == ""


def test_without_a_repository_url_there_are_no_badges_and_no_install_cell():
    if links.configured_repository(ROOT / "pyproject.toml") is not None:
        pytest.skip("this repository has its URL: the fork test covers badges")
    for folder in FOLDERS:
        for name in NAMES:
            text = (folder / name).read_text(encoding="utf-8")
            assert "mybinder.org" not in text and "colab.research" not in text, name
            assert not any(links.has_tag(c, INSTALL) for c in _read(folder / name).cells)


# ---------------------------------------------------------------- the fork command on a copy


@pytest.fixture
def copy(tmp_path):
    """notebooks/, student/ and pyproject.toml of this repository, in tmp_path."""
    for folder in FOLDERS:
        shutil.copytree(folder, tmp_path / folder.name)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _files(root):
    return {
        p.relative_to(root): p.read_bytes()
        for p in [root / "pyproject.toml", *root.glob("notebooks/*.ipynb")]
        + [*root.glob("student/*.ipynb")]
    }


def _body(path):
    """Every cell but the generated ones, and the notebook's metadata, as exact JSON text."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = [json.dumps(c, sort_keys=True) for c in notebook["cells"] if not _generated(c)]
    rest = {k: v for k, v in notebook.items() if k != "cells"}
    return cells, json.dumps(rest, sort_keys=True)


def _fork(root, *args):
    return links.main(["--root", str(root), "--repository", *args])


def _assert_names_only(root, owner, repo, ref):
    """Every badge and install cell of the copy names owner/repo@ref, and nothing else does."""
    for folder in ("notebooks", "student"):
        for name in NAMES:
            cells = _read(root / folder / name).cells
            path = f"{folder}/{name}"
            binder = f"https://mybinder.org/v2/gh/{owner}/{repo}/{ref}?labpath={folder}%2F{name}"
            colab = f"https://colab.research.google.com/github/{owner}/{repo}/blob/{ref}/{path}"
            badges = re.findall(r"\[!\[([^\]]+)\]\(([^)]+)\)\]\(([^)]+)\)", cells[0].source)
            assert [(alt, target) for alt, _, target in badges] == [
                ("Open in Binder", binder),
                ("Open In Colab", colab),
            ], path
            install = [c for c in cells if links.has_tag(c, INSTALL)]
            code = [c for c in cells if c.cell_type == "code"]
            assert len(install) == 1 and code[0] is install[0], path
            assert re.findall(r"git\+https://[^\"']+", install[0].source) == [
                f"git+https://github.com/{owner}/{repo}@{ref}"
            ]
            assert install[0].outputs == [] and install[0].execution_count is None
            assert all(repo not in c.source for c in cells if not _generated(c)), path


def test_the_fork_command_rewrites_badges_and_install_cells_and_nothing_else(copy, capsys):
    before = {p: _body(copy / p) for p in _files(copy) if p.suffix == ".ipynb"}
    pyproject = (copy / "pyproject.toml").read_text()
    assert _fork(copy, TEST_URL) == 0
    assert "rewrote 20 of 20 notebooks" in capsys.readouterr().out
    _assert_names_only(copy, "test-owner", "test-course", "main")
    for path, body in before.items():
        assert _body(copy / path) == body, f"{path}: a cell other than the generated ones changed"
    table = f'\n[project.urls]\nRepository = "{TEST_URL}"\n'  # a blank line and two more:
    assert (copy / "pyproject.toml").read_text().replace(table, "", 1) == pyproject  # no other
    assert links.configured_repository(copy / "pyproject.toml") == Repository(
        "test-owner", "test-course"
    )

    files = _files(copy)
    assert _fork(copy, TEST_URL) == 0  # twice: nothing changes
    assert _files(copy) == files and "rewrote 0 of 20" in capsys.readouterr().out
    assert links.main(["--root", str(copy)]) == 0 and _files(copy) == files
    assert links.main(["--root", str(copy), "--check"]) == 0

    write_edition(copy / "notebooks", copy / "student")  # `make student` agrees
    assert _files(copy) == files


def test_a_second_fork_replaces_the_first_everywhere(copy):
    assert _fork(copy, TEST_URL) == 0
    assert _fork(copy, "https://github.com/other-owner/other-course.git", "--ref", "fall-2026") == 0
    _assert_names_only(copy, "other-owner", "other-course", "fall-2026")
    for path, text in _files(copy).items():
        assert b"test-owner" not in text and b"test-course" not in text, path
    stored = links.configured_repository(copy / "pyproject.toml")
    assert stored.url == "https://github.com/other-owner/other-course/tree/fall-2026"
    assert (copy / "pyproject.toml").read_text().count("[project.urls]") == 1


def test_check_fails_when_pyproject_and_notebooks_disagree(copy, capsys):
    assert _fork(copy, TEST_URL) == 0
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("test-course", "renamed-course"))
    capsys.readouterr()
    assert links.main(["--root", str(copy), "--check"]) == 1
    err = capsys.readouterr().err
    assert "out of date: notebooks/00_tour.ipynb" in err and "student/09_" in err
    assert "python -m course_lib.links" in err


def test_the_command_runs_as_a_module_and_says_why_there_are_no_badges(copy):
    text = (copy / "pyproject.toml").read_text()
    if "[project.urls]" in text:
        pytest.skip("this repository has its URL")
    result = subprocess.run(
        [sys.executable, "-m", "course_lib.links"],
        cwd=copy, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "no Repository under [project.urls]" in result.stdout
    assert "previous/next links only" in result.stdout and "--repository" in result.stdout
    assert "rewrote 0 of 20 notebooks" in result.stdout


def test_generated_cells_are_found_again_after_cells_are_added_anywhere():
    notebooks = {n: _read(NOTEBOOKS / n) for n in NAMES[:3]}
    middle = notebooks[NAMES[1]]
    added = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_markdown_cell("## new")]
    middle.cells[4:4] = [added[0]]
    middle.cells.append(added[1])  # after nav-bottom
    middle.cells.insert(0, nbformat.v4.new_markdown_cell("a cell above the title"))
    body = [c for c in middle.cells if not _generated(c)]
    links.link_notebooks(notebooks, Repository("o", "r"), "notebooks")
    cells = middle.cells
    assert links.has_tag(cells[0], TOP) and links.has_tag(cells[-1], BOTTOM)
    assert [c for c in cells if not _generated(c)] == body  # same cells, same order
    assert [c.cell_type for c in cells].index("code") == cells.index(
        next(c for c in cells if links.has_tag(c, INSTALL))
    )


def test_an_old_title_cell_is_converted_once():
    old = nbformat.v4.new_notebook()
    title = nbformat.v4.new_markdown_cell(
        "# 01 · Old\n\nIntro text.\n\nPrevious: [00](00_a.ipynb) ·\nNext: [02](02_b.ipynb)",
        id="keepme",
    )
    old.cells = [title, nbformat.v4.new_code_cell("import x")]
    first = nbformat.v4.new_notebook()
    first.cells = [nbformat.v4.new_markdown_cell("# 00 · First\n\nNext: [01](01_old.ipynb)")]
    notebooks = {"00_first.ipynb": first, "01_old.ipynb": old}
    links.link_notebooks(notebooks, None, "notebooks")
    assert [c.source for c in old.cells[1:3]] == ["Intro text.", "import x"]
    assert old.cells[1].id == "keepme" and old.cells[0].id == TOP
    assert old.cells[0].source == "# 01 · Old\n\nPrevious: [00 · First](00_first.ipynb) · " + (
        "[All notebooks](../README.md)"
    )
    assert [c.id for c in first.cells] == [TOP, BOTTOM]  # nothing but the title was left
    again = {n: nbformat.from_dict(json.loads(json.dumps(nb))) for n, nb in notebooks.items()}
    links.link_notebooks(again, None, "notebooks")
    assert again == notebooks


def test_an_executed_install_cell_is_kept_until_its_code_changes():
    notebooks = {n: _read(NOTEBOOKS / n) for n in NAMES[:2]}
    links.link_notebooks(notebooks, Repository("o", "r"), "notebooks")
    (install,) = [c for c in notebooks[NAMES[0]].cells if links.has_tag(c, INSTALL)]
    install.execution_count, install.metadata["execution"] = 1, {"iopub.status.idle": "t"}
    links.link_notebooks(notebooks, Repository("o", "r"), "notebooks")
    assert [c for c in notebooks[NAMES[0]].cells if links.has_tag(c, INSTALL)] == [install]
    links.link_notebooks(notebooks, Repository("o", "r2"), "notebooks")
    (new,) = [c for c in notebooks[NAMES[0]].cells if links.has_tag(c, INSTALL)]
    assert new.execution_count is None and new.metadata == {"tags": [INSTALL]}
    assert "o/r2@main" in new.source


def test_a_notebook_without_a_title_is_refused():
    untitled = nbformat.v4.new_notebook()
    untitled.cells = [nbformat.v4.new_code_cell("print(1)")]
    with pytest.raises(LinkError, match=r"05_x.ipynb: no title.*'# <title>'"):
        links.link_notebooks({"05_x.ipynb": untitled}, None, "notebooks")


@pytest.mark.parametrize(
    "title, shown",  # shown: the link's text as CommonMark renders it
    [
        ("[Evil](javascript:alert(1))", "[Evil](javascript:alert(1))"),
        ("<img src=x onerror=alert(1)> *a* _b_ $x$ &amp; ~~c~~ \\",
         "&lt;img src=x onerror=alert(1)&gt; *a* _b_ $x$ &amp;amp; ~~c~~ \\"),
        ("tour of `course_lib`", "tour of <code>course_lib</code>"),  # a code span stays one
        ("one ` backtick", "one ` backtick"),  # no span: it would pair with the next title's
    ],
)  # fmt: skip
def test_a_title_is_shown_as_text_in_its_neighbours_links(title, shown):
    markdown_it = pytest.importorskip("markdown_it")
    notebooks = {}
    for name, heading in [("00_a b.ipynb", title), ("01_b.ipynb", "B"), ("02_c.ipynb", "`C")]:
        notebooks[name] = nbformat.v4.new_notebook()
        notebooks[name].cells = [nbformat.v4.new_markdown_cell(f"# {heading}")]
    links.link_notebooks(notebooks, None, "notebooks")
    nav = notebooks["01_b.ipynb"].cells[-1].source.removeprefix("---\n\n")
    html = markdown_it.MarkdownIt("commonmark").renderInline(nav)
    assert re.findall(r'<a href="([^"]*)">(.*?)</a>', html) == [
        ("00_a%20b.ipynb", shown),
        ("../README.md", "All notebooks"),
        ("02_c.ipynb", "`C"),
    ]


# ---------------------------------------------------------------- notebooks it must not rewrite


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "is not a notebook nbformat can read: Notebook does not appear to be JSON"),
        ("[]", "is not a notebook nbformat can read"),
        ('{"nbformat": 4, "nbformat_minor": 5}', "missing an expected key: cells"),
        (json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
            {"cell_type": "markdown", "id": "a", "metadata": {}, "source": 5}]}),
         "is not a valid notebook: 5 is not valid"),
    ],
)  # fmt: skip
def test_a_malformed_notebook_is_named_and_nothing_is_written(copy, capsys, content, message):
    broken = copy / "student" / NAMES[5]
    broken.write_text(content, encoding="utf-8")
    files = _files(copy)
    for args in ([], ["--check"], ["--repository", TEST_URL]):
        assert links.main(["--root", str(copy), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {broken} ") and message in err, err
        assert _files(copy) == files


def test_a_notebook_that_is_a_link_is_not_written_through(copy, capsys, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    outside = elsewhere / NAMES[3]
    shutil.copy(copy / "notebooks" / NAMES[3], outside)
    outside.write_text(outside.read_text().replace("Previous:", "Earlier:"))  # out of date
    (copy / "notebooks" / NAMES[3]).unlink()
    (copy / "notebooks" / NAMES[3]).symlink_to(outside)
    before, files = outside.read_bytes(), _files(copy)
    for args in ([], ["--check"]):
        assert links.main(["--root", str(copy), *args]) == 2
        err = capsys.readouterr().err
        assert f"notebooks/{NAMES[3]} is a symbolic link to {outside}" in err
        assert "replace the link with a copy" in err
        assert outside.read_bytes() == before and _files(copy) == files


def test_a_folder_that_is_a_link_out_of_the_repository_is_refused(copy, capsys, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "student"
    shutil.move(copy / "student", elsewhere)
    (copy / "student").symlink_to(elsewhere, target_is_directory=True)
    before = {p: p.read_bytes() for p in elsewhere.iterdir()}
    assert links.main(["--root", str(copy), "--repository", TEST_URL]) == 2
    assert f"outside the repository {copy.resolve()}" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in elsewhere.iterdir()} == before


# ---------------------------------------------------------------- the install cell


def _run_install(monkeypatch, colab: bool, installed: bool, source=None):
    """Execute the install cell (by default for test-owner/test-course@v2); return the commands
    it ran."""
    calls = []
    monkeypatch.setattr(subprocess, "check_call", lambda cmd, **kw: calls.append(cmd) or 0)
    for name in ("run", "call", "Popen", "check_output", "getoutput"):
        monkeypatch.setattr(subprocess, name, lambda *a, **kw: pytest.fail("subprocess.*"))
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    # `import course_lib` fails with None in sys.modules
    monkeypatch.setitem(sys.modules, "course_lib", course_lib if installed else None)
    source = source or links.install_source(Repository("test-owner", "test-course", "v2"))
    exec(compile(source, "<install cell>", "exec"), {})
    return calls


PIP = [sys.executable, "-m", "pip", "install", "--quiet"]


@pytest.mark.parametrize("installed", [False, True], ids=["no course_lib", "course_lib"])
def test_on_colab_the_install_cell_runs_exactly_the_pip_command(monkeypatch, installed):
    calls = _run_install(monkeypatch, colab=True, installed=installed)
    assert calls == [[*PIP, "git+https://github.com/test-owner/test-course@v2"]]


def test_a_fresh_kernel_without_course_lib_installs_it(monkeypatch):
    calls = _run_install(monkeypatch, colab=False, installed=False)
    assert calls == [[*PIP, "git+https://github.com/test-owner/test-course@v2"]]
    with pytest.raises(ImportError):  # the fixture really made it unimportable
        import course_lib  # noqa: F401


def test_with_course_lib_and_no_colab_the_install_cell_does_nothing(monkeypatch, capsys):
    assert _run_install(monkeypatch, colab=False, installed=True) == []
    assert capsys.readouterr() == ("", "")


def test_the_install_cell_a_fork_stores_installs_the_fork(copy, monkeypatch):
    assert _fork(copy, TEST_URL, "--ref", "fall-2026") == 0
    for folder in ("notebooks", "student"):
        cells = _read(copy / folder / "08_llama.ipynb").cells
        (cell,) = [c for c in cells if links.has_tag(c, INSTALL)]
        assert len(cell.source.splitlines()) <= 6  # a few readable lines
        calls = _run_install(monkeypatch, colab=True, installed=False, source=cell.source)
        assert calls == [[*PIP, f"git+{TEST_URL}@fall-2026"]]
        assert _run_install(monkeypatch, colab=False, installed=True, source=cell.source) == []


# ---------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    "url, ref",
    [
        ("https://github.com/a-b/c.d_e", "main"),
        ("https://github.com/a-b/c.d_e.git", "main"),
        ("https://github.com/a-b/c.d_e/", "main"),
        ("  https://github.com/a-b/c.d_e  ", "main"),
        ("https://github.com/a-b/c.d_e/tree/v1.0", "v1.0"),
        ("https://github.com/a-b/c.d_e/tree/fall_2026/", "fall_2026"),
    ],
)
def test_github_urls_are_read(url, ref):
    repository = Repository.parse(url)
    assert repository == Repository("a-b", "c.d_e", ref)
    assert Repository.parse(repository.url) == repository  # what pyproject stores reads back
    assert repository.binder("notebooks/00_tour.ipynb") == (
        f"https://mybinder.org/v2/gh/a-b/c.d_e/{ref}?labpath=notebooks%2F00_tour.ipynb"
    )
    assert repository.colab("student/00_tour.ipynb") == (
        f"https://colab.research.google.com/github/a-b/c.d_e/blob/{ref}/student/00_tour.ipynb"
    )


@pytest.mark.parametrize(
    "url, message",
    [
        ("", "no repository URL given"),
        ("   ", "no repository URL given"),
        (None, "no repository URL given"),
        ("http://github.com/a/b", "not a GitHub https URL"),
        ("https://gitlab.com/a/b", "open GitHub repositories only"),
        ("git@github.com:a/b.git", "not a GitHub https URL"),
        ("https://user:token@github.com/a/b", "not a GitHub https URL"),
        ("https://github.com.evil.example/a/b", "not a GitHub https URL"),
        ("github.com/a/b", "not a GitHub https URL"),
        ("https://github.com/a", "does not name one repository"),
        ("https://github.com/a/b/c", "does not name one repository"),
        ("https://github.com/a/b/blob/main/x.ipynb", "does not name one repository"),
        ("https://github.com/a/b?tab=readme", "query or a fragment"),
        ("https://github.com/a/b#readme", "query or a fragment"),
        ("https://github.com/-a/b", "owner '-a' is not valid"),
        ("https://github.com/a_b/c", "owner 'a_b' is not valid"),
        ("https://github.com/a/..", "repository name '..' is not valid"),
        ("https://github.com/a/b c", "repository name 'b c' is not valid"),
        ("https://github.com/a/b/tree/feature/x", "ref 'feature/x' is not valid.*without '/'"),
        ("https://github.com/a/b/tree/..", "ref '..' is not valid"),
        ("https://github.com/a/b/tree/-x", "ref '-x' is not valid"),
        ("https://github.com/a/b/tree/v1..2", "ref 'v1..2' is not valid"),
        ('https://github.com/a/b"c', "repository name 'b\"c' is not valid"),
    ],
)
def test_urls_the_badges_cannot_use_are_refused_clearly(url, message):
    with pytest.raises(LinkError, match=message):
        Repository.parse(url)


def test_a_ref_given_twice_must_agree():
    assert Repository.parse("https://github.com/a/b", ref="v2").ref == "v2"
    assert Repository.parse("https://github.com/a/b/tree/v2", ref="v2").ref == "v2"
    with pytest.raises(LinkError, match="names ref 'v1' but --ref says 'v2'"):
        Repository.parse("https://github.com/a/b/tree/v1", ref="v2")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--repository", "https://gitlab.com/me/course"], "GitHub repositories only"),
        (["--repository", "https://github.com/me/course", "--ref", "a/b"], "without '/'"),
        (["--ref", "main"], "--ref goes with --repository"),
        (["--repository", "https://github.com/me/course", "--ref", ""], "ref '' is not valid"),
        (["--repository", ""], "--repository '' names no repository"),
        (["--repository", " ", "--ref", "v1"], "leave the option out to keep the one in"),
    ],
)
def test_the_command_refuses_bad_input_and_changes_nothing(copy, capsys, args, message):
    files = _files(copy)
    assert links.main(["--root", str(copy), *args]) == 2
    assert message in capsys.readouterr().err
    assert _files(copy) == files


def test_a_bad_url_in_pyproject_is_named_where_it_is(copy, capsys):
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(links.with_repository(pyproject.read_text(), Repository("a", "b")))
    pyproject.write_text(pyproject.read_text().replace("https://github.com/a/b", "ftp://x/y"))
    assert links.main(["--root", str(copy), "--check"]) == 2
    err = capsys.readouterr().err
    assert "pyproject.toml, [project.urls] Repository: 'ftp://x/y' is not" in err


def test_a_pyproject_that_is_not_toml_is_named(copy, capsys):
    (copy / "pyproject.toml").write_text("[project\nname = 1\n")
    assert links.main(["--root", str(copy), "--check"]) == 2
    assert "pyproject.toml is not valid TOML" in capsys.readouterr().err
    with pytest.raises(LinkError, match="is missing: it holds the repository URL"):
        links.configured_repository(copy / "nowhere" / "pyproject.toml")


def test_a_directory_without_the_course_is_refused(tmp_path, capsys):
    assert links.main(["--root", str(tmp_path)]) == 2
    assert "has no pyproject.toml and notebooks/" in capsys.readouterr().err


# ---------------------------------------------------------------- pyproject.toml


PROJECT = '[project]\nname = "x"\ndependencies = [\n    "a",\n]\n'


@pytest.mark.parametrize(
    "text, expected",
    [
        (PROJECT, PROJECT + '\n[project.urls]\nRepository = "URL"\n'),
        (
            PROJECT + "\n[tool.x]\ny = 1\n",
            PROJECT + '\n[project.urls]\nRepository = "URL"\n\n[tool.x]\ny = 1\n',
        ),
        (
            PROJECT + '[project.urls]\nHomepage = "h"\n\n[tool.x]\n',
            PROJECT + '[project.urls]\nHomepage = "h"\nRepository = "URL"\n\n[tool.x]\n',
        ),
        (
            PROJECT + "[project.urls]\nRepository = 'old'  # comment\nDocs = \"d\"",
            PROJECT + '[project.urls]\nRepository = "URL"\nDocs = "d"',
        ),
        ('[project]\nname = "x"', '[project]\nname = "x"\n\n[project.urls]\nRepository = "URL"\n'),
    ],
)
def test_the_url_is_written_into_project_urls_and_nothing_else_changes(text, expected):
    repository = Repository("o", "r")
    assert links.with_repository(text, repository) == expected.replace("URL", repository.url)


@pytest.mark.parametrize(
    "text, message",
    [
        ('[tool.x]\ny = 1\n', "no \\[project\\] table"),
        (PROJECT.replace("]\n", ']\nurls = {Homepage = "h"}\n', 1), "add it by hand"),
    ],
)
def test_a_pyproject_it_cannot_edit_safely_is_refused(text, message):
    with pytest.raises(LinkError, match=message):
        links.with_repository(text, Repository("o", "r"))
