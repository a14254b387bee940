"""Review 11 of the pictures (course_lib/viz), from instructors reading notebooks 02 and 03:
steps of the backward algorithm that build no node drawn as if they built one, an error plot
whose alt text did not say its V, and graphviz's ``%3`` as every graph picture's tooltip."""

import re
import shutil
import xml.dom.minidom

import numpy as np
import pytest

import course_lib as cl
from course_lib.viz import StepThrough, draw_graph, draw_step, plot_difference_errors
from course_lib.viz.alt import figure_description
from course_lib.viz.steps import CREATED, REUSED, StepState, replayed

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is needed")
BUILT_FILL = f'fillcolor="{CREATED["fillcolor"]}"'
NOTE = "reused: no new node"
# the lecture's f = (exp(v1) + 1)·exp(v1) at v1 = 0.5: steps 4, 5 and 8 build no node
REUSED_CAPTIONS = {
    3: "i = 3: v̄3 = v̄(3→4) = 1.649 — reused: no new node (v̄3 is the node v̄(3→4))",
    4: "i = 3, k = 2: append v̄(2→3) = v̄3·∂v3/∂v2 = v̄3 = 1.649 to node_to_grad[2] — reused: "
    "no new node (v̄(2→3) is the node v̄3)",
    7: "i = 1: v̄1 = v̄(1→2) = 7.085 — reused: no new node (v̄1 is the node v̄(1→2))",
}


def _node_lines(source: str) -> dict[str, str]:
    """The DOT statement of each node of a step's picture (f0, b3, ...), by its id."""
    return dict(re.findall(r"^\t([fb]\d+) (\[.*?\])$", source, re.M | re.S))


# --- 1 · a step that builds no node is drawn and said as reusing one -------------------------


def test_steps_that_build_no_node_draw_it_reused_not_built(worked_example):
    *_, trace = worked_example
    for step in range(len(trace.steps)):
        fig = draw_step(trace, step, feed={"v1": 0.5})
        nodes = _node_lines(fig.source)
        built = [i for i, line in nodes.items() if BUILT_FILL in line]
        reused = [i for i, line in nodes.items() if 'style="rounded,filled,dotted"' in line]
        caption = repr(fig).splitlines()[0].split(": ", 1)[1]
        if step in REUSED_CAPTIONS:  # no yellow "just built", one dotted amber outline
            assert built == [] and len(reused) == 1, step
            assert f'color="{REUSED["color"]}"' in nodes[reused[0]]
            assert caption == REUSED_CAPTIONS[step]
            assert NOTE in fig.alt_text() and NOTE in fig.source  # alt text, caption drawn
        else:  # a node built: yellow, as before (the seed v̄4 of step 1 first appears there)
            assert len(built) == 1 and reused == [] and NOTE not in fig.source, step


def test_a_reused_node_keeps_its_names_and_everything_else_is_drawn_as_before(
    worked_example, monkeypatch
):
    """Only the reused node's look and the caption change: with the reused look set to the
    built one and the note taken away, the picture is the one a built node would have."""
    *_, trace = worked_example
    new = draw_step(trace, 4, feed={"v1": 0.5}).source
    assert "v̄3 = v̄4 × v2\n= 1.649\n≡ v̄(3→4) ≡ v̄(2→3)" in new  # the lecture's names
    monkeypatch.setattr("course_lib.viz.steps.REUSED", CREATED)
    monkeypatch.setattr(StepState, "caption", property(lambda state: state.said))
    as_built = draw_step(trace, 4, feed={"v1": 0.5}).source
    old_style = (
        'color="#b45309" fillcolor="#ffedd5" penwidth=3 shape=box style="rounded,filled,dotted"'
    )
    built_style = (
        'color="#c2410c" fillcolor="#fde047" penwidth=2.5 shape=box style="rounded,filled,dashed"'
    )
    note = " — reused: no new node (v̄(2→3) is the node v̄3)"
    assert new.replace(old_style, built_style).replace(note, "") == as_built


def _reused_by_the_trace(trace) -> list[int]:
    """The steps whose node an earlier step already gave (or a forward node): no new node."""
    seen, reused = set(), []
    for j, s in enumerate(trace.steps):
        if s.created in seen or trace.is_forward(s.created):
            reused.append(j)
        seen.add(s.created)
    return reused


