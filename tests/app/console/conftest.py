"""The console's browser tests share one chromium per module (tests/helpers/browser.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def browser():
    from tests.helpers.browser import CHROMIUM, CHROMIUM_ARGS, sync_api

    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()
