"""One-line checks against a running server: classify, classify-image, transcribe, embed, ner, generate, models;
the demo."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tritonhf.bootstrap.layout import Workspace
from tritonhf.cli import _limits
from tritonhf.cli._console import RichProgress, console, friendly_errors, table
from tritonhf.errors import ModelNotReadyError
from tritonhf.sdk.client import Client

if TYPE_CHECKING:
    from tritonhf.loadgen import StreamsResult

UrlOption = Annotated[str | None, typer.Option("--url", help="Server URL (default: $TRITONHF_URL or `tritonhf up`'s).")]
ModelOption = Annotated[str | None, typer.Option("--model", "-m", help="Model name (default: the task's only model).")]


@friendly_errors
def classify_command(
    texts: list[str], url: UrlOption = None, model: ModelOption = None, top_k: int | None = None
) -> None:
    """Classify texts with the server's text-classification (or zero-shot) model."""
    with Client(url) as client:
        if top_k is None:
            for text, result in zip(texts, client.classify(texts, model=model)):
                console.print(f"{result.label}\t{result.score:.4f}\t{text}")
        else:
            for text, ranked in zip(texts, client.classify(texts, model=model, top_k=top_k)):
                console.print(text)
                for result in ranked:
                    console.print(f"  {result.label}\t{result.score:.4f}")


@friendly_errors
def classify_image_command(
    files: Annotated[list[Path], typer.Argument(help="Image files: JPEG, PNG, WebP, GIF or BMP.")],
    url: UrlOption = None,
    model: ModelOption = None,
    top_k: int | None = None,
    labels: Annotated[
        str | None, typer.Option(help="Comma-separated labels: rank them with an image-text model (CLIP, SigLIP).")
    ] = None,
) -> None:
    """Classify image files with the server's image-classification model, or rank --labels with its
    CLIP-style model (the server decodes the files)."""
    with Client(url) as client:
        if labels is not None:
            candidates = [label.strip() for label in labels.split(",") if label.strip()]
            for file, found in zip(files, client.zero_shot_images(list(files), labels=candidates, model=model)):
                console.print(str(file))
                for label, score in list(zip(found.labels, found.scores))[: top_k or len(found.labels)]:
                    console.print(f"  {label}\t{score:.4f}")
        elif top_k is None:
            for file, result in zip(files, client.classify_images(list(files), model=model)):
                console.print(f"{result.label}\t{result.score:.4f}\t{file}")
        else:
            for file, ranked in zip(files, client.classify_images(list(files), model=model, top_k=top_k)):
                console.print(str(file))
                for result in ranked:
                    console.print(f"  {result.label}\t{result.score:.4f}")


TRANSCRIPT_FORMATS = ("text", "json", "srt", "vtt")


