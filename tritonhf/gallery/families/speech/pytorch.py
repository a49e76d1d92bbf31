"""PyTorch, speech's engine for every model transformers loads (Whisper, or a CTC model such as wav2vec2): the
vendored weights as they are, with ``--quantize int8`` every Linear layer in int8 with per-token activation scales
(``runtime.int8``) behind its gate (``check_int8``), and how ``--backend auto`` times it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tritonhf._progress import Progress
from tritonhf.errors import GalleryError
from tritonhf.gallery.families.speech import int8
from tritonhf.gallery.families.speech.measure import TIMED_TOKENS, Ready, Window
from tritonhf.gallery.request import PARAM_INT8_QUALITY, AddRequest, Choice, int8_gate
from tritonhf.runtime.int8 import int8_linear_layers


def weights(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Choice:
    """``--backend pytorch``: the vendored weights as they are."""
    return served(request, folder, vendored, "--backend pytorch", {}, progress)


def prepare(request: AddRequest, folder: Path, vendored: Path, progress: Progress) -> Ready:
    """``--backend auto``: the vendored weights, timed as served (in int8 with --quantize int8); its gate is checked
    once it is kept."""
    return Ready(lambda window: timer(folder, window),
                 lambda reason, params: served(request, folder, vendored, reason, params, progress))  # fmt: skip


def served(
    request: AddRequest, folder: Path, vendored: Path, reason: str, params: dict[str, str], progress: Progress
) -> Choice:
    """The choice of PyTorch on the vendored weights (what was converted to be measured is dropped); with
    --quantize int8, its Linear layers in int8 behind the gate."""
    if request.quantize:
        progress.step("Checking dynamic int8 (Linear layers) against fp32 on calibration audio")
        params = {**params, **int8_gate(request, check_int8(folder), progress)}
        params[int8.PARAM_QUANTIZE] = "int8"
        reason += "; Linear layers in int8, a scale per token (" + params[PARAM_INT8_QUALITY] + ")"
    return Choice("pytorch", reason, params, label="PyTorch")


def timer(folder: Path, window: Window) -> Callable[[int], Callable[[], object]]:
    """transformers' ``generate`` on ``rows`` copies of the window, one batch, as the template runs it."""
    import torch
    from transformers import AutoModelForSpeechSeq2Seq

    auto: Any = AutoModelForSpeechSeq2Seq  # untyped in transformers
    model = auto.from_pretrained(folder).eval()
    if window.int8:
        model = int8_linear_layers(model)

    def rows(count: int) -> Callable[[], object]:
        inputs = torch.from_numpy(np.repeat(window.features, count, axis=0))

        def run() -> None:
            with torch.inference_mode():
                model.generate(inputs, max_new_tokens=TIMED_TOKENS, suppress_tokens=window.suppress, do_sample=False,
                               **window.options)  # fmt: skip

        return run

    return rows


def check_int8(folder: Path) -> int8.Int8Check:
    """fp32 against int8 on the calibration clips (GalleryError when the model cannot be loaded).

    Whisper: the encoder's states, and the first greedy tokens; a CTC model (wav2vec2): its logits, and
    the argmax frames."""
    import torch
    from transformers import AutoConfig, AutoModelForCTC, AutoModelForSpeechSeq2Seq, AutoProcessor

    auto: Any = AutoProcessor  # untyped in transformers
    try:
        processor: Any = auto.from_pretrained(folder)
        seq2seq = bool(getattr(AutoConfig.from_pretrained(folder), "is_encoder_decoder", False))
        kind: Any = AutoModelForSpeechSeq2Seq if seq2seq else AutoModelForCTC
        model: Any = kind.from_pretrained(folder).eval()
        quantized: Any = int8_linear_layers(kind.from_pretrained(folder).eval())
    except (OSError, ValueError) as exc:
        raise GalleryError(f"--quantize int8: the speech model in {folder} could not be loaded ({exc}).") from exc
    extractor = processor.feature_extractor
    cosines, agree = [], []
    with torch.inference_mode():
        for seed, seconds in enumerate(int8.CALIBRATION_SECONDS):
            audio = int8.calibration_audio(seconds, extractor.sampling_rate, seed)
            inputs = extractor(audio, sampling_rate=extractor.sampling_rate, return_tensors="pt")
            if seq2seq:
                features = inputs.input_features
                states = [m.get_encoder()(features).last_hidden_state for m in (model, quantized)]
                options = {"max_new_tokens": int8.GATE_TOKENS, "do_sample": False}
                tokens = [m.generate(features, **options)[0].tolist() for m in (model, quantized)]
            else:
                states = [m(input_values=inputs.input_values).logits for m in (model, quantized)]
                tokens = [state.argmax(-1)[0].tolist() for state in states]
            flat = [state.flatten() for state in states]
            cosines.append(float(torch.nn.functional.cosine_similarity(flat[0], flat[1], dim=0)))
            agree.append(int8.agreement(*tokens))
    return int8.Int8Check(min(cosines), float(np.mean(agree)))
