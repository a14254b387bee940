"""Review 10 of the generated notebook cells (course_lib.links) and the table printer
(course_lib.tables): notebooks from before cell ids, nbformat 3, empty titles, copied tagged
cells, the URL's host in capitals; wide and invisible characters, control characters and
generators in tables."""

import json

import nbformat
import pytest

from course_lib import links
from course_lib.links import BOTTOM, INSTALL, TOP, LinkError, Repository
from course_lib.tables import Table


def _notebook(*cells, minor=5):
    notebook = nbformat.v4.new_notebook()
    notebook.nbformat_minor = minor
    notebook.cells = list(cells)
    if minor < 5:
        for cell in notebook.cells:
            del cell["id"]
    return notebook


def _course(tmp_path, first):
    """A repository with notebooks/00_a.ipynb (``first``) and 01_b.ipynb."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    second = _notebook(nbformat.v4.new_markdown_cell("# B"), nbformat.v4.new_code_cell("1"))
    for name, notebook in [("00_a.ipynb", first), ("01_b.ipynb", second)]:
        nbformat.write(notebook, tmp_path / "notebooks" / name)
    return tmp_path


# ---------------------------------------------------------------- links


def test_a_notebook_from_before_cell_ids_gets_generated_cells_without_ids(tmp_path, capsys):
    first = _notebook(
        nbformat.v4.new_markdown_cell("# A\n\nIntro."), nbformat.v4.new_code_cell("x = 1"), minor=4
    )
    root = _course(tmp_path, first)
    path = root / "notebooks" / "00_a.ipynb"
    argv = ["--root", str(root), "--repository", "https://github.com/o/r"]
    assert links.main(argv) == 0
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["nbformat_minor"] == 4
    assert [c.get("id") for c in stored["cells"]] == [None] * 5  # nav-top, intro, install...
    nbformat.validate(nbformat.read(path, nbformat.NO_CONVERT))  # was: 'id' was unexpected
    capsys.readouterr()
    assert links.main(["--root", str(root), "--check"]) == 0  # was: exit 2, "not valid"
    assert links.main(argv) == 0 and "rewrote 0 of 2" in capsys.readouterr().out


def test_an_nbformat_3_notebook_is_named_not_a_traceback(tmp_path, capsys):
    root = _course(tmp_path, _notebook(nbformat.v4.new_markdown_cell("# A")))
    v3 = {
        "nbformat": 3,
        "nbformat_minor": 0,
        "metadata": {"name": ""},
        "worksheets": [
            {"metadata": {}, "cells": [{"cell_type": "markdown", "metadata": {}, "source": "# A"}]}
        ],
    }
    (root / "notebooks" / "00_a.ipynb").write_text(json.dumps(v3), encoding="utf-8")
    assert links.main(["--root", str(root), "--check"]) == 2  # was: AttributeError: cells
    assert "00_a.ipynb is an nbformat 3 notebook" in capsys.readouterr().err


@pytest.mark.parametrize("heading", ["# ", "#   \t"])
def test_an_empty_title_is_refused_not_linked_as_an_empty_link(heading):
    notebooks = {
        "00_a.ipynb": _notebook(nbformat.v4.new_markdown_cell(heading)),
        "01_b.ipynb": _notebook(nbformat.v4.new_markdown_cell("# B")),
    }
    with pytest.raises(LinkError, match="00_a.ipynb: no title"):  # was: "Previous: [](00_a..."
        links.link_notebooks(notebooks, None, "notebooks")


@pytest.mark.parametrize("tag", [TOP, INSTALL, BOTTOM])
def test_a_cell_copied_with_a_generated_tag_is_refused_not_deleted(tmp_path, capsys, tag):
    first = _notebook(nbformat.v4.new_markdown_cell("# A"), nbformat.v4.new_code_cell("x = 1"))
    root = _course(tmp_path, first)
    assert links.main(["--root", str(root), "--repository", "https://github.com/o/r"]) == 0
    path = root / "notebooks" / "00_a.ipynb"
    notebook = nbformat.read(path, nbformat.NO_CONVERT)
    mine = nbformat.v4.new_code_cell("my own setup", metadata={"tags": [tag]})
    notebook.cells.insert(2, mine)  # e.g. the install cell copied and edited
    nbformat.write(notebook, path)
    before = path.read_bytes()
    assert links.main(["--root", str(root)]) == 2  # was: exit 0, "my own setup" deleted
    err = capsys.readouterr().err
    assert "00_a.ipynb: cells " in err and f"are all tagged {tag!r}" in err
    assert path.read_bytes() == before


def test_a_cell_that_only_looks_generated_is_kept():
    install = links.install_source(Repository("o", "r"))
    mine = nbformat.v4.new_code_cell(install)  # the same code, without the tag
    notebooks = {"00_a.ipynb": _notebook(nbformat.v4.new_markdown_cell("# A"), mine)}
    links.link_notebooks(notebooks, Repository("o", "r"), "notebooks")
    cells = notebooks["00_a.ipynb"].cells
    assert [links.has_tag(c, INSTALL) for c in cells] == [False, True, False, False]
    assert cells[2] is mine


@pytest.mark.parametrize("url", ["https://GitHub.com/o/r", "HTTPS://GITHUB.COM/o/r.git"])
def test_the_host_and_scheme_of_the_url_ignore_case(url):
    assert Repository.parse(url) == Repository("o", "r")  # was: "is not a GitHub https URL"


def test_the_install_line_quotes_nothing_a_url_could_inject():
    for url in ['https://github.com/o/r/tree/x";import os;"', "https://github.com/o/r/tree/$(id)"]:
        with pytest.raises(LinkError, match="ref .* is not valid"):
            Repository.parse(url)
    source = links.install_source(Repository.parse("https://github.com/O-1/r.x_y/tree/v1.0"))
    assert '    source = "git+https://github.com/O-1/r.x_y@v1.0"\n' in source


# ---------------------------------------------------------------- tables


def test_wide_and_invisible_characters_keep_the_columns_aligned():
    table = Table(["name", "v"], [["重み", 1], ["👍", 2], ["e\u20dd", 3], ["a\u200bb", 4]])
    assert repr(table).split("\n") == [
        "name  v",
        "----  -",
        "重み  1",  # was: "重み    1" (wide characters counted one column)
        "👍    2",
        "e\u20dd     3",  # an enclosing mark takes no column
        "a\u200bb    4",  # nor a zero-width space
    ]


def test_a_control_character_cannot_start_a_row():
    table = Table(["student", "verdict"], [["mallory\nalice", "failed"], ["\x1b[2Jx\ty", "ok"]])
    assert repr(table).split("\n") == [
        "student         verdict",
        "--------------  -------",
        "mallory\\nalice  failed",  # was: a line "alice  failed", read as a row for alice
        "\\x1b[2Jx\\ty     ok",  # 11 columns, padded to 14
    ]
    assert table.rows[0][0] == "mallory\nalice"  # the cells themselves are unchanged
    assert "<td>mallory\nalice</td>" in table._repr_html_()


def test_rows_given_as_a_generator_are_all_shown():
    table = Table(["a"], ([i] for i in range(3)))
    assert table.rows == [["0"], ["1"], ["2"]]  # was: [], an empty table
    with pytest.raises(Exception, match="row 1 has 2 cells"):
        Table(["a"], (r for r in [[1], [1, 2]]))
