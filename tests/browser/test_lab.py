"""A real browser: JupyterLab on 127.0.0.1, Chromium driven by Playwright.

Opens notebook 03, runs every cell through the UI, moves the step slider of the
``StepThrough`` player and checks that the rendered graph changes and no cell failed.
Needs Debian's ``chromium`` (``make test`` installs it when run as root) and Playwright's
Python package (never ``playwright install``: it would download a browser).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTEBOOK = "03_reverse_mode.ipynb"
TOKEN = secrets.token_hex(24)  # per run, and passed in the environment (not visible in ps)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on a free loopback port, serving a copy of notebook 03."""
    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, work / NOTEBOOK)
    config = tmp_path / "config"
    (config / "labconfig").mkdir(parents=True)
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": disabled})
    )
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_TOKEN": TOKEN,
    }
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.terminals_enabled=False", f"--ServerApp.root_dir={work}",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115  (closed below)
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for(f"{base}/api/status?token={TOKEN}", server, tmp_path / "lab.log")
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _wait_for(url: str, server: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_test_server_admits_only_this_run_and_has_no_terminals(lab):
    assert _status(f"{lab}/api/contents") == 403  # no token: another local user gets nothing
    assert _status(f"{lab}/api/contents?token=course-lib-browser-test") == 403  # the old one
    assert _status(f"{lab}/api/contents?token={TOKEN}") == 200
    assert _status(f"{lab}/api/terminals?token={TOKEN}") == 404


def test_step_through_in_jupyterlab(lab):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{lab}/lab/tree/{NOTEBOOK}?token={TOKEN}")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=90_000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_text("Run All Cells", exact=True).click()
            first_prompt = page.locator(".jp-CodeCell .jp-InputPrompt").first
            page.wait_for_function(
                "el => el.textContent.includes('[1]')",
                arg=first_prompt.element_handle(),
                timeout=60_000,
            )
            player = page.locator(".widget-vbox").filter(has=page.locator(".widget-slider")).first
            player.wait_for(timeout=120_000)
            picture = player.locator(".widget-html svg").first
            picture.wait_for(timeout=30_000)
            before = picture.inner_html()
            caption = player.locator(".widget-html").first
            handle = player.locator(".noUi-handle").first
            handle.focus()
            page.keyboard.press("ArrowRight")
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                "el => el.textContent.includes('step 3 / 8')",
                arg=caption.element_handle(),
                timeout=15_000,
            )
            after = player.locator(".widget-html svg").first.inner_html()
            assert after != before, "moving the slider did not change the rendered graph"
            assert "v̄(3→4)" in after
            player.get_by_role("button", name="next ▶").click()
            page.wait_for_function(
                "el => el.textContent.includes('step 4 / 8')",
                arg=caption.element_handle(),
                timeout=15_000,
            )
            page.wait_for_selector(
                ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000
            )
            errors = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
            assert errors.count() == 0, errors.first.inner_text()
            player.scroll_into_view_if_needed()
            player.screenshot(path=str(ARTIFACTS / "step_through.png"))
            page.screenshot(path=str(ARTIFACTS / "lab.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
