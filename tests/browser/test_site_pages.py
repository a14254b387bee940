"""The course site in Chromium, served on 127.0.0.1 as a web server would (web fonts are not
loaded from file: URLs) with every other request refused: every page loads without a script
error or a failed request, the math is typeset by the site's own MathJax, and notebook 03's
player steps through its pictures at the page's full width."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from browser_tools import check_player, needs_chromium, offline_page

pytestmark = needs_chromium


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(built_site):
    """The site's base URL on a local HTTP server."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet,
                                                                     directory=str(built_site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def _open(served, path, **options):
    return offline_page(served + path, allowed=served, console=True, **options)


def _pages(site):
    notebooks = sorted((site / "notebooks").glob("*.html"))
    return ["README.html", *(f"notebooks/{p.name}" for p in notebooks)]


def test_every_page_loads_offline_without_an_error(built_site, served):
    for path in _pages(built_site):
        with _open(served, path) as (page, blocked, errors):
            page.wait_for_load_state("load")
            page.wait_for_timeout(300)
            assert blocked == [] and errors == [], path


@pytest.mark.parametrize("name, least", [("02_forward_mode", 20), ("09_llm_flops_memory", 5)])
def test_the_math_is_typeset_by_the_sites_own_mathjax(served, name, least):
    with _open(served, f"notebooks/{name}.html") as (page, blocked, errors):
        page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("MathJax.startup.promise")
        page.wait_for_function(f"document.querySelectorAll('mjx-container').length >= {least}",
                               timeout=30_000)  # fmt: skip
        assert page.locator("mjx-container [data-mjx-error], mjx-merror").count() == 0
        assert blocked == [] and errors == []


def test_the_player_steps_through_its_pictures_at_full_width(served):
    viewport = {"width": 1400, "height": 900}
    with _open(served, "notebooks/03_reverse_mode.html", viewport=viewport) as (
        page, blocked, errors,
    ):
        player = page.locator(".cl-player").first
        body = page.locator("div.body").bounding_box()
        assert player.bounding_box()["width"] >= 0.9 * body["width"] > 900
        pictures = check_player(page, player, steps=8, interval_ms=1500)
        assert "v̄(3→4)" in pictures[2] and "v̄1" in pictures[7]
        assert blocked == [] and errors == []
