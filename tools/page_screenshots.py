"""Write the gateway page's screenshots in docs/ from a real run: a server in a temporary workspace with the two
models registry packages carry (all-MiniLM-L6-v2, SmolLM2-135M-Instruct), its gateway, and headless Chromium
(``make packages``) trying each model as a person would.

    python tools/page_screenshots.py        # writes docs/page-embeddings.png and docs/page-chat.png
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import browser  # noqa: E402  (the checkout's harness, beside this folder)
from tritonhf.bootstrap import Gateway, Server, Stack, Workspace, bootstrap  # noqa: E402
from tritonhf.demo import offline_models  # noqa: E402
from tritonhf.gallery import AddRequest, add_model  # noqa: E402

WAIT = 120


def _try(driver: Any, model: str, fields: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.CSS_SELECTOR, f'#models button[data-model="{model}"]').click()
    for name, value in fields.items():
        field = driver.find_element(By.ID, f"field-{name}")
        field.clear()
        field.send_keys(value)
    driver.find_element(By.CSS_SELECTOR, "#widget-form button[type=submit]").click()
    result = driver.find_element(By.ID, "result")
    WebDriverWait(driver, WAIT).until(lambda d: result.get_attribute("data-state"))
    if result.get_attribute("data-state") != "done":
        raise SystemExit(f"{model}: {result.text}")
    driver.execute_script("document.getElementById('code').open = true")
    time.sleep(4.5)  # two readings of the server's state: its rates and plots drawn


def main() -> None:
    if not browser.installed():
        raise SystemExit("Debian's chromium and chromium-driver are needed: make packages (as root).")
    real = {model.name: model.source for model in offline_models()}
    with tempfile.TemporaryDirectory() as folder:
        workspace = Workspace(Path(folder))
        bootstrap(workspace)
        workspace.create_folders()
        repo = workspace.model_repository
        add_model(AddRequest("feature-extraction", real["minilm-embed"], repo, name="minilm"))
        add_model(AddRequest("text-generation", real["smollm2-chat"], repo, name="smollm2"))
        server = Server(workspace, http_port="auto", grpc_port="auto", metrics_port="auto", startup_timeout=600)
        with Stack(server, gateway=Gateway(), supervise=False) as stack:
            assert stack.state is not None
            driver = browser.chromium(1400, 2000)
            try:
                driver.get(stack.state.gateway_url.removesuffix("/v1") + "/")
                time.sleep(1)
                _try(driver, "minilm", {})
                driver.save_screenshot(str(ROOT / "docs" / "page-embeddings.png"))
                _try(driver, "smollm2", {"message": "Name three rivers in Europe.", "max_tokens": "48"})
                driver.save_screenshot(str(ROOT / "docs" / "page-chat.png"))
            finally:
                driver.quit()
    print("wrote docs/page-embeddings.png and docs/page-chat.png")


if __name__ == "__main__":
    main()
