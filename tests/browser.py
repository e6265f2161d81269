"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) through selenium, for console tests.

Each driver gets a fresh profile directory and flags that keep Chromium off the network (no background
networking, component updates or sync). Screenshots of the pages a test visits go to
``test-artifacts/console/`` (gitignored), kept after the run for a person to look at.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.prerequisites import require

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "console"
CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"


def require_chromium() -> None:
    require(
        shutil.which(CHROMIUM) is not None and shutil.which(DRIVER) is not None,
        "chromium and chromium-driver (Debian packages)",
    )


@contextmanager
def chromium() -> Iterator[object]:
    require_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="strom-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def click_and_wait(driver: object, element: object, timeout_s: float = 30) -> None:
    """Click something that loads a new page (a link, a form's button) and wait until the new page is
    there: the old page's root element goes stale once the browser has replaced it."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]

    def replaced(_: object) -> bool:
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            # ChromeDriver asked about a node while the old document was being torn down answers this
            # instead of "stale element": the same fact, that the old page is gone.
            if "does not belong to the document" in str(exc.msg):
                return True
            raise
        return False

    element.click()  # type: ignore[attr-defined]
    WebDriverWait(driver, timeout_s).until(replaced)  # type: ignore[type-var]


def screenshot(driver: object, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path
