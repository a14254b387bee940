"""Pictures given what a student may give them: odd names, huge or empty values, bad plot
data, big traces, and a front end that runs an output's scripts away from it."""

import html
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import course_lib as cl
from course_lib.viz import StepThrough, draw_graph, draw_step, plot_attention, plot_breakdown
from course_lib.viz.figure import format_value

sys.path.insert(0, str(Path(__file__).with_name("browser")))
from browser_tools import CHROMIUM, offline_page  # noqa: E402


def _texts(svg: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]


def _chain(ops: int):
    x = cl.variable("x", shape=())
    y = x
    for _ in range(ops):
        y = cl.sin(y)
    return x, y


@pytest.mark.parametrize("name", [r"\N", r"\alpha", "trail\\", r"a\lb"])
def test_backslashes_in_names_and_titles_are_drawn_as_written(name):
    """dot reads backslashes in a label (\\N: the node's id, \\l: a line end)."""
    x = cl.variable(name, shape=())
    y = cl.exp(x) * x
    grads, trace = cl.gradient_trace(y, x)
    drawn = draw_graph(y, {x: 0.5}, backward=grads, title=f"f({name})").svg()
    assert f"v1 = {name}" in _texts(drawn) and f"f({name})" in _texts(drawn)
    assert f"v1 = {name}" in _texts(draw_step(trace, 0).svg())
    assert f"v1 = {name}" in _texts(StepThrough(trace).pages[0])


def test_huge_and_empty_values_are_written_shortly():
    assert format_value(1e300) == "1.000e+300" and format_value(-2e6) == "−2.000e+06"
    assert format_value(999999.5) == "999999.500" and format_value(np.nan) == "nan"
    assert format_value(np.zeros((0, 3))) == "shape 0×3"
    x = cl.variable("x", shape=())
    assert "= 1.000e+300" in draw_graph(x * 2.0, {x: 5e299}).source


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_plot_breakdown_refuses_parts_that_are_not_finite(bad):
    with pytest.raises(ValueError, match="plot_breakdown needs finite"):
        plot_breakdown({"a": bad, "b": 1.0}, "t")


@pytest.mark.parametrize(
    "maps, labels, titles",
    [([np.eye(3)], ["a", "b"], ["t"]), ([np.eye(2)], ["a", "b"], []), ([], [], [])],
)
def test_plot_attention_refuses_maps_its_labels_do_not_name(maps, labels, titles):
    with pytest.raises(ValueError, match=r"plot_attention needs one title per map"):
        plot_attention(maps, labels, titles)


def test_step_through_refuses_more_steps_than_max_steps():
    x, y = _chain(8)
    _, trace = cl.gradient_trace(y, x)  # 17 steps
    with pytest.raises(cl.GraphError, match=r"17 steps .*max_steps=16"):
        StepThrough(trace, max_steps=16)
    assert len(StepThrough(trace, max_steps=17)) == 17


# The classic Notebook inserts an output's HTML, then runs each of its scripts in <head>
JQUERY_LIKE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<div id="out1"></div><div id="out2"></div><script>
function show(id, html) {
  var out = document.getElementById(id);
  out.innerHTML = html;
  out.querySelectorAll("script").forEach(function (s) {
    var run = document.createElement("script");
    run.text = s.text;
    document.head.appendChild(run).parentNode.removeChild(run);
  });
}
show("out1", PLAYER); show("out2", PLAYER);
</script></body></html>"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_player_starts_where_a_front_end_runs_its_script_in_head(tmp_path):
    x, y = _chain(2)
    _, trace = cl.gradient_trace(y, x)
    player = json.dumps(StepThrough(trace).html()).replace("</", "<\\/")
    page_file = tmp_path / "page.html"
    page_file.write_text(JQUERY_LIKE.replace("PLAYER", player), encoding="utf-8")
    with offline_page(page_file.as_uri()) as (page, _, errors):
        for player in page.locator(".cl-player").all():
            assert player.get_by_role("slider").count() == 1
            shown = [f for f in player.locator("figure.cl-step").all() if f.is_visible()]
            assert len(shown) == 1
        assert page.locator("head .cl-controls").count() == 0 and errors == []


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_a_player_run_in_head_takes_its_own_controls_not_a_stale_players_below(tmp_path):
    """An untrusted notebook's saved players never started (their scripts were stripped):
    re-running a cell above one must start the new player, not the stale one."""
    new = json.dumps(StepThrough(cl.gradient_trace(*_chain(2)[::-1])[1]).html())
    stale = json.dumps(StepThrough(cl.gradient_trace(*_chain(3)[::-1])[1]).html())
    page_text = JQUERY_LIKE.replace(
        'show("out1", PLAYER); show("out2", PLAYER);',
        'document.getElementById("out2").innerHTML = STALE; show("out1", PLAYER);',
    ).replace("STALE", stale.replace("</", "<\\/")).replace("PLAYER", new.replace("</", "<\\/"))
    page_file = tmp_path / "page.html"
    page_file.write_text(page_text, encoding="utf-8")
    with offline_page(page_file.as_uri()) as (page, _, errors):
        assert page.locator("#out1").get_by_role("slider").count() == 1
        assert page.locator("#out2").get_by_role("slider").count() == 0 and errors == []
