"""Headless Chromium for the gateway's page: Debian's ``chromium`` and ``chromium-driver`` (``make packages``)
driven by Selenium, resolving no host but loopback (the page must need nothing from another), with a fake
microphone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
LOOPBACK_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


def installed() -> bool:
    return CHROMIUM.exists() and DRIVER.exists()


def chromium(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium session (Selenium's driver), its console kept (``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        LOOPBACK_ONLY,
        # a microphone that plays a tone, granted without asking: the speech widget's recorder
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
    ):
        options.add_argument(argument)  # fmt: skip
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(DRIVER)))
