"""Regenerate docs/console.png: the console of a stalled computation on two processes, as
headless Chromium shows it. ``.venv/bin/python docs/console_screenshot.py`` from the
repository's root (needs graphviz, chromium and chromium-driver, as the browser tests do)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.console.test_page import _browser_or_skip, _text, _until  # noqa: E402
from tests.support.console import watched  # noqa: E402


def main() -> None:
    browser = _browser_or_skip()
    browser.set_window_size(1360, 860)
    try:
        with tempfile.TemporaryDirectory() as tmp, watched("stall", Path(tmp), processes=2) as run:
            browser.get(run.url)
            _until(lambda: _text(browser, "#stall-text"), 20, "the stall")
            time.sleep(1.5)  # one more sample: CPU and rates filled in
            out = ROOT / "docs" / "console.png"
            browser.save_screenshot(str(out))
            print(f"wrote {out} ({out.stat().st_size // 1024} KiB)")
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