@friendly_errors
def transcribe_command(
    files: Annotated[list[Path], typer.Argument(help="Audio files: WAV, FLAC, OGG or MP3, any rate and channels.")],
    url: UrlOption = None,
    model: ModelOption = None,
    language: Annotated[str | None, typer.Option(help="Spoken language code (default: detected).")] = None,
    translate: Annotated[bool, typer.Option(help="Translate into English instead of transcribing.")] = False,
    timestamps: Annotated[bool, typer.Option(help="Timed segments (srt and vtt always ask for them).")] = False,
    output_format: Annotated[str, typer.Option("--format", help=f"Output: {', '.join(TRANSCRIPT_FORMATS)}.")] = "text",
    stream: Annotated[
        bool, typer.Option(help="Print each part as it is read (one file, text format; a model added with --stream).")
    ] = False,
) -> None:
    """Transcribe (or translate) audio files with the server's speech model (Whisper); the server decodes them."""
    from tritonhf.sdk import subtitles

    if output_format not in TRANSCRIPT_FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(TRANSCRIPT_FORMATS)}, not {output_format!r}.")
    if stream and (len(files) != 1 or output_format != "text"):
        raise typer.BadParameter("--stream prints one file's parts as text: give one file and no --format.")
    timed = timestamps or output_format in ("srt", "vtt")
    if stream:
        with Client(url) as client, client.transcribe(
            files[0], model=model, language=language, task="translate" if translate else "transcribe",
            timestamps=timed, stream=True,
        ) as parts:  # fmt: skip
            for part in parts:
                if timed:
                    for segment in part.segments:
                        print(f"[{segment.start:8.2f} -> {segment.end:8.2f}] {segment.text}", flush=True)
                else:
                    print(part.text, end="", flush=True)
        if not timed:
            print()
        return
    with Client(url) as client:
        found = client.transcribe(
            list(files), model=model, language=language, task="translate" if translate else "transcribe",
            timestamps=timed,
        )  # fmt: skip
    for file, transcription in zip(files, found):
        if output_format == "json":
            print(json.dumps({"file": str(file), **asdict(transcription)}, ensure_ascii=False))
        elif output_format == "srt":
            print(subtitles.srt(transcription.segments))
        elif output_format == "vtt":
            print(subtitles.vtt(transcription.segments))
        elif timed:
            for segment in transcription.segments:
                print(f"[{segment.start:8.2f} -> {segment.end:8.2f}] {segment.text}")
        else:
            print(transcription.text if len(files) == 1 else f"{file}\t{transcription.text}")


@friendly_errors
def embed_command(texts: list[str], url: UrlOption = None, model: ModelOption = None) -> None:
    """Embed texts; prints each vector's size and the cosine similarity between the texts."""
    with Client(url) as client:
        vectors = client.embed(texts, model=model, normalize=True)
    view = table("", *[str(i + 1) for i in range(len(texts))], title=f"{vectors.shape[1]}-dim embeddings, cosine")
    for i, text in enumerate(texts):
        view.add_row(f"{i + 1}. {text}", *[f"{value:.3f}" for value in vectors @ vectors[i]])
    console.print(view)


@friendly_errors
def ner_command(texts: list[str], url: UrlOption = None, model: ModelOption = None) -> None:
    """Named entities of each text, as JSON lines."""
    with Client(url) as client:
        for entities in client.ner(texts, model=model):
            console.print(json.dumps([entity.__dict__ for entity in entities], ensure_ascii=False))


