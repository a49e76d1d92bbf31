"""Whisper on CTranslate2 for the speech template (``--backend ctranslate2``, or ``auto`` where it measured faster).

CTranslate2 is the engine faster-whisper runs: the same Whisper, converted once at ``gallery
add`` (``weights/ct2/``), with fused int8 kernels on a CPU. The template keeps everything else:
its own decoding of the files, its own features (the model's processor), its own options. This
module does what transformers' ``generate`` does for the template, step for step, so a row's
answer is what transformers would give (to the engine's arithmetic; float32 gives the same
greedy tokens on the test models):

- the language: the first step's scores over the language tokens, from ``<|startoftranscript|>``
  alone (CTranslate2's ``detect_language``, as transformers' ``detect_language``);
- the decoder's prompt, given by the template (``decoder_prompt``: as transformers builds it);
  the model's ``suppress_tokens`` (kept in
  the converted config) and the blank suppressed at the start, as its generation config says;
- greedy, or sampling at a row's temperature from the model's ``top_k`` with a row's seed;
- files longer than one window, and any file with timestamps: transformers' long-form rule
  (``longform.py`` beside this file), window after window, the prompt before every window
  (transformers runs that loop for a short file with timestamps too, over its one padded
  window: an unfinished last segment is decoded again from its start).

Rows are computed together only when they share a prompt; each row's features are its own 30 s
window, so nothing is padded and no row depends on another (CTranslate2 quantises activations
per row). A batch of rows is cut in ``WORKERS`` parts that CTranslate2 runs at once (its
``inter_threads``, the weights shared): two smaller batches kept the cores busier than one whose
steps wait on each other (``bench/speech.py`` measures it). A lone row runs as before, on all
the instance's threads. A replica loaded for a sampling row's seed has one worker, so which
worker thread's generator samples is never left to chance.

Added with ``--quantize int8`` where it measured faster (parameter ``tritonhf.encoder``), the
encoder runs on OpenVINO (``openvino_encoder.xml`` beside the converted model, gated against
float32 at ``gallery add``) and CTranslate2 decodes from its states: each row is encoded alone,
so its states do not depend on its batch-mates.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import longform
import numpy as np
import tritonhf_runtime as runtime
from longform import WINDOW_FRAMES
from transformers import GenerationConfig
from whisper_base import WhisperEngine

WORKERS = 2  # batches CTranslate2 runs at once (inter_threads), each on the instance's threads


class Ct2Whisper:
    def __init__(self, folder, compute_type, threads, generation, tokenizer, openvino_encoder=None):
        import ctranslate2

        self.ct2 = ctranslate2
        self.load = lambda workers=1: ctranslate2.models.Whisper(
            str(folder), device="cpu", compute_type=compute_type, intra_threads=threads, inter_threads=workers
        )
        self.model = self.load(WORKERS)
        self.openvino = None
        if openvino_encoder is not None:
            import openvino

            self.openvino = (
                openvino.Core()
                .compile_model(str(openvino_encoder), "CPU", {"INFERENCE_NUM_THREADS": threads})
                .create_infer_request()
            )
        self.callers = ThreadPoolExecutor(WORKERS, thread_name_prefix="ct2-encode")  # one call per worker at once
        self.timestamp_begin = generation.no_timestamps_token_id + 1
        self.top_k = int(getattr(generation, "top_k", 0) or 0)
        eos = generation.eos_token_id
        self.stops = set(eos if isinstance(eos, list) else [eos])
        self.tokenizer = tokenizer

    def _features(self, features):
        return self.ct2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32))

    def encode(self, features):
        """The encoder's states [n, positions, width] for ``features`` [n, mels, 3000], the parts at once (one per
        worker), or each row alone on OpenVINO; ``detect`` and ``generate`` take them in place of the features."""
        if self.openvino is not None:
            # infer returns copies of its outputs (share_outputs is off), so each row's states are its own
            return np.stack([self.openvino.infer([np.ascontiguousarray(row[None], dtype=np.float32)])[0][0]
                             for row in features])  # fmt: skip
        parts = np.array_split(np.arange(len(features)), min(WORKERS, len(features)))

        def states(rows):
            return np.array(self.model.encode(self._features(features[rows]), to_cpu=True))

        return np.concatenate(list(self.callers.map(states, parts)))

    def detect(self, features):
        """The most likely language token id for each row of ``features`` [n, mels, 3000] or of its encoder states
        (CTranslate2 scores the language tokens after ``<|startoftranscript|>``, as transformers'
        ``detect_language`` does)."""
        found = self.model.detect_language(self._features(features))
        return [self.tokenizer.convert_tokens_to_ids(row[0][0]) for row in found]

    def generate(self, features, prompt, max_new_tokens, temperature=0.0, seed=None, model=None):
        """Generated token ids per row of ``features`` or encoder states (all with ``prompt``), each up to its
        end-of-text and at most ``max_new_tokens``; sampling at ``temperature`` > 0, from ``seed`` when given (on
        ``model``: a seeded replica)."""
        if self.openvino is not None and features.shape[-1] == WINDOW_FRAMES:  # features: encode them on OpenVINO
            features = self.encode(features)
        model, sampling = model or self.model, {}
        if temperature > 0.0:
            if seed is not None:
                model = self.seeded(seed)
            sampling = {"sampling_topk": self.top_k, "sampling_temperature": float(temperature)}
        # CTranslate2 decodes at most max_length // 2 new tokens and at most max_length - len(prompt) + 1.
        limit = max(2 * max_new_tokens, max_new_tokens + len(prompt) - 1)
        options = {"beam_size": 1, "max_length": limit, **sampling}
        parts = min(WORKERS, len(features)) if model is self.model else 1
        if parts == 1:
            found = model.generate(self._features(features), [prompt] * len(features), **options)
        else:  # the parts run at once, one per worker; each row's answer is its own either way
            cuts = np.array_split(np.arange(len(features)), parts)
            pending = [model.generate(self._features(features[rows]), [prompt] * len(rows), asynchronous=True,
                                      **options) for rows in cuts]  # fmt: skip
            found = [row.result() for part in pending for row in part]
        return [self.ended(row.sequences_ids[0])[:max_new_tokens] for row in found]

    def seeded(self, seed):
        """A replica of the model whose sampling starts from ``seed``: CTranslate2 seeds each worker thread's
        generator once, when the thread first samples, so a request's seed needs a fresh replica (loaded
        again from the converted folder; sampling rows are the rare case)."""
        seed = int(seed)
        self.ct2.set_random_seed((seed ^ (seed >> 32)) & 0xFFFFFFFF)  # CTranslate2's seed has 32 bits: both halves
        return self.load()

    def close(self):
        self.callers.shutdown()

    def ended(self, tokens):
        ids = [int(token) for token in tokens]
        return next((ids[:index] for index, token in enumerate(ids) if token in self.stops), ids)

    def long_form(self, features, prompt, max_new_tokens, temperature=0.0, seed=0, on_window=None):
        """``(tokens, [(start, end, tokens)])`` over a file's whole ``features`` [mels, frames] (a short file: its
        one window of 3000 frames); each window's segments go to ``on_window`` as it ends (False: stop there)."""
        model = self.seeded(seed) if temperature > 0.0 else self.model  # seeded once for the file, as transformers

        def decode(window):
            return self.generate(window[None], prompt, max_new_tokens, temperature, model=model)[0]

        return longform.read(features, decode, self.timestamp_begin, on_window)