@pytest.mark.parametrize(
    "build, reuses",
    [
        (lambda x: cl.sin(x) + cl.exp(x), True),  # + : both partials are v̄i itself
        (lambda x: x * x, False),  # two partials v̄2 × v1, summed: every step builds
        (lambda x: cl.exp(cl.sin(x)) + x, True),
        (lambda x: (x + 1.0) * 2.0, True),
    ],
    ids=["sin(x) + exp(x)", "x * x", "exp(sin(x)) + x", "(x + 1) * 2"],
)
def test_a_step_is_reused_exactly_when_its_node_was_there_before(build, reuses):
    x = cl.variable("x", shape=())
    _, trace = cl.gradient_trace(build(x), [x])
    state = StepState(trace)
    said = []
    for _ in trace.steps:
        state.advance()
        said.append(NOTE in state.caption)
    assert [j for j, note in enumerate(said) if note] == _reused_by_the_trace(trace)
    assert any(said) == reuses and not said[0]  # the seed is new to the picture


def test_the_adds_partials_are_each_the_node_of_the_adjoint():
    x = cl.variable("x", shape=())
    _, trace = cl.gradient_trace(cl.sin(x) + cl.exp(x), [x])
    captions = [replayed(trace, j + 1).caption for j in range(len(trace.steps))]
    assert captions[1] == (
        "i = 4, k = 2: append v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 to node_to_grad[2] — reused: no new "
        "node (v̄(2→4) is the node v̄4)"
    )
    assert captions[2].endswith("— reused: no new node (v̄(3→4) is the node v̄4)")
    assert captions[3].endswith("— reused: no new node (v̄3 is the node v̄4)")


def test_the_players_captions_slider_status_and_aria_say_reused(worked_example):
    *_, trace = worked_example
    player = StepThrough(trace, feed={"v1": 0.5})
    for step, caption in enumerate(player.captions):
        assert (NOTE in caption) == (step in REUSED_CAPTIONS)
    for step, expected in REUSED_CAPTIONS.items():
        assert player.captions[step] == expected
    page = player.html()
    # player.js says "step k of n: " + the figcaption's <code> (slider and status line)
    codes = re.findall(r"<figcaption>.*?<code>(.*?)</code></figcaption>", page, re.S)
    assert [NOTE in c for c in codes] == [j in REUSED_CAPTIONS for j in range(8)]
    assert 'querySelector("figcaption code")' in page
    labels = re.findall(r'<svg role="img" aria-label="([^"]+)"', page)
    assert [NOTE in label for label in labels] == [j in REUSED_CAPTIONS for j in range(8)]
    assert f"8. {REUSED_CAPTIONS[7]}" in repr(player)


@needs_dot
def test_the_players_reused_step_draws_the_dotted_outline(worked_example):
    *_, trace = worked_example
    pages = StepThrough(trace, feed={"v1": 0.5}).pages
    for step, page in enumerate(pages):
        svg = page[page.index("<svg") : page.index("</svg>")]
        nodes = re.findall(r'<g class="node">(.*?)</g>', svg, re.S)
        yellow = [n for n in nodes if 'fill="#fde047"' in n]
        amber = [n for n in nodes if 'stroke="#b45309"' in n]
        if step in REUSED_CAPTIONS:
            assert yellow == [] and len(amber) == 1 and "stroke-dasharray" in amber[0], step
        else:
            assert len(yellow) == 1 and amber == [], step


# --- 2 · the error plot's alt text says its V -------------------------------------------------


def test_the_difference_errors_alt_text_gives_each_curves_least_error_and_its_eps():
    eps = np.logspace(-12, 0, 13)
    forward = np.abs(np.log10(eps) + 6) + 1e-9  # least at ε = 1e-6
    central = np.abs(np.log10(eps) + 4) / 10 + 1e-12  # least at ε = 1e-4
    text = figure_description(plot_difference_errors(eps, {"forward": forward,
                                                           "central": central}))  # fmt: skip
    assert text.startswith(
        "Figure: absolute error against ε, from the smallest ε to the largest: "
        "forward difference: falls from 6 at ε = 1e-12 to its least, 1e-09 at ε = 1e-06, then "
        "rises to 6 at ε = 1; central difference: falls from 0.8 at ε = 1e-12 to its least, "
        "1e-12 at ε = 0.0001, then rises to 0.4 at ε = 1; a plot titled “Truncation error"
    )
    shuffled = np.random.default_rng(0).permutation(eps.size)  # ε in any order: the same text
    again = plot_difference_errors(eps[shuffled], {"forward": forward[shuffled],
                                                   "central": central[shuffled]})  # fmt: skip
    assert figure_description(again) == text