@friendly_errors
def generate_command(
    prompt: str,
    url: UrlOption = None,
    model: ModelOption = None,
    max_tokens: int = 64,
    temperature: float = 0.0,
    chat: Annotated[bool, typer.Option(help="Send the prompt as a chat message (instruct models).")] = True,
    json_schema: Annotated[
        Path | None,
        typer.Option(
            help="A JSON Schema file: the answer is held to it by the model's grammar (it parses when it finishes).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Stream generated text to the terminal as it arrives."""
    schema = _read_schema(json_schema) if json_schema is not None else None
    with Client(url) as client:
        if chat:
            messages = [{"role": "user", "content": prompt}]
            chunks = client.chat(messages, model=model, max_tokens=max_tokens, temperature=temperature, stream=True,
                                 response_format=schema)  # fmt: skip
        else:
            chunks = client.generate(prompt, model=model, max_tokens=max_tokens, temperature=temperature, stream=True,
                                     response_format=schema)  # fmt: skip
        for chunk in chunks:
            console.print(chunk, end="", soft_wrap=True, markup=False, highlight=False)
        if chunks.finish_reason == "length" and schema is not None:
            console.print("\n[yellow]max_tokens cut the answer before its JSON closed (raise --max-tokens).[/]")
    console.print()


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise typer.BadParameter(f"{path} is not JSON ({error}).", param_hint="--json-schema") from error
    if not isinstance(found, dict):
        raise typer.BadParameter(f"{path} holds a {type(found).__name__}, not a JSON Schema object.",
                                 param_hint="--json-schema")  # fmt: skip
    return found


@friendly_errors
def rerank_command(
    query: str,
    documents: list[str],
    url: UrlOption = None,
    model: ModelOption = None,
    top_n: Annotated[int | None, typer.Option(help="Show only the best N.")] = None,
) -> None:
    """Rank documents by relevance to a query (a cross-encoder), best first."""
    with Client(url) as client:
        for ranked in client.rerank(query, documents, model=model, top_n=top_n):
            console.print(f"{ranked.score:.4f}\t[{ranked.index}] {ranked.document}")


@friendly_errors
def answer_command(
    question: str,
    context: Annotated[str, typer.Option("--context", "-c", help="The text the answer is in.")],
    url: UrlOption = None,
    model: ModelOption = None,
    top_k: Annotated[int, typer.Option(help="How many answers.")] = 1,
) -> None:
    """Extract the answer to a question from a context (extractive QA), with character offsets."""
    with Client(url) as client:
        for found in client.answer(question, context, model=model, top_k=top_k):
            console.print(f"{found.score:.4f}\t[{found.start}:{found.end}] {found.text}")


@friendly_errors
def fill_mask_command(
    texts: list[str],
    url: UrlOption = None,
    model: ModelOption = None,
    top_k: Annotated[int, typer.Option(help="Candidates per text.")] = 5,
) -> None:
    """The best candidates for the mask token of each text (e.g. 'Paris is the [MASK] of France')."""
    with Client(url) as client:
        for text, candidates in zip(texts, client.fill_mask(texts, model=model, top_k=top_k)):
            console.print(text)
            for candidate in candidates:
                console.print(f"  {candidate.score:.4f}\t{candidate.token}")


@friendly_errors
def summarize_command(
    text: str,
    url: UrlOption = None,
    model: ModelOption = None,
    max_tokens: int = 64,
) -> None:
    """Stream a summary (or translation) of TEXT from a text2text model."""
    with Client(url) as client:
        for chunk in client.summarize(text, model=model, max_tokens=max_tokens, stream=True):
            console.print(chunk, end="", soft_wrap=True)
    console.print()


@friendly_errors
def openai_command(
    url: Annotated[
        str | None, typer.Option("--url", help="The Triton server (default: `tritonhf up`'s; gRPC preferred).")
    ] = None,
    host: Annotated[str, typer.Option(help="Where the gateway listens; beyond loopback a key is required.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Its port.")] = 9000,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            help="A file holding the key clients must send (Bearer); default: $TRITONHF_GATEWAY_KEY, "
            "else the workspace's run/api-key when bound beyond loopback."
        ),
    ] = None,
    payload_limit: _limits.PayloadLimit = _limits.DEFAULT_PAYLOAD_LIMIT,
    max_client_batch_size: _limits.MaxClientBatchSize = _limits.DEFAULT_MAX_CLIENT_BATCH_SIZE,
    max_concurrent_requests: _limits.MaxConcurrentRequests = _limits.DEFAULT_MAX_CONCURRENT_REQUESTS,
    max_batch_tokens: _limits.MaxBatchTokens = _limits.DEFAULT_MAX_BATCH_TOKENS,
    max_audio_bytes: _limits.MaxAudioBytes = _limits.DEFAULT_MAX_AUDIO_BYTES,
    allow_image_urls: _limits.AllowImageUrls = False,
    stored_responses: _limits.StoredResponses = _limits.DEFAULT_STORED_RESPONSES,
    stored_response_seconds: _limits.StoredResponseSeconds = _limits.DEFAULT_STORED_RESPONSE_SECONDS,
    repository: Annotated[
        Path | None,
        typer.Option(
            help="The served model repository, where the tokenizers are (/tokenize, --max-batch-tokens); "
            "default: the running server's, when on this machine."
        ),
    ] = None,
) -> None:
    """Serve OpenAI- and TEI-compatible routes (/v1/chat/completions, /v1/embeddings, /embed, /rerank ...)."""
    from tritonhf.bootstrap.gateway import (
        gateway_key_file,
        gateway_metrics_url,
        gateway_repository,
        gateway_url,
        require_gateway_packages,
    )
    from tritonhf.serve.launch import gateway_key, run_gateway
    from tritonhf.serve.limits import Limits

    require_gateway_packages()

    limits = Limits(
        payload_limit=payload_limit,
        max_client_batch_size=max_client_batch_size,
        max_concurrent_requests=max_concurrent_requests,
        max_batch_tokens=max_batch_tokens,
        max_audio_bytes=max_audio_bytes,
        stored_responses=stored_responses,
        stored_response_seconds=stored_response_seconds,
        allow_image_urls=allow_image_urls,
    )
    target = url or gateway_url(Workspace.at())
    key = gateway_key(api_key_file or gateway_key_file(Workspace.at(), host))
    console.print(f"gateway on http://{host}:{port}/v1 for {target}" + (" (Bearer key required)" if key else ""))
    metrics = gateway_metrics_url(Workspace.at()) if url is None else None  # the workspace's server's, not another's
    run_gateway(target, host, port, key, limits, repository or gateway_repository(Workspace.at()), metrics)


@friendly_errors
def models_command(url: UrlOption = None) -> None:
    """The models the server holds, with state and task."""
    with Client(url) as client:
        view = table("model", "version", "state", "task", "max batch")
        for info in client.models():
            view.add_row(info.name, info.version, info.state, info.task or "-", str(info.max_batch_size))
    console.print(view)


@friendly_errors
def load_command(
    models: Annotated[list[str], typer.Argument(help="Model names in the server's repository.")],
    url: Annotated[
        list[str] | None, typer.Option("--url", help="A server's loopback URL (repeat for each replica).")
    ] = None,
    unload: Annotated[bool, typer.Option(help="Unload instead of load.")] = False,
) -> None:
    """Load (or unload) models on one or more servers through their repository API.

    A model pushed to object storage after the servers started appears this way (or by itself
    within a poll when the servers run with --model-control poll).
    """
    from tritonhf._wire.settings import default_url
    from tritonhf.bootstrap.admin import Admin

    failed = []
    for address in url or [default_url()]:
        admin = Admin(address, timeout=120)
        try:
            for model in models:
                ok = admin.unload(model) if unload else admin.load(model)
                console.print(
                    f"{'[green]✓[/]' if ok else '[red]✗[/]'} {'unloaded' if unload else 'loaded'} {model} on {address}"
                )
                if not ok:
                    failed.append(f"{model} on {address}")
        finally:
            admin.close()
    if failed:
        raise ModelNotReadyError(
            f"Could not {'unload' if unload else 'load'}: {', '.join(failed)}. See the server log."
        )


@friendly_errors
def bench_command(
    model: Annotated[str, typer.Argument(help="The model to load.")],
    url: UrlOption = None,
    concurrency: Annotated[
        str, typer.Option(help="Comma-separated concurrency levels (for generation: concurrent streams).")
    ] = "1,4,16",
    duration: Annotated[float | None, typer.Option(help="Seconds per level (default 10).")] = None,
    requests: Annotated[int | None, typer.Option(help="Requests per level instead of a duration.")] = None,
    protocol: Annotated[str | None, typer.Option(help="http or grpc (default: the URL's).")] = None,
    texts: Annotated[Path | None, typer.Option(help="A file with one text (or prompt) per line.")] = None,
    batch: Annotated[int, typer.Option(help="Texts per request.")] = 1,
    spread: Annotated[float, typer.Option(help="Generation: seconds over which the streams arrive.")] = 2.0,
    max_tokens: Annotated[int, typer.Option(help="Generation: tokens per stream.")] = 64,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of throughput and latency.")] = None,
) -> None:
    """Load a model at several concurrency levels; client figures and Triton's own statistics.

    A text-generation model gets concurrent greedy streams arriving over --spread seconds:
    aggregate tokens/s, time to first token and time between chunks (p50/p95).
    """
    from tritonhf._wire.settings import default_url
    from tritonhf.loadgen import (
        DEFAULT_PROMPTS,
        DEFAULT_TEXTS,
        model_task,
        run_bench,
        run_streams,
        write_json,
        write_plot,
    )

    levels = [int(level) for level in concurrency.split(",") if level.strip()]
    base = url or default_url()
    if protocol is not None:
        if protocol not in ("http", "grpc"):
            raise ValueError("--protocol must be http or grpc.")
        address = base.split("://", 1)[-1]
        if protocol == "grpc" and not base.startswith("grpc://"):
            raise ValueError("--protocol grpc needs the gRPC URL (grpc://host:port) as --url.")
        base = f"{protocol}://{address}"
    lines = [line for line in texts.read_text().splitlines() if line.strip()] if texts else None
    with Client(base, concurrency=max(levels) + 2, timeout=600) as client:
        if model_task(client, model) == "text-generation":
            streams = [
                run_streams(client, model, level, spread, max_tokens, lines or DEFAULT_PROMPTS) for level in levels
            ]
            _streams_table(model, base, streams)
            if json_out:
                json_out.write_text(json.dumps({"model": model, "streams": [asdict(s) for s in streams]}, indent=2))
                console.print(f"figures: {json_out}")
            return
        if duration is None and requests is None:
            duration = 10.0
        results = run_bench(client, model, levels, duration, requests, lines or DEFAULT_TEXTS, batch)
    view = table(
        "concurrency",
        "req/s",
        "items/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "errors",
        "server ms",
        "queue ms",
        "compute ms",
        "batches executed",
        "client CPU",
        title=f"{model} over {base}",
    )
    for r in results:
        server = r.server
        view.add_row(
            str(r.concurrency),
            f"{r.throughput:.1f}",
            f"{r.items_per_second:.1f}",
            f"{r.p50_ms:.2f}",
            f"{r.p95_ms:.2f}",
            f"{r.p99_ms:.2f}",
            str(r.errors),
            f"{server.latency_ms:.2f}" if server else "-",
            f"{server.queue_ms:.2f}" if server else "-",
            f"{server.compute_ms:.2f}" if server else "-",
            " ".join(f"{size}x{count}" for size, count in server.batch_sizes.items()) if server else "-",
            f"{r.client_cores:.2f} cores",
        )
    console.print(view)
    if json_out:
        write_json(results, json_out, model)
        console.print(f"figures: {json_out}")
    if plot:
        write_plot(results, plot, model)
        console.print(f"plot: {plot}")


def _streams_table(model: str, base: str, results: list[StreamsResult]) -> None:
    view = table(
        "streams",
        "arrivals over",
        "tokens/s",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "between chunks p50 ms",
        "p95 ms",
        "errors",
        title=f"{model} over {base} (greedy streams)",
    )
    for r in results:
        view.add_row(
            str(r.streams),
            f"{r.spread_s:g} s",
            f"{r.tokens_per_second:.1f}",
            f"{r.ttft_p50_ms:.0f}",
            f"{r.ttft_p95_ms:.0f}",
            f"{r.inter_chunk_p50_ms:.1f}",
            f"{r.inter_chunk_p95_ms:.1f}",
            str(r.errors),
        )
    console.print(view)


@friendly_errors
def demo_command(
    workspace: Annotated[Path | None, typer.Option("--workspace", "-w", help="Workspace folder.")] = None,
    online: Annotated[
        bool,
        typer.Option(
            help="Use hub models instead of the offline weight packages; adds an image classifier (ViT), CLIP and "
            "Whisper (speech from espeak-ng when installed)."
        ),
    ] = False,
    keep_running: Annotated[bool, typer.Option(help="Leave the server up and print how to query it.")] = False,
) -> None:
    """The whole product offline: bootstrap, gallery, serve, call through the sdk, stop."""
    from tritonhf.demo import Demo

    progress = RichProgress()
    try:
        Demo(console, progress, Workspace.at(workspace), online).run(keep_running=keep_running)
    finally:
        progress.close()
