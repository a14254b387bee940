"""A real browser: JupyterLab on 127.0.0.1, Chromium driven by Playwright.

Opens notebook 03, runs every cell through the UI, drives the ``StepThrough`` player (every
step by the slider, previous/next, play and pause) and checks that no cell failed. Needs
Debian's ``chromium`` (``make test`` installs it when run as root) and Playwright's Python
package (never ``playwright install``: it would download a browser).
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
from browser_tools import check_player, needs_chromium, offline_page

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(__file__).parent / "artifacts"
NOTEBOOK = "03_reverse_mode.ipynb"
TOKEN = secrets.token_hex(24)  # per run, and passed in the environment (not visible in ps)

pytestmark = needs_chromium


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
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{lab}/lab/tree/{NOTEBOOK}?token={TOKEN}"
    viewport = {"width": 1400, "height": 1000}
    with offline_page(url, allowed=lab, viewport=viewport) as (page, blocked, _):
        try:
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
            page.wait_for_selector(
                ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000
            )
            player = page.locator(".cl-player").filter(has=page.get_by_role("slider")).first
            pictures = check_player(page, player, steps=8, interval_ms=1500)
            assert "v̄(3→4)" in pictures[2] and "v̄1" in pictures[7]
            errors = page.locator("[data-mime-type='application/vnd.jupyter.stderr']")
            assert errors.count() == 0, errors.first.inner_text()
            assert blocked == [], f"JupyterLab fetched from the network: {blocked}"
            player.scroll_into_view_if_needed()
            player.screenshot(path=str(ARTIFACTS / "step_through.png"))
            page.screenshot(path=str(ARTIFACTS / "lab.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            raise