class Ct2Engine(WhisperEngine):
    """The speech template's engine over ``Ct2Whisper``: the encoder's states of a row's first window computed once
    for detection and decoding; timestamps, long files and sampling rows read row by row (``longform.py``)."""

    def __init__(self, args, params, processor, config, streaming):
        location = runtime.weights_location(args, params)
        generation = GenerationConfig.from_pretrained(location)
        super().__init__(processor, generation, config, streaming)
        self.refuse_long_form_settings("CTranslate2")
        converted = os.path.join(location, runtime.CT2_FOLDER)
        encoder = None  # CTranslate2's own, or OpenVINO's where gallery add measured it faster
        if params.get(runtime.PARAM_ENCODER) == "openvino":
            encoder = os.path.join(converted, runtime.OPENVINO_ENCODER)
        compute_type = params.get(runtime.PARAM_COMPUTE_TYPE, "float32")
        threads = runtime.instance_threads(args)
        self.ct2 = Ct2Whisper(converted, compute_type, threads, generation, self.tokenizer, encoder)

    def encode(self, rows):
        """The encoder's states of the first window of each row that needs them (its language is detected, or it
        is decoded in a group), computed once for both, so a detected row does not pay for its encoder twice. An
        English-only model detects nothing (its rows are English)."""
        wanted = [row for row, item in rows.items()
                  if (self.multilingual and item["language"] is None) or self.grouped(item)]  # fmt: skip
        if wanted:
            for row, states in zip(wanted, self.ct2.encode(self.stacked([rows[row] for row in wanted]))):
                rows[row]["encoded"] = states

    def detect(self, items):
        return self.ct2.detect(self.stacked(items, "encoded"))

    def decode_group(self, items, max_new_tokens):
        prompt = self.decoder_prompt(items[0], items[0]["timestamps"])
        return self.ct2.generate(self.stacked(items, "encoded"), prompt, max_new_tokens)

    def grouped(self, item):
        """Timestamps are read window after window even within one (transformers seeks past the last complete
        segment), here row by row."""
        return super().grouped(item) and not item["timestamps"]

    def windowed(self, item):
        return item["long"] is not None or item["timestamps"]

    def alone(self, item, on_window=None):
        temperature, seed = item["temperature"], item["seed"]
        if self.windowed(item):
            features = item["long"][0][0] if item["long"] is not None else item["features"]  # [mels, frames]
            tokens, found = self.ct2.long_form(features, self.decoder_prompt(item, True), item["max_tokens"],
                                               temperature, seed, on_window)  # fmt: skip
            return self.long_reply(item, tokens, found)
        prompt = self.decoder_prompt(item, False)  # a short row that samples, its temperature and seed its own
        found = self.ct2.generate(item["features"][None], prompt, item["max_tokens"], temperature, seed)[0]
        return self.reply(item, self.kept(item, found))

    def close(self):
        self.ct2.close()


ENGINE = Ct2Engine
