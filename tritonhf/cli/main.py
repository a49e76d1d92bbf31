"""The ``tritonhf`` entry point: one typer app, sub-apps per command group."""

from __future__ import annotations

import typer

from tritonhf.cli import calls, deploy, gallery, server

app = typer.Typer(
    name="tritonhf",
    help="Serve HuggingFace models on a native NVIDIA Triton Inference Server, without Docker.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("bootstrap")(server.bootstrap_command)
app.command("up")(server.up_command)
app.command("down")(server.down_command)
app.command("status")(server.status_command)
app.command("logs")(server.logs_command)
app.command("doctor")(server.doctor_command)
app.add_typer(gallery.app, name="gallery")
app.add_typer(deploy.app, name="deploy")
app.command("classify")(calls.classify_command)
app.command("classify-image")(calls.classify_image_command)
app.command("transcribe")(calls.transcribe_command)
app.command("embed")(calls.embed_command)
app.command("ner")(calls.ner_command)
app.command("generate")(calls.generate_command)
app.command("rerank")(calls.rerank_command)
app.command("answer")(calls.answer_command)
app.command("fill-mask")(calls.fill_mask_command)
app.command("summarize")(calls.summarize_command)
app.command("openai")(calls.openai_command)
app.command("models")(calls.models_command)
app.command("load")(calls.load_command)
app.command("demo")(calls.demo_command)
app.command("bench")(calls.bench_command)


def main() -> None:
    app()
