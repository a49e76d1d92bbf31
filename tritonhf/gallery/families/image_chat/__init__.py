"""Image chat (image-text-to-text): a vision-language model exported to OpenVINO IR and served by the text-generation
template on its OpenVINO engine, whose ``ContinuousBatchingPipeline`` takes images beside the prompt.

The source (a hub id or folder, safetensors) is copied into the version folder as usual, so the model's own library
answers the add-time check from it (``reference``: transformers' ``generate`` on images its processor resizes);
then optimum-intel exports it (``--weight-format`` fp16 by default, int8 or int4) from the exporter venv the family
needs (``openvino_exporter``: an older transformers where optimum-intel asks for one), and the export replaces the
copy. The template sizes each image as the model's processor does before OpenVINO sees it (``runtime.vision``), so
OpenVINO's own resize has nothing to change; the check compares the served greedy answers and prompt token counts
with transformers' and refuses the model when they differ.

Served families: those whose processor's rules ``runtime.vision`` holds (Qwen2-VL, Qwen2.5-VL). Another
family OpenVINO GenAI reads (llava, gemma3, internvl, phi3_v, MiniCPM-V ...) is refused by name before anything is
exported: its processor's resize and prompt widening are not reproduced here yet, and OpenVINO's own resize gives
answers that drift from transformers' after a few tokens.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError, ModelSourceError
from tritonhf.gallery import installed, openvino_exporter, sources
from tritonhf.gallery.family import Family, Staging
from tritonhf.gallery.request import AddRequest, Choice
from tritonhf.runtime.vision import FAMILIES as VISION_FAMILIES
from tritonhf.tasks import PARAM_ENGINE, PARAM_OPENVINO_MODEL, Task

# --weight-format -> optimum-cli's options
WEIGHT_FORMATS = {
    "fp16": ["--weight-format", "fp16"],
    "int8": ["--weight-format", "int8"],
    "int4": ["--weight-format", "int4", "--group-size", "64", "--group-size-fallback", "adjust", "--ratio", "1.0"],
}
DEFAULT_WEIGHT_FORMAT = "fp16"
EXPORTED_FILES = ("openvino_language_model.xml", "openvino_vision_embeddings_model.xml", "openvino_tokenizer.xml",
                  "openvino_detokenizer.xml")  # fmt: skip
# What the template reads beside the export that optimum-intel does not write: the image processor's settings.
KEPT_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.json")
PARAM_WEIGHT_FORMAT = "tritonhf.weight_format"


class ImageChat(Family):
    tasks = ("image-text-to-text",)

    def __init__(self, request: AddRequest, task: Task) -> None:
        super().__init__(request, task)
        self.weight_format = request.weight_format or DEFAULT_WEIGHT_FORMAT

    def check(self) -> None:
        request = self.request
        if request.quantize:
            raise GalleryError("--quantize int8 is for encoders and speech; image-text-to-text takes --weight-format.")
        if request.backend != "auto":
            raise GalleryError(
                f"image-text-to-text is served by OpenVINO GenAI; --backend takes auto, not {request.backend!r}."
            )
        if self.weight_format not in WEIGHT_FORMATS:
            raise GalleryError(
                f"--weight-format must be one of {', '.join(WEIGHT_FORMATS)} for image-text-to-text (an OpenVINO IR "
                f"export), not {request.weight_format!r}."
            )
        if request.options.device == "gpu":
            raise GalleryError("image-text-to-text is served on the CPU by OpenVINO GenAI here: leave --device out.")
        if not request.vendor:
            raise GalleryError("image-text-to-text exports the model into the repository: leave --no-vendor out.")
        missing = installed.openvino_genai_missing()
        if missing:
            raise GalleryError(f"image-text-to-text needs OpenVINO GenAI: {missing}.")

    def vendor(self, resolved: sources.ResolvedSource, staging: Staging, progress: Progress) -> sources.ResolvedSource:
        """The source copied as it is (the library's answers are read from it), once its family is known served."""
        model_type = _model_type(resolved.folder)
        if model_type not in VISION_FAMILIES:
            raise ModelSourceError(
                f"{self.request.source} is a {model_type or 'model without a model_type'} model; image-text-to-text "
                f"serves {', '.join(VISION_FAMILIES)} here (their processors' resize is reproduced before OpenVINO "
                "sees an image; for other families OpenVINO's own resize changes the answers)."
            )
        return super().vendor(resolved, staging, progress)

    def parameters(self, folder: Path) -> dict[str, str]:
        return {PARAM_ENGINE: "openvino", PARAM_OPENVINO_MODEL: "."}

    def choose(
        self, resolved: sources.ResolvedSource, staging: Staging, params: dict[str, str], progress: Progress
    ) -> Choice:
        """The copied source exported to OpenVINO IR in its place (the library answered from it already)."""
        progress.step(f"Exporting to OpenVINO IR ({self.weight_format} weights) with optimum-intel")
        exported = staging.version_dir / "openvino-export"
        openvino_exporter.export_model(
            staging.weights, exported, "image-text-to-text", WEIGHT_FORMATS[self.weight_format], EXPORTED_FILES
        )
        for name in KEPT_FILES:
            if (staging.weights / name).is_file() and not (exported / name).exists():
                shutil.copy2(staging.weights / name, exported / name)
        shutil.rmtree(staging.weights)
        exported.rename(staging.weights)
        return Choice(
            "openvino",
            "OpenVINO GenAI's continuous batching over the model's OpenVINO IR export, images and text in one batch",
            {PARAM_WEIGHT_FORMAT: self.weight_format},
            part=False,
            label="OpenVINO GenAI",
        )

    def notes(self, params: Mapping[str, str]) -> list[str]:
        return [
            f"Image chat: OpenVINO IR ({params.get(PARAM_WEIGHT_FORMAT, DEFAULT_WEIGHT_FORMAT)} weights); each image "
            "sized by the model's own processor before OpenVINO reads it, its tokens counted in prompt_tokens "
            "(limits: max_images per request, max_image_pixels, max_image_bytes)."
        ]


def _model_type(folder: Path) -> str:
    try:
        return str(json.loads((folder / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError):
        return ""
