"""Notebook 03 exported to HTML (what a course site or nbviewer shows), opened in Chromium with
no kernel and no network: its ``StepThrough`` player shows every step.

The export is of the notebook as stored (``jupyter nbconvert --to html``, nothing executed).
The page's template asks for require.js and MathJax from the network; those requests are
aborted, and the player, one self-contained output, must not need them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from browser_tools import check_player, needs_chromium, offline_page

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_reverse_mode.ipynb"

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export")
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--output-dir",
               str(out), str(NOTEBOOK)]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    return out / NOTEBOOK.with_suffix(".html").name


def test_the_exported_player_shows_every_step_without_a_kernel(exported):
    text = exported.read_text(encoding="utf-8")
    assert "widget-view+json" not in text and "widget-state+json" not in text  # no widgets
    with offline_page(exported.as_uri()) as (page, blocked, errors):
        players = page.locator(".cl-player")
        assert players.count() == 1
        pictures = check_player(page, players.first, steps=8, interval_ms=1500)
        assert "v̄(3→4)" in pictures[2] and "v̄1" in pictures[7]
        assert all("require" in url or "mathjax" in url for url in blocked), blocked
        assert errors == []
