"""Driving Debian's chromium with Playwright in the console's browser tests: the executable, its flags, `Watched`
(a browser context whose pages' JavaScript errors, console errors and dialogs are recorded) and `sign_in`.
Importing it skips the module when Playwright or chromium is missing."""
from __future__ import annotations

import os
import shutil

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip("Debian's chromium is not installed (apt-get install chromium; scripts/bootstrap.sh does it as root)",
                allow_module_level=True)

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Watched:
    """Opens pages in one browser context and records their JavaScript errors, console errors and dialogs."""

    def __init__(self, browser, base_url: str):
        self.context = browser.new_context(base_url=base_url)
        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.expected_statuses: set[int] = set()

    def page(self):
        page = self.context.new_page()
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        page.on("console", self._console)

        def on_dialog(dialog) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        return page

    def _console(self, message) -> None:
        if message.type != "error":
            return
        text = message.text
        # chromium logs a document answered with an error status; a test that asks for one says so
        if any(f"status of {status}" in text for status in self.expected_statuses):
            return
        self.problems.append(f"console error: {text}")

    def close(self) -> None:
        self.context.close()


def sign_in(w: Watched, token: str):
    page = w.page()
    page.goto("/console/login")
    page.fill("#token", token)
    with page.expect_navigation():
        page.click("button[type=submit]")
    return page
