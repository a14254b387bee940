"""Every picture the notebooks store says what it shows (issue 24, item 3): an image output
carries ``alt`` in its metadata, a picture inside an HTML output is an ``<svg role="img"
aria-label>`` (or an ``<img alt>``), and the descriptions come from the pictures' data."""

import re

import nbformat
import numpy as np
import pytest
from exercise_notebooks import NOTEBOOKS, STUDENT

import course_lib as cl
from course_lib.viz import plots
from course_lib.viz.alt import figure_description, svg_with_alt

IMAGES = ("image/png", "image/svg+xml", "image/jpeg")
SVG_TAG = re.compile(r"<svg\b[^>]*>")
IMG_TAG = re.compile(r"<img\b[^>]*>")


def _pictures_without_alt(path) -> list[str]:
    missing = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []):
            data, meta = output.get("data", {}), output.get("metadata", {})
            for mime in IMAGES:
                if mime in data and not meta.get(mime, {}).get("alt", "").strip():
                    missing.append(f"cell {index}: {mime}")
            page = data.get("text/html", "")
            for tag in SVG_TAG.findall(page):
                if 'role="img"' not in tag or not re.search(r'aria-label="[^"]+"', tag):
                    missing.append(f"cell {index}: an <svg> in text/html")
            for tag in IMG_TAG.findall(page):
                if not re.search(r'alt="[^"]+"', tag):
                    missing.append(f"cell {index}: an <img> in text/html")
    return missing


NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("*.ipynb")) + sorted(STUDENT.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_stored_picture_lacks_alt_text(path):
    assert _pictures_without_alt(path) == []


def test_the_notebooks_store_pictures_at_all():
    count = sum(
        mime in output.get("data", {})
        for path in NOTEBOOKS.glob("*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells
        for output in cell.get("outputs", [])
        for mime in IMAGES
    )
    assert count > 30


def test_a_figure_is_described_from_its_data():
    fig = plots.plot_difference_errors(
        np.logspace(-12, 0, 13), {"forward": np.logspace(-4, -1, 13), "central": np.ones(13)}
    )
    text = figure_description(fig)
    assert "Truncation error" in text and "legend: forward difference, central difference" in text
    assert "x axis “step size ε” (log scale" in text
    bars = plots.plot_stacked_bars({"1 GPU": {"weights": 4.0, "activations": 2.0},
                                    "8 GPUs": {"weights": 0.5, "activations": 2.0}},
                                   title="Memory per GPU", unit="GiB")  # fmt: skip
    text = figure_description(bars)
    assert "4 bars" in text and "Memory per GPU" in text and "categories 1 GPU, 8 GPUs" in text


def test_a_graph_and_a_players_steps_carry_their_description(worked_example):
    _, v4, _, trace = worked_example
    bundle, metadata = cl.viz.draw_graph(v4)._repr_mimebundle_()
    alt = metadata["image/svg+xml"]["alt"]
    assert alt.startswith("graph with 4 nodes") and "v4 = v2 × v3" in alt and "\n" not in alt
    player = cl.viz.StepThrough(trace, feed={"v1": 0.5})
    labels = re.findall(r'<svg role="img" aria-label="([^"]+)"', player.html())
    assert len(labels) == 8 and labels[0].startswith("the graph after this step: ")
    assert svg_with_alt('<svg width="1">', 'a "b" <c>') == (
        '<svg role="img" aria-label="a &quot;b&quot; &lt;c>" width="1">'
    )


def test_areas_and_colour_bars_are_not_counted_as_points():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    ax.fill_between([0, 1, 2], [0, 1, 0])
    mesh = ax.pcolormesh(np.arange(6.0).reshape(2, 3))
    fig.colorbar(mesh, label="v")
    ax.scatter([0, 1], [1, 0])
    text = figure_description(fig)
    assert "2 marked points" in text and text.count("a plot") == 1, text
