"""The ``StepThrough`` player as a page in Chromium: no kernel, no network, no widget library.

The player is one HTML output (every step's picture and a small script), so a page holding it
is all a viewer needs; the notebooks' HTML export is tested in ``test_export.py``.
"""

from __future__ import annotations

import pytest
from browser_tools import check_player, needs_chromium, offline_page, visible_steps

import course_lib as cl
from course_lib.viz import StepThrough

pytestmark = needs_chromium
INTERVAL_MS = 300


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    """A page with two players of the lecture's worked example, f = (exp(v1) + 1)·exp(v1)."""
    v1 = cl.variable("v1", shape=())
    v2 = cl.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    _, trace = cl.gradient_trace(v4, [v1])
    player = StepThrough(trace, feed={v1: 0.5}, interval_ms=INTERVAL_MS).html()
    path = tmp_path_factory.mktemp("player") / "player.html"
    path.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>player</title></head>'
        f"<body>{player}<hr>{player}</body></html>",
        encoding="utf-8",
    )
    return path


def test_every_step_is_reachable_offline_and_players_are_independent(page_file):
    with offline_page(page_file.as_uri()) as (page, blocked, errors):
        first, second = page.locator(".cl-player").all()
        pictures = check_player(page, first, 8, INTERVAL_MS)
        assert "v̄(3→4)" in pictures[2] and "v̄1" in pictures[7]
        assert visible_steps(second)[0].startswith("step 1 / 8")  # untouched
        assert blocked == [] and errors == []


def test_without_javascript_every_step_is_shown_in_order(page_file):
    with offline_page(page_file.as_uri(), java_script_enabled=False) as (page, _, _):
        player = page.locator(".cl-player").first
        captions = visible_steps(player)
        assert [c.split(" ")[1] for c in captions] == [str(i) for i in range(1, 9)]
        assert captions[3].endswith(  # v̄3 = e^0.5
            "i = 3: v̄3 = v̄(3→4) = 1.649 — reused: no new node (v̄3 is the node v̄(3→4))")
        assert player.get_by_role("slider").count() == 0  # no controls that do nothing
