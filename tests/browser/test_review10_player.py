"""Review 10 of the ``StepThrough`` player (course_lib/viz/player.py, player.js): what a screen
reader is told, a phone's width, an interval beyond a browser's timer, and highlights that
were colour only."""

from __future__ import annotations

import re

import pytest
from browser_tools import needs_chromium, offline_page, visible_steps

import course_lib as cl
from course_lib.viz import StepThrough
from course_lib.viz.steps import DONE


def in_chromium(test):
    """``test`` marked as the browser tests are (skipped without Chromium); this file's
    checks of the HTML alone run without it."""
    for mark in needs_chromium:
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def worked_trace():
    """The lecture's worked example, f = (exp(v1) + 1)·exp(v1): 8 steps."""
    v1 = cl.variable("v1", shape=())
    v2 = cl.exp(v1)
    v4 = v2 * (v2 + 1)
    return cl.gradient_trace(v4, [v1])[1], {v1: 0.5}


def _page(tmp_path, *players: str) -> str:
    path = tmp_path / "player.html"
    path.write_text(
        '<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" '
        'content="width=device-width"><title>player</title></head>'
        f"<body>{'<hr>'.join(players)}</body></html>",
        encoding="utf-8",
    )
    return path.as_uri()


@in_chromium
def test_the_slider_says_the_step_and_what_it_did_not_a_bare_number(worked_trace, tmp_path):
    """The slider had no aria-valuetext: a screen reader said "1", "2"... and nothing of
    the step shown."""
    player = StepThrough(*worked_trace)
    with offline_page(_page(tmp_path, player.html())) as (page, _, errors):
        slider = page.get_by_role("slider", name="step")
        assert slider.get_attribute("aria-valuetext") == f"step 1 of 8: {player.captions[0]}"
        slider.focus()
        page.keyboard.press("ArrowRight")
        assert slider.get_attribute("aria-valuetext") == f"step 2 of 8: {player.captions[1]}"
        assert errors == []


@in_chromium
def test_a_step_moved_to_is_announced_politely_and_playing_does_not_flood(worked_trace, tmp_path):
    """Nothing told a screen reader that previous / next / pause changed the picture."""
    player = StepThrough(*worked_trace, interval_ms=150)
    with offline_page(_page(tmp_path, player.html(), player.html())) as (page, _, errors):
        first, second = page.locator(".cl-player").all()
        status = first.get_by_role("status")
        assert status.count() == 1 and status.text_content() == ""
        first.get_by_role("button", name="next step").click()
        assert status.text_content() == f"step 2 of 8: {player.captions[1]}"
        assert second.get_by_role("status").text_content() == ""  # the other player is quiet
        page.evaluate(
            "s => { window.said = []; new MutationObserver(() => window.said.push(s.textContent))"
            ".observe(s, {childList: true, characterData: true, subtree: true}); }",
            status.element_handle(),
        )
        play = first.get_by_role("button", name="play")
        play.click()
        play.and_(page.locator('[aria-pressed="false"]')).wait_for(timeout=10_000)  # at the end
        said = page.evaluate("window.said")
        assert said == [f"step 8 of 8: {player.captions[7]}"]  # once, where it stopped
        assert errors == []


@in_chromium
def test_an_interval_beyond_a_browsers_longest_timer_waits_instead_of_racing(
    worked_trace, tmp_path
):
    """3e9 ms wrapped around the browser's 32-bit timer to 0: play raced to the last step."""
    player = StepThrough(*worked_trace, interval_ms=3e9)
    with offline_page(_page(tmp_path, player.html())) as (page, _, errors):
        page.get_by_role("button", name="play").click()
        page.wait_for_timeout(500)
        assert visible_steps(page.locator(".cl-player"))[0].startswith("step 1 / 8")
        assert errors == []


@in_chromium
def test_a_player_removed_while_playing_stops_its_timer(worked_trace, tmp_path):
    """A cell run again clears its output: the old player's timer kept stepping its
    detached pictures to the end."""
    player = StepThrough(*worked_trace, interval_ms=100)
    with offline_page(_page(tmp_path, player.html())) as (page, _, errors):
        page.get_by_role("button", name="play").click()
        step = page.evaluate(
            """async () => {
                const root = document.querySelector(".cl-player");
                root.remove();
                await new Promise(done => setTimeout(done, 600));
                const frames = [...root.querySelectorAll("figure.cl-step")];
                return frames.findIndex(f => f.style.display !== "none") + 1;
            }"""
        )
        assert step <= 2 and errors == []


@in_chromium
def test_a_phone_width_page_does_not_scroll_sideways(worked_trace, tmp_path):
    """At 320 px (WCAG's reflow width) the panels kept their full width (flex:none): the
    pseudo-code's longest line pushed the page 22 px wider than the screen."""
    player = StepThrough(*worked_trace)
    phone = {"width": 320, "height": 640}
    with offline_page(_page(tmp_path, player.html()), viewport=phone) as (page, _, errors):
        assert page.evaluate("document.documentElement.scrollWidth") == 320
        svg = page.locator(".cl-player svg").first.bounding_box()
        assert svg["width"] <= 320 - 16  # the picture scales to the body's width
        assert errors == []


def test_highlights_are_marked_not_only_coloured(worked_trace):
    """The pseudo-code's running lines and node i's row in node_to_grad were told by a
    background colour alone: nothing for a screen reader, nothing where styles are stripped."""
    pages = StepThrough(*worked_trace).pages
    marked = re.findall(r"<mark [^>]*>(.*?)</mark>", pages[0])
    assert marked == ["    for i in reverse_topo_order(out):", "        v̄i = sum(node_to_grad[i])"]
    assert len(re.findall("<mark ", pages[1])) == 3  # a partial adjoint's three lines
    assert re.search(r'<tr aria-current="true"><td [^>]*>v3:</td>', pages[4])
    assert pages[4].count("aria-current") == 1


def _luminance(colour: str) -> float:
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_a_finished_nodes_grey_text_and_border_keep_wcag_aa_contrast():
    """The finished nodes' 11 pt labels were #6b7280 on #e5e7eb, 3.9:1 (AA asks 4.5:1), and
    their border #9ca3af on the white page 2.5:1 (3:1 for a graphic's parts)."""
    assert _contrast("#000000", "#ffffff") == pytest.approx(21)  # the formula, by its extremes
    assert _contrast(DONE["fontcolor"], DONE["fillcolor"]) >= 4.5
    assert _contrast(DONE["color"], "#ffffff") >= 3
