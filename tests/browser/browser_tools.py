"""What the browser tests share: Debian's Chromium, an offline page, and the player check.

Playwright drives the system's ``chromium`` (never ``playwright install``: it would download
a browser). Pages are kept offline: every request that is not for a local file is aborted
and recorded, so a test can say what a page tried to fetch.
"""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
needs_chromium = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"
    ),
]


@contextmanager
def offline_page(url: str, allowed: str = "file:", console: bool = False, **context_options):
    """A page of Debian's Chromium (headless) at ``url`` that fetches only what starts with
    ``allowed``; yields the page, the list of the URLs it was refused and the list of its
    script errors (with ``console``, its console's error messages too, a resource that failed
    to load among them). ``context_options`` go to ``browser.new_context`` (e.g. a viewport)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(**context_options).new_page()
            blocked = _keep_offline(page, allowed)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            if console:
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(url)
            yield page, blocked, errors
        finally:
            browser.close()


def _keep_offline(page, allowed: str) -> list[str]:
    """Abort every request of ``page`` whose URL does not start with ``allowed``; returns the
    list the aborted URLs are appended to."""
    blocked: list[str] = []

    def route(request_route):
        url = request_route.request.url
        if url.startswith(allowed) or url.startswith("data:"):
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    page.route("**/*", route)
    return blocked


def visible_steps(player) -> list[str]:
    """The captions of the player's step figures that are shown."""
    return [
        " ".join(f.locator("figcaption").text_content().split())
        for f in player.locator("figure.cl-step").all()
        if f.is_visible()
    ]


def shown_step(page, player, step: int, steps: int) -> str:
    """Wait until the player shows exactly step ``step`` of ``steps``; its picture's SVG."""
    player.locator("figure.cl-step").nth(step - 1).wait_for(state="visible", timeout=10_000)
    captions = visible_steps(player)
    assert len(captions) == 1, f"{len(captions)} steps shown at once: {captions}"
    assert captions[0].startswith(f"step {step} / {steps}"), captions[0]
    frame = player.locator("figure.cl-step").nth(step - 1)
    assert frame.locator("svg").count() == 1 and frame.locator("svg").is_visible()
    return frame.locator("svg").inner_html()


def check_player(page, player, steps: int, interval_ms: int) -> list[str]:
    """Drive a ``StepThrough`` player: the slider reaches every step (each showing its own
    picture), previous/next move by one and stop at the ends, play advances and pause
    stops it. Returns the pictures' SVG, one per step."""
    slider = player.get_by_role("slider", name="step")
    previous = player.get_by_role("button", name="previous step")
    following = player.get_by_role("button", name="next step")
    play = player.get_by_role("button", name="play")
    assert slider.get_attribute("max") == str(steps)
    player.scroll_into_view_if_needed()
    pictures = [shown_step(page, player, 1, steps)]
    slider.focus()
    for step in range(2, steps + 1):
        page.keyboard.press("ArrowRight")
        pictures.append(shown_step(page, player, step, steps))
    assert len(set(pictures)) == steps, "two steps show the same picture"
    following.click()
    shown_step(page, player, steps, steps)  # the last step stays
    previous.click()
    shown_step(page, player, steps - 1, steps)
    slider.focus()
    page.keyboard.press("Home")
    shown_step(page, player, 1, steps)
    previous.click()
    shown_step(page, player, 1, steps)  # the first step stays
    play.click()
    _wait_for(page, player, (2, steps - 1), playing=True)  # it moves on by itself
    play.click()  # pause
    paused = int(re.match(r"step (\d+)", visible_steps(player)[0]).group(1))
    page.wait_for_timeout(2 * interval_ms)
    shown_step(page, player, paused, steps)
    assert play.get_attribute("aria-pressed") == "false"
    play.click()
    _wait_for(page, player, (steps, steps), playing=False, timeout=steps * interval_ms + 5000)
    assert play.inner_text() == "▶ play"  # it stopped at the last step
    return pictures


def _wait_for(page, player, steps: tuple[int, int], playing: bool, timeout: float = 10_000):
    """Wait until the step shown (from 1) is within ``steps`` and the player is playing or
    not (polled every 50 ms: a step may be shown for a moment only)."""
    page.wait_for_function(
        """([el, low, high, playing]) => {
            const frames = [...el.querySelectorAll("figure.cl-step")];
            const step = frames.findIndex(f => f.style.display !== "none") + 1;
            const pressed = el.querySelector("[aria-pressed]").getAttribute("aria-pressed");
            return low <= step && step <= high && pressed === String(playing);
        }""",
        arg=[player.element_handle(), *steps, playing],
        timeout=timeout,
        polling=50,
    )
