"""Speech recognition (Whisper; CTC models such as wav2vec2) on Triton's Python backend (tritonhf gallery template).

Requests carry encoded audio (WAV, FLAC, OGG, MP3), one file per row. This template:

1. decodes each row (libsndfile), mixes it down to mono and resamples it to the model's rate
   (soxr), refusing before decoding a file past ``max_audio_seconds``; a bad, empty or silent
   file fails its own request only, naming the row and what is wrong;
2. runs the model's own feature extractor on each file;
3. detects the language of rows that do not give one (one pass over their first window);
4. transcribes: files within one window (30 s for Whisper) are decoded together, one
   ``generate`` per group of rows that share language, task, timestamps and prompt (greedy;
   all windows are the same size, so nothing is padded and no row depends on another);
   each row keeps at most its own MAX_TOKENS. Longer files, and rows that sample
   (TEMPERATURE > 0, seeded by SEED), run alone: transformers' long-form decoding reads
   window after window, each starting where the last complete segment ended, so nothing is
   cut and timestamps count from the start of the file;
5. answers each request with exactly its own rows.

Added with ``--stream``, the model is decoupled and streams: each request is answered in parts as
its rows advance (partial responses carry ``TEXT_DELTA``, the text since the last part, and
``SEGMENTS``, that text's timed segments), then with the whole answer (the same tensors a model
added without ``--stream`` sends) and the final flag. A part is each window of a long file (read
window after window by ``longform.py`` beside this file, on either engine), and on CTranslate2
each decoding pass of a timestamped one; otherwise a row's part is its whole answer. A request
cancelled by its caller (the stream closed) is not decoded further.

Decoding runs on the stub's thread while the previous batch computes on the pipeline's
worker (runtime.Pipeline).

One engine runs, chosen in ``initialize`` by parameter ``tritonhf.backend`` (NAME: the module ``NAME_engine.py``
beside this file, whose ``ENGINE`` class is made as ``ENGINE(args, params, processor, config, streaming)``; a CTC
model is always ``ctc_engine.py``), and this file does not know which: each takes a row's options (``check``,
BadRequest naming an input it cannot honour), prepares a row from its samples (``prepare``) and transcribes a batch
of rows (``transcribe``, sending a streamed model's parts), then ``close``. ``gallery add`` writes the name from its
registry of engines (``tritonhf/gallery/families/speech/engines.py``) and copies an engine that is not one of these
beside it.
The Whisper engines share ``whisper_base.py`` (Whisper's options, grouping, tokens to segments); ``segments.py``
shapes every answer:

* ``pytorch_engine.py`` (the default): transformers' ``generate``; with ``--quantize int8`` its Linear layers
  run in int8 with a scale per token (runtime.int8), so rows are still batched and each answer still does not
  depend on the batch;
* ``ctranslate2_engine.py`` (``--backend ctranslate2``, or ``auto`` where it measured faster): the model
  converted at ``gallery add`` (``weights/ct2``), in float32 or int8 (``tritonhf.compute_type``);
* ``openvino_engine.py`` (``--backend openvino``, or ``auto`` where it measured fastest): OpenVINO GenAI's
  WhisperPipeline on the export made at ``gallery add`` (``weights/openvino``): each row alone, the pipeline
  reading a long file itself; a streamed row's parts are its text as the pipeline decodes it, then its segments;
* ``ctc_engine.py``: a CTC model (not encoder-decoder: wav2vec2, HuBERT ...), each file alone, in the
  transformers pipeline's overlapping 30 s windows; options it cannot honour (language, translate, prompt,
  sampling, a token limit) are 400s.

Inputs:  AUDIO [n, 1] BYTES; optional per row: LANGUAGE (code, default detect), TASK
         (transcribe | translate), TIMESTAMPS, PROMPT, TEMPERATURE, SEED, MAX_TOKENS.
Outputs: TEXT, SPOKEN_LANGUAGE, DURATION (seconds), SEGMENTS (JSON: [{start, end, text}]); streamed
         parts: TEXT_DELTA and SEGMENTS (the new ones), SPOKEN_LANGUAGE, DURATION.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoConfig, AutoProcessor

TASKS = ("transcribe", "translate")


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        location = runtime.weights_location(args, params)
        remote = runtime.trust_remote_code(params)
        processor = AutoProcessor.from_pretrained(location, trust_remote_code=remote)
        config = AutoConfig.from_pretrained(location, trust_remote_code=remote)
        self.sampling_rate = processor.feature_extractor.sampling_rate
        self.max_seconds = runtime.int_parameter(
            params, runtime.PARAM_MAX_AUDIO_SECONDS, runtime.DEFAULT_MAX_AUDIO_SECONDS
        )
        self.pipeline = runtime.Pipeline()
        policy = runtime.model_config(args).get("model_transaction_policy", {})
        self.streaming = bool(policy.get("decoupled", False))  # added with --stream
        name = params.get(runtime.PARAM_BACKEND) or "pytorch"
        if not getattr(config, "is_encoder_decoder", False):  # wav2vec2, HuBERT ...: CTC
            name = "ctc"
        engine = runtime.engine_class(name, runtime.PARAM_BACKEND, "--backend")
        self.engine = engine(args, params, processor, config, self.streaming)

    def execute(self, requests):
        batch = runtime.Batch(requests, "AUDIO", binary=True)
        languages = batch.option("LANGUAGE", b"", _is_text, "UTF-8 text")
        tasks = batch.option("TASK", b"transcribe", lambda t: _text(t) in TASKS, "transcribe or translate")
        timestamps = batch.option("TIMESTAMPS", False)
        prompts = batch.option("PROMPT", b"", _is_text, "UTF-8 text")
        most = runtime.AUDIO_TEMPERATURE_MAX
        temperatures = batch.option("TEMPERATURE", 0.0, lambda t: 0.0 <= t <= most, f"between 0 and {most:g}")
        seeds = batch.option("SEED", 0)
        top = self.engine.max_tokens
        least = runtime.MAX_TOKENS_MIN
        limits = batch.option("MAX_TOKENS", None, lambda k: least <= k <= top, f"between {least} and {top}")
        rows = {}
        for row in batch.live_rows():
            options = {"language": _text(languages[row]).strip(), "task": _text(tasks[row]),
                       "prompt": _text(prompts[row]), "timestamps": bool(timestamps[row]),
                       "temperature": float(temperatures[row]), "seed": runtime.seed_from_wire(seeds[row]),
                       "max_tokens": None if limits[row] is None else int(limits[row])}  # fmt: skip
            try:
                self.engine.check(options)
                samples = runtime.decode_audio(batch.texts[row], self.sampling_rate, self.max_seconds)
                rows[row] = self.engine.prepare(samples, options)
            except runtime.BadRequest as exc:
                batch.fail_row(row, _refusal(exc))
        live = set(batch.live_rows())
        rows = {row: item for row, item in rows.items() if row in live}

        def work():
            parts = Parts(batch, requests, rows) if self.streaming else None
            results = self.engine.transcribe(rows, parts)
            for row, result in results.items():
                if isinstance(result, runtime.BadRequest):
                    batch.fail_row(row, _refusal(result))

            def answer(span):
                found = [results[row] for row in span]
                return pb_utils.InferenceResponse(
                    output_tensors=[
                        runtime.string_tensor("TEXT", [item["text"] for item in found]),
                        runtime.string_tensor("SPOKEN_LANGUAGE", [item["language"] for item in found]),
                        runtime.float_tensor("DURATION", np.array([[item["duration"]] for item in found], np.float32)),
                        runtime.string_tensor("SEGMENTS", [json.dumps(item["segments"]) for item in found]),
                    ]
                )

            return batch.respond(answer)

        self.pipeline.submit(requests, work)

    def finalize(self):
        self.pipeline.close()
        self.engine.close()


class Parts:
    """A streamed (decoupled) model's partial answers: each sent to its row's request as the row advances, the
    request's other rows empty; ``window`` text is as decoded (its spaces kept), so the parts add up to the text."""

    def __init__(self, batch, requests, rows):
        self.requests = requests
        self.spans = batch.spans
        self.owner = {row: index for index, span in enumerate(batch.spans) for row in span}
        self.rows = rows
        self.started = set()  # rows that sent a part: a later part keeps its leading space
        self.refused = set()  # requests whose part the stub refused (send raised): nothing more reaches them

    def cancelled(self, row):
        index = self.owner[row]
        return index in self.refused or self.requests[index].is_cancelled()

    def whole(self, row, result):
        self.send(row, result["text"], result["segments"])

    def text(self, row, piece):
        """A piece of a row's text as decoded (OpenVINO GenAI's streamer); False when its caller left."""
        self.send(row, piece if row in self.started else piece.lstrip(), [])
        return not self.cancelled(row)

    def window(self, row, engine, found):
        """One window's ``(start, end, tokens)`` of a row, read by a Whisper ``engine``; False when its caller left
        (stop decoding it)."""
        text = engine.decode([token for _, _, piece in found for token in piece])
        self.send(row, text if row in self.started else text.lstrip(), engine.timed(self.rows[row], found))
        return not self.cancelled(row)

    def send(self, row, text, segments):
        index = self.owner[row]
        if (not text and not segments) or index in self.refused:
            return
        self.started.add(row)
        span = self.spans[index]
        items = [self.rows.get(other, {}) for other in span]
        response = pb_utils.InferenceResponse(
            output_tensors=[
                runtime.string_tensor("TEXT_DELTA", [text if other == row else "" for other in span]),
                runtime.string_tensor("SEGMENTS", [json.dumps(segments if other == row else []) for other in span]),
                runtime.string_tensor("SPOKEN_LANGUAGE", [item.get("language") or "" for item in items]),
                runtime.float_tensor("DURATION", np.array([[item.get("duration", 0.0)] for item in items], np.float32)),
            ]
        )
        try:
            self.requests[index].get_response_sender().send(response)
        except Exception:  # refused: that request's rows stop decoding, the batch's other rows go on
            self.refused.add(index)


def _refusal(exc):
    """A BadRequest's message; its args: (what is wrong, the input's name when not AUDIO)."""
    return f"input '{exc.args[1] if len(exc.args) > 1 else 'AUDIO'}' {exc.args[0]}"


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _is_text(value):
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True