def test_the_difference_errors_alt_text_of_the_lecture_curve_is_a_v():
    errors = cl.gradcheck.difference_errors(np.sin, np.cos(1.0), 1.0, np.logspace(-15, -1, 57))
    text = figure_description(plot_difference_errors(np.logspace(-15, -1, 57), errors))
    for name, err in errors.items():
        k = int(np.argmin(err))
        least = f"{err[k]:.3g} at ε = {np.logspace(-15, -1, 57)[k]:.3g}"
        assert f"{name} difference: falls from " in text and f"to its least, {least}, then" in text


@pytest.mark.parametrize(
    "errors, said",
    [
        ([1e-3, 1e-2, 1e-1],
         "least at the smallest ε, 0.001 at ε = 0.001, then rises to 0.1 at ε = 0.1"),
        ([1e-1, 1e-2, 1e-3],
         "falls from 0.1 at ε = 0.001 to its least at the largest ε, 0.001 at ε = 0.1"),
        ([np.nan, 1e-2, 1e-1],  # an error matplotlib does not draw is not said either
         "least at the smallest ε, 0.01 at ε = 0.01, then rises to 0.1 at ε = 0.1"),
        ([np.nan] * 3, "no finite error"),
    ],
)  # fmt: skip
def test_the_difference_errors_alt_text_of_curves_without_a_v(errors, said):
    eps = [1e-3, 1e-2, 1e-1]
    fig = plot_difference_errors(eps, {"forward": np.array(errors), "central": np.ones(3)})
    assert f"forward difference: {said};" in figure_description(fig)


# --- 3 · every graph picture is named, not "%3" ------------------------------------------------


def _svg_title(svg: str) -> str:
    document = xml.dom.minidom.parseString(svg.encode())  # still well-formed XML
    groups = document.getElementsByTagName("g")
    group = next(g for g in groups if g.getAttribute("class") == "graph")
    title = group.getElementsByTagName("title")[0]
    return title.firstChild.data if title.firstChild else ""


@needs_dot
def test_draw_graph_and_draw_step_name_their_svg(worked_example):
    v1, v4, dv1, trace = worked_example
    fig = draw_graph(v4, {v1: 0.5}, backward=dv1)
    svg = fig.svg()
    assert _svg_title(svg) == "computational graph of v4" and "%3" not in svg
    assert fig.source.startswith("digraph {")  # the DOT text is as it was
    assert _svg_title(draw_graph([v4, dv1], labels={dv1: "dy/dv1"}).svg()) == (
        "computational graph of v4, dy/dv1"
    )
    titled = draw_graph(v4, title='f -- "a" <b> & c').svg()
    assert _svg_title(titled) == 'f -- "a" <b> & c'
    step = draw_step(trace, 4).svg()
    assert _svg_title(step) == "gradient(out), step 5 of 8" and "%3" not in step
    assert draw_step(trace, 4).source.startswith("digraph {")
    assert fig.html().count("<title>computational graph of v4</title>") == 1


@needs_dot
def test_each_players_picture_is_named_after_its_step(worked_example):
    *_, trace = worked_example
    pages = StepThrough(trace, feed={"v1": 0.5}).pages
    for step, page in enumerate(pages):
        svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
        assert _svg_title(svg) == f"gradient(out), step {step + 1} of 8"
        assert "%3" not in page


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_in_chromium_the_slider_and_status_line_say_a_step_reused(worked_example, tmp_path):
    """What a screen reader hears of step 4 (the slider's value, the status line after
    "next") says it built no node; the picture's tooltip names the step, not "%3"."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    *_, trace = worked_example
    player = StepThrough(trace, feed={"v1": 0.5})
    page_file = tmp_path / "player.html"
    head = '<!doctype html><html><head><meta charset="utf-8"><title>p</title></head>'
    page_file.write_text(f"{head}<body>{player.html()}</body></html>", encoding="utf-8")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                       else r.abort())  # fmt: skip
            page.goto(page_file.as_uri())
            for _ in range(3):
                page.get_by_role("button", name="next step").click()
            said = f"step 4 of 8: {REUSED_CAPTIONS[3]}"
            assert page.get_by_role("status").text_content() == said
            assert page.get_by_role("slider", name="step").get_attribute("aria-valuetext") == said
            shown = page.locator("figure.cl-step").nth(3)
            assert (
                shown.get_by_role("img")
                .get_attribute("aria-label")
                .endswith("— reused: no new node (v̄3 is the node v̄(3→4))")
            )
            title = shown.locator("svg > g > title").first.text_content()
            assert title == "gradient(out), step 4 of 8"
        finally:
            browser.close()
