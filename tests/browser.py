"""Headless Chromium for the tests of `serve`'s page, its benchmark and the README's screenshot.

The browser is the distribution's (`chromium` with the `chromium-driver` of the same version;
.ci/run installs both), driven through Selenium's WebDriver client with both paths given, so
nothing is downloaded at run time. With ACCELOPT_BROWSER_REQUIRED=1 (CI) a missing browser is
a failure; otherwise the tests that need one skip, saying why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

REQUIRED_ENV = "ACCELOPT_BROWSER_REQUIRED"
BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVERS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
# A closed network, root, no display: no sandbox (root), no GPU, nothing the browser fetches on its own.
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1")
SCREENSHOTS = Path(__file__).resolve().parents[1] / ".ci" / "screenshots"


def _first(paths: tuple[str, ...], name: str) -> str | None:
    found = [p for p in paths if os.access(p, os.X_OK)]
    return found[0] if found else shutil.which(name)


def missing() -> str:
    """Why no browser can be driven here ("" when one can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (python -m pip install -e '.[dev]')"
    if not _first(BROWSERS, "chromium"):
        return "no chromium (apt-get install chromium chromium-driver)"
    if not _first(DRIVERS, "chromedriver"):
        return "no chromedriver (apt-get install chromium-driver)"
    return ""


def required() -> bool:
    return os.environ.get(REQUIRED_ENV, "") not in ("", "0")


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless Chromium WebDriver with a fresh profile, quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="accelopt-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = _first(BROWSERS, "chromium") or ""
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(_first(DRIVERS, "chromedriver") or ""), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: Any, script: str, timeout_s: float = 10.0, what: str = "") -> Any:
    """Run `script` (a JavaScript expression's body: `return ...`) until it gives a true value;
    that value. AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = driver.execute_script(script)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"the page did not show {what or script} within {timeout_s:.0f} s")
        time.sleep(0.1)


def until(check: Callable[[], Any], timeout_s: float = 10.0, what: str = "") -> Any:
    """`check()` repeated until true; that value (AssertionError naming `what` after the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'the condition'} did not hold within {timeout_s:.0f} s")
        time.sleep(0.1)
