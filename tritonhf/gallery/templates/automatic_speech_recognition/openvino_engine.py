"""Whisper on OpenVINO GenAI's WhisperPipeline, for model.py beside this file (added with ``--backend openvino``).

The model was exported at ``gallery add`` (``weights/openvino``: encoder, stateful decoder, tokenizer
and detokenizer as OpenVINO models) and runs in float32, so a greedy answer is transformers'; with
``--quantize int8`` (``tritonhf.compute_type``: int8), its int8 weights run in OpenVINO's default
precision (bf16 on a CPU with AMX), as the gate at ``gallery add`` measured them. Each row is one
``generate`` alone (the pipeline takes one file), so no row depends on its batch-mates. The pipeline
does the rest as transformers' long-form reading does: features, language detection from the first
window when no language is given, and a long file read window after window with timestamps. The
pipeline's streamer hands each piece of text to the caller as it is decoded (a streamed model sends
it on), whose answer can stop the decoding (its caller left).
"""

import functools
import os

import openvino_genai
import segments
import tritonhf_runtime as runtime
from transformers import GenerationConfig
from whisper_base import WhisperEngine


class OpenVinoEngine(WhisperEngine):
    """The speech template's engine over ``OpenVinoWhisper``: Whisper's options read as the other engines read them,
    then each row alone, the pipeline computing its own features window after window."""

    def __init__(self, args, params, processor, config, streaming):
        location = runtime.weights_location(args, params)
        super().__init__(processor, GenerationConfig.from_pretrained(location), config, streaming)
        self.refuse_long_form_settings("OpenVINO GenAI")
        exported = os.path.join(location, runtime.OPENVINO_WHISPER)
        compute_type = params.get(runtime.PARAM_COMPUTE_TYPE, "float32")
        self.ov = OpenVinoWhisper(exported, runtime.instance_threads(args), compute_type)

    def prepare(self, samples, options):
        return {**options, "duration": len(samples) / self.features.sampling_rate, "samples": samples}

    def transcribe(self, rows, parts=None):
        """Each row alone; a streamed row's text sent as the pipeline decodes it, then its segments."""
        results = {}
        for row, item in rows.items():
            if parts is None:
                results[row] = self.transcribe_one(item)
            elif parts.cancelled(row):
                results[row] = segments.result(item, "", [])  # its caller left: nobody reads the answer
            else:
                results[row] = self.transcribe_one(item, functools.partial(parts.text, row))
                parts.send(row, "", results[row]["segments"])
        return results

    def transcribe_one(self, item, on_text=None):
        """A row's text, language and segments; each piece of text as the pipeline decodes it goes to ``on_text``
        (False: stop decoding)."""
        text, language, chunks = self.ov.transcribe(item["samples"], item, on_text)
        item["language"] = item["language"] or (language if self.multilingual else "en")
        if not item["timestamps"]:
            return segments.whole_file(item, text)
        # a segment the pipeline left open (no closing timestamp: end -1) runs to the end of the file, as reply() does
        found = [(start, end if end >= 0 else item["duration"], piece.strip()) for start, end, piece in chunks]
        return segments.result(item, text, segments.timed(item, found))


class OpenVinoWhisper:
    def __init__(self, folder, threads, compute_type="float32"):
        precision = {"INFERENCE_PRECISION_HINT": "f32"} if compute_type == "float32" else {}
        self.pipeline = openvino_genai.WhisperPipeline(folder, "CPU", INFERENCE_NUM_THREADS=threads, **precision)
        self.multilingual = bool(self.pipeline.get_generation_config().is_multilingual)

    def transcribe(self, samples, item, on_text=None):
        """``(text, language code or "", [(start, end, text)])`` of one row (``item``: the template's options); each
        piece of text goes to ``on_text`` as it is decoded, and its answer False ends the decoding early."""
        config = self.pipeline.get_generation_config()  # a copy: the row's options stay its own
        config.max_new_tokens = item["max_tokens"]
        config.return_timestamps = item["timestamps"]
        if self.multilingual:
            config.task = item["task"]
            if item["language"]:
                config.language = f"<|{item['language']}|>"
        if item["prompt"]:
            config.initial_prompt = item["prompt"]
        if item["temperature"] > 0.0:
            config.do_sample, config.temperature, config.rng_seed = True, item["temperature"], item["seed"]

        def streamer(piece):
            return openvino_genai.StreamingStatus.RUNNING if on_text(piece) else openvino_genai.StreamingStatus.CANCEL

        found = self.pipeline.generate(samples.tolist(), config, streamer if on_text is not None else None)
        chunks = [(chunk.start_ts, chunk.end_ts, chunk.text) for chunk in (found.chunks or [])]
        return found.texts[0].strip(), str(found.language or "").strip("<|>"), chunks


ENGINE = OpenVinoEngine
