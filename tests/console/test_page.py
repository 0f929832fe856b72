"""The console's page in a real browser: headless Chromium (the system's, driven through its
WebDriver by selenium; nothing is downloaded) loads the page of a running computation."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.console import watched

pytestmark = pytest.mark.slow

STAGES = ["numbers", "key", "count", "done"]


def _browser_or_skip() -> Any:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("no headless browser here: install Debian's chromium and chromium-driver (.ci/run does)")
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot is not installed, so the page lists the stages instead of drawing them")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = _browser_or_skip()
    try:
        yield driver
    finally:
        driver.quit()


def _until(found: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = found()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"the page did not show {what} within {seconds} s")
        time.sleep(0.1)


def _text(browser: Any, css: str) -> str:
    """The text of the first element ``css`` selects, read in one step (the page replaces its
    tables on every update, so a handle to an element goes stale)."""
    return browser.execute_script(  # type: ignore[no-any-return]
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';", css
    )


def _classes(browser: Any, css: str) -> str:
    return browser.execute_script(  # type: ignore[no-any-return]
        "const e = document.querySelector(arguments[0]); return e ? e.getAttribute('class') : '';", css
    )


@pytest.mark.parametrize("processes", [1, 4])
def test_the_page_draws_every_stage_and_shows_a_rate_change(browser: Any, tmp_path: Path, processes: int) -> None:
    from selenium.webdriver.common.by import By

    with watched("rates", tmp_path, processes) as run:
        browser.get(run.url)
        nodes = _until(lambda: browser.find_elements(By.CSS_SELECTOR, "#graph g.node"), 15, "the graph")
        assert sorted(n.get_attribute("data-stage") for n in nodes) == sorted(STAGES)
        assert len(browser.find_elements(By.CSS_SELECTOR, "#graph g.edge")) == 3

        def rate() -> float:
            shown = _text(browser, "#stage-row-1 td:nth-child(2)")
            scale = {"k": 1e3, "M": 1e6}.get(shown[-1:], 1)
            try:
                return float(shown.rstrip("kM")) * scale
            except ValueError:
                return -1.0

        slow = _until(lambda: rate() if 0 < rate() < 20_000 else None, 15, "the slow phase's rate")
        # the first sample past the slow phase may straddle the change: wait for the fast rate
        fast = _until(lambda: rate() if rate() > 5 * slow else None, 20, "five times the slow phase's rate")
        assert fast > 5 * slow
        # the stage's box in the graph says the same as its row
        assert "/s →" in _text(browser, "#stage-1 text:last-of-type")
        assert f"{processes}/{processes} process(es) reporting" in _text(browser, "#summary")


@pytest.mark.parametrize("processes", [1, 4])
def test_the_page_explains_a_stall_naming_the_stage_and_time(browser: Any, tmp_path: Path, processes: int) -> None:
    from selenium.webdriver.common.by import By

    with watched("stall", tmp_path, processes) as run:
        browser.get(run.url)
        _until(lambda: browser.find_elements(By.CSS_SELECTOR, "#graph g.node"), 15, "the graph")
        text = _until(
            lambda: "at (3)" in _text(browser, "#stall-text") and _text(browser, "#stall-text"), 20, "the stall"
        )
        assert browser.find_element(By.ID, "stall").is_displayed()
        assert "notification at (3) for stage 'count'" in text
        assert "input 'numbers' is still open at epoch 3" in text
        assert _text(browser, "#status") == "stalled"
        # the graph points at them: the waiting stage and the input that holds it
        assert "waiting" in _classes(browser, "#stage-2")
        assert "stalled" in _classes(browser, "#stage-0")
        assert "stalled" not in _classes(browser, "#stage-1")
        shown = browser.execute_script("return window.stallShown;")
        if "at (3)" in shown.get("text", ""):  # the page's first stall was this one
            print(f"the page showed the stall {shown['at'] - shown['idleSince']:.2f} s after the scheduler went idle")
