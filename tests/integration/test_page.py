"""The gateway's page in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``, which
``make test`` installs) driven by Selenium, over the shared server's gateway (tests/integration/conftest.py).

The browser resolves no host but loopback, so the page must work offline. Each widget is run as a person would:
pick the model, fill its fields, press its button; what it shows must be what the SDK answers for the same input.
"""

from __future__ import annotations

import json
import math
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from page_helpers import WAIT, browser_errors, open_page, page_origin, run_widget

from tritonhf import Client
from tritonhf.bootstrap import Stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _bars(result: Any) -> list[tuple[str, str]]:
    from selenium.webdriver.common.by import By

    return [(bar.find_element(By.CLASS_NAME, "label").text, bar.find_element(By.CLASS_NAME, "score").text)
            for bar in result.find_elements(By.CLASS_NAME, "bar")]  # fmt: skip


def test_get_root_is_the_page_for_a_browser_and_a_404_for_an_api_client(served_stack: Stack) -> None:
    origin = page_origin(served_stack)
    page = urllib.request.Request(origin + "/", headers={"Accept": "text/html,application/xhtml+xml"})
    with urllib.request.urlopen(page, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/html") and b"/ui/page.js" in response.read()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(origin + "/", timeout=30)
    assert refused.value.code == 404 and "/docs" in json.loads(refused.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(origin + "/ui/secrets.txt", timeout=30)
    assert missing.value.code == 404


def test_the_page_lists_the_served_models_and_the_server_state_from_loopback_alone(
    served_stack: Stack, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, served_stack)
    with Client(served_stack.server.grpc_url) as sdk:
        models = sdk.models()
    listed = {b.get_attribute("data-model") for b in browser.find_elements(By.CSS_SELECTOR, "#models button")}
    assert listed == {m.name for m in models if not m.name.endswith(".onnx_part")}
    button = browser.find_element(By.CSS_SELECTOR, '#models button[data-model="writer"]')
    assert "text-generation" in button.text and "engine: transformers" in button.text
    # the server's state: a row per model, counters from Triton and the templates' own figures (two readings)
    WebDriverWait(browser, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#server-rows svg.spark"))
    row = browser.find_element(By.CSS_SELECTOR, '#server-rows tr[data-model="writer"]')
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[0].isdigit() and " / " in cells[5], cells  # requests so far; running / waiting sequences
    assert browser.find_element(By.ID, "server-note").text == "", "the gateway was given Triton's metrics"
    origin = page_origin(served_stack)
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(origin) for url in loaded), loaded
    assert browser_errors(browser) == []


def test_each_widget_shows_what_the_sdk_answers(
    served_stack: Stack, browser: Any, tiny: dict[str, Path], tmp_path: Path
) -> None:
    """Every task's widget, against the SDK's answer for the same input; each shows the curl line and the SDK call
    of its request."""
    from selenium.webdriver.common.by import By
    from transformers import AutoTokenizer

    from harness.audio import encode as encode_audio
    from harness.audio import sound
    from harness.images import encode as encode_image
    from harness.images import picture

    open_page(browser, served_stack)
    text = "I really enjoyed this film in London."
    image = tmp_path / "picture.png"
    image.write_bytes(encode_image(picture(random.Random(5), 40, 30), "PNG"))
    speech = tmp_path / "speech.flac"
    speech.write_bytes(encode_audio(sound(random.Random(3), 2.0, 16000, 1), 16000, "FLAC"))
    masked = f"Paris is the {AutoTokenizer.from_pretrained(tiny['masked-lm']).mask_token} of France."
    sentences = ["A man is eating food.", "A man eats bread.", "The girl carries a baby."]
    query, documents = "capital of France", ["Paris is the capital of France.", "Berlin is in Germany."]
    chat = [{"role": "user", "content": "Hello there"}]
    with Client(served_stack.server.grpc_url) as sdk:
        # widgets that show scored labels as bars: (model, fields, the SDK's (label, score) pairs)
        bars: list[tuple[str, dict[str, str | Path], Callable[[], list[tuple[str, float]]]]] = [
            ("sentiment", {"text": text}, lambda: [(c.label, c.score) for c in sdk.classify(text, model="sentiment",
                                                                                               top_k=5)]),
            ("filler", {"text": masked}, lambda: [(c.token, c.score) for c in sdk.fill_mask(masked, model="filler")]),
            ("zeroshot", {"text": text}, lambda: _pairs(sdk.zero_shot(text, model="zeroshot"))),
            ("reranker", {"query": query, "documents": "\n".join(documents)},
             lambda: [(documents[r.index], r.score) for r in sdk.rerank(query, documents, model="reranker")]),
            ("vit", {"image": image}, lambda: [(c.label, c.score) for c in sdk.classify_images(str(image), model="vit",
                                                                                                top_k=5)]),
            ("clip", {"image": image}, lambda: _pairs(sdk.zero_shot_images(str(image), model="clip"))),
        ]  # fmt: skip
        for model, values, expected in bars:
            assert _bars(run_widget(browser, model, values)) == [(label, f"{score:.3f}") for label, score in expected()]
            _check_code(browser, served_stack, model)
        # widgets that show a text: (model, fields, the class of the element that holds it, the SDK's text)
        texts: list[tuple[str, dict[str, str | Path], str, Callable[[], str]]] = [
            ("summarizer", {"text": text}, "answer", lambda: sdk.summarize(text, model="summarizer")),
            ("writer", {"message": chat[0]["content"]}, "assistant", lambda: sdk.chat(chat, model="writer",
                                                                                      temperature=0)),
            ("asr-ct2", {"audio": speech}, "transcript-text",
             lambda: sdk.transcribe(speech.read_bytes(), model="asr-ct2", timestamps=True).text),
        ]  # fmt: skip
        for model, values, kind, wanted in texts:
            shown = run_widget(browser, model, values).find_element(By.CLASS_NAME, kind).get_attribute("textContent")
            assert shown == wanted(), model
            _check_code(browser, served_stack, model)
        result = run_widget(browser, "ner", {"text": text})
        shown = [item.text for item in result.find_elements(By.CLASS_NAME, "entity")]
        assert shown == [f"{e.word}: {e.entity_group} ({e.score:.3f})" for e in sdk.ner(text, model="ner")]
        result = run_widget(browser, "reader", {"question": "Where?", "context": text})
        found = sdk.answer("Where?", text, model="reader")
        assert result.find_element(By.CLASS_NAME, "found").text == f"{found.text} ({found.score:.3f})"
        mark = result.find_element(By.TAG_NAME, "mark")
        assert mark.get_attribute("title") == "answer" and text[found.start : found.end] in mark.text
        result = run_widget(browser, "minilm", {"sentences": "\n".join(sentences)})
        shown = [float(cell.text) for cell in result.find_elements(By.CLASS_NAME, "similarity")]
        assert shown == pytest.approx(_cosines(sdk.embed(sentences, model="minilm")), abs=1.5e-3)
        tried = [*(b[0] for b in bars), *(t[0] for t in texts), "ner", "reader", "minilm"]
        tasks = {m.task for m in sdk.models() if m.name in tried}
    assert len(tasks) == 12, tasks  # every task the gallery serves has its widget
    assert browser_errors(browser) == []


def test_the_microphone_records_a_wav_that_is_transcribed_as_the_sdk_transcribes_it(
    served_stack: Stack, browser: Any
) -> None:
    """Chromium's fake microphone (a tone): the widget records it to 16-bit mono WAV in the page, puts it in the
    file field, and the transcript shown is the SDK's for those same bytes."""
    import base64

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    open_page(browser, served_stack)
    browser.find_element(By.CSS_SELECTOR, '#models button[data-model="asr-ct2"]').click()
    record = browser.find_element(By.XPATH, "//button[text()='Record from the microphone']")
    record.click()
    WebDriverWait(browser, WAIT).until(lambda d: record.text == "Stop recording")
    time.sleep(2)
    record.click()
    WebDriverWait(browser, WAIT).until(lambda d: record.text == "Record from the microphone")
    recorded = browser.execute_async_script(
        """const done = arguments[arguments.length - 1];
        const file = document.getElementById("field-audio").files[0];
        const reader = new FileReader();
        reader.onload = () => done([file.name, file.type, String(reader.result).split(",")[1]]);
        reader.readAsDataURL(file);"""
    )
    name, kind, data = recorded[0], recorded[1], base64.b64decode(recorded[2])
    assert (name, kind, data[:4], data[8:16]) == ("recording.wav", "audio/wav", b"RIFF", b"WAVEfmt ")
    assert len(data) > 44 + 16000, "over a second of 16-bit samples"
    browser.find_element(By.CSS_SELECTOR, "#widget-form button[type=submit]").click()
    result = browser.find_element(By.ID, "result")
    WebDriverWait(browser, WAIT).until(lambda d: result.get_attribute("data-state"))
    assert result.get_attribute("data-state") == "done", result.text
    with Client(served_stack.server.grpc_url) as sdk:
        expected = sdk.transcribe(data, model="asr-ct2", timestamps=True).text
    assert result.find_element(By.CLASS_NAME, "transcript-text").get_attribute("textContent") == expected
    assert browser_errors(browser) == []


def _check_code(driver: Any, stack: Stack, model: str) -> None:
    """The widget shows its request as a curl line to this gateway and as an SDK call naming the model."""
    from selenium.webdriver.common.by import By

    curl = driver.find_element(By.ID, "curl").get_attribute("textContent")
    code = driver.find_element(By.ID, "sdk").get_attribute("textContent")
    assert curl.startswith(f"curl -s {page_origin(stack)}/") and f'model="{model}"' in code, (curl, code)


def _pairs(found: Any) -> list[tuple[str, float]]:
    return list(zip(found.labels, found.scores))


def _cosines(vectors: Any) -> list[float]:
    rows = [[float(x) for x in row] for row in vectors]
    norms = [math.sqrt(sum(x * x for x in row)) for row in rows]
    return [sum(x * y for x, y in zip(a, b)) / (na * nb) for a, na in zip(rows, norms) for b, nb in zip(rows, norms)]
