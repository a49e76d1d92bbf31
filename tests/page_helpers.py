"""What the tests that drive the gateway's page in a real browser share: where the page is, and a widget run as a
person would (the browser, headless Chromium driven by Selenium, is tests/integration/conftest.py's fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonhf.bootstrap import Stack

WAIT = 60  # seconds a widget may take (a model's first request on a loaded machine)


def page_origin(stack: Stack) -> str:
    assert stack.state is not None
    return stack.state.gateway_url.removesuffix("/v1")


def open_page(driver: Any, stack: Stack) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(page_origin(stack) + "/")
    WebDriverWait(driver, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#models button"))


def browser_errors(driver: Any) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def run_widget(driver: Any, model: str, values: dict[str, str | Path]) -> Any:
    """Pick ``model``, fill its widget's fields (a Path goes to a file field), press its button; the result."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.CSS_SELECTOR, f'#models button[data-model="{model}"]').click()
    for name, value in values.items():
        field = driver.find_element(By.ID, f"field-{name}")
        if isinstance(value, Path):
            field.send_keys(str(value))
        else:
            field.clear()
            field.send_keys(value)
    driver.find_element(By.CSS_SELECTOR, "#widget-form button[type=submit]").click()
    result = driver.find_element(By.ID, "result")
    WebDriverWait(driver, WAIT).until(lambda d: result.get_attribute("data-state"))
    assert result.get_attribute("data-state") == "done", result.text
    assert result.get_attribute("role") == "status"
    return result
