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
worker (runtime.Pipeline). Added with ``--quantize int8`` (parameter ``tritonhf.quantize``), the
Linear layers run in int8 with a scale per token (runtime.int8), so rows are still batched and
each answer still does not depend on the batch.

Added with ``--backend ctranslate2`` (or ``auto`` where it measured faster; parameter
``tritonhf.backend``), Whisper runs on CTranslate2 (``whisper_ct2.py`` beside this file): the same
steps on the model converted at ``gallery add`` (``weights/ct2``), in float32 or int8
(``tritonhf.compute_type``). Added with ``--backend openvino`` (or ``auto`` where it measured fastest),
Whisper runs on OpenVINO GenAI's WhisperPipeline (``whisper_openvino.py``), exported at ``gallery add``
(``weights/openvino``): each row alone, the pipeline reading a long file itself; a streamed row's parts
are its text as the pipeline decodes it, then its segments.

A CTC model (not encoder-decoder: wav2vec2, HuBERT ...) is read by ``ctc.py`` beside this file:
each file alone, in the transformers pipeline's overlapping 30 s windows; options it cannot
honour (language, translate, prompt, sampling, a token limit) are 400s.

Inputs:  AUDIO [n, 1] BYTES; optional per row: LANGUAGE (code, default detect), TASK
         (transcribe | translate), TIMESTAMPS, PROMPT, TEMPERATURE, SEED, MAX_TOKENS.
Outputs: TEXT, SPOKEN_LANGUAGE, DURATION (seconds), SEGMENTS (JSON: [{start, end, text}]); streamed
         parts: TEXT_DELTA and SEGMENTS (the new ones), SPOKEN_LANGUAGE, DURATION.
"""

import functools
import json
import os

import longform
import numpy as np
import torch
import triton_python_backend_utils as pb_utils
import tritonhf_runtime as runtime
from transformers import AutoConfig, AutoModelForCTC, AutoModelForSpeechSeq2Seq, AutoProcessor, GenerationConfig

TASKS = ("transcribe", "translate")


class TritonPythonModel:
    def initialize(self, args):
        params = runtime.parameters(args)
        runtime.limit_threads(args)
        self.device = runtime.device(args, params)
        location = runtime.weights_location(args, params)
        self.processor = AutoProcessor.from_pretrained(location, trust_remote_code=runtime.trust_remote_code(params))
        self.features = self.processor.feature_extractor
        self.tokenizer = self.processor.tokenizer
        self.sampling_rate = self.features.sampling_rate
        self.max_seconds = runtime.int_parameter(
            params, runtime.PARAM_MAX_AUDIO_SECONDS, runtime.DEFAULT_MAX_AUDIO_SECONDS
        )
        self.pipeline = runtime.Pipeline()
        policy = runtime.model_config(args).get("model_transaction_policy", {})
        self.streaming = bool(policy.get("decoupled", False))  # added with --stream
        config = AutoConfig.from_pretrained(location, trust_remote_code=runtime.trust_remote_code(params))
        self.ctc = None
        if not getattr(config, "is_encoder_decoder", False):  # wav2vec2, HuBERT ...: CTC
            from ctc import CtcTranscriber

            model = runtime.load_model(AutoModelForCTC, args, params, self.device)
            if params.get(runtime.PARAM_QUANTIZE) == "int8":
                model = runtime.int8_linear_layers(model)
            self.ctc = CtcTranscriber(model, self.processor, self.device)
            self.multilingual, self.max_tokens = False, 0  # no language, no token limit to set
            return
        self.ct2 = self.ov = None
        if params.get(runtime.PARAM_BACKEND) == "ctranslate2":  # converted at gallery add: weights/ct2
            from whisper_ct2 import Ct2Whisper

            self.generation = GenerationConfig.from_pretrained(location)
            compute_type = params.get(runtime.PARAM_COMPUTE_TYPE, "float32")
            converted = os.path.join(location, runtime.CT2_FOLDER)
            encoder = None  # CTranslate2's own, or OpenVINO's where gallery add measured it faster
            if params.get(runtime.PARAM_ENCODER) == "openvino":
                encoder = os.path.join(converted, runtime.OPENVINO_ENCODER)
            self.ct2 = Ct2Whisper(converted, compute_type, runtime.instance_threads(args), self.generation,
                                  self.tokenizer, encoder)  # fmt: skip
        elif params.get(runtime.PARAM_BACKEND) == "openvino":  # exported at gallery add: weights/openvino
            from whisper_openvino import OpenVinoWhisper

            self.generation = GenerationConfig.from_pretrained(location)
            exported = os.path.join(location, runtime.OPENVINO_WHISPER)
            compute_type = params.get(runtime.PARAM_COMPUTE_TYPE, "float32")
            self.ov = OpenVinoWhisper(exported, runtime.instance_threads(args), compute_type)
        else:
            self.model = runtime.load_model(AutoModelForSpeechSeq2Seq, args, params, self.device)
            if params.get(runtime.PARAM_QUANTIZE) == "int8":
                self.model = runtime.int8_linear_layers(self.model)
            self.generation = self.model.generation_config
        self.window = self.features.n_samples  # samples in one window (30 s for Whisper)
        lang_to_id = getattr(self.generation, "lang_to_id", None) or {}
        self.languages = {token.strip("<|>"): token_id for token, token_id in lang_to_id.items()}
        self.multilingual = bool(getattr(self.generation, "is_multilingual", False)) and bool(self.languages)
        self.codes = {token_id: code for code, token_id in self.languages.items()}
        # Half the decoder's context per window, as Whisper was trained (the rest: task tokens and the prompt).
        self.max_tokens = config.max_target_positions // 2
        self.first_timestamp = self.generation.no_timestamps_token_id + 1
        # longform.py reads as transformers does unless the generation config asks for what it does not do:
        # previous windows' text in the decoder's prompt, or skipping windows it scores as silence
        asked = runtime.long_form_settings(self.generation)
        self.windows = not asked
        if (self.ct2 is not None or self.ov is not None) and asked:  # gallery add serves such a model with PyTorch
            engine = "CTranslate2" if self.ct2 is not None else "OpenVINO GenAI"
            raise ValueError(
                f"This Whisper's generation config sets {' and '.join(asked)}, which the {engine} reader does "
                "not do: add the model again with --backend pytorch."
            )
        eos = self.generation.eos_token_id
        self.stops = set(eos if isinstance(eos, list) else [eos])  # end-of-text ids, read once

    # ------------------------------------------------------------------ reading a batch

    def execute(self, requests):
        batch = runtime.Batch(requests, "AUDIO", binary=True)
        languages = batch.option("LANGUAGE", b"", _is_text, "UTF-8 text")
        tasks = batch.option("TASK", b"transcribe", lambda t: _text(t) in TASKS, "transcribe or translate")
        timestamps = batch.option("TIMESTAMPS", False)
        prompts = [_text(value) for value in batch.option("PROMPT", b"", _is_text, "UTF-8 text")]
        temperatures = batch.option("TEMPERATURE", 0.0, lambda t: 0.0 <= t <= 1.0, "between 0 and 1")
        seeds = batch.option("SEED", 0)
        top = self.max_tokens
        limits = batch.option("MAX_TOKENS", None, lambda k: 1 <= k <= top, f"between 1 and {top}")
        rows = {}
        for row in batch.live_rows():
            try:
                if self.ctc is not None:
                    rows[row] = self.prepare_ctc(batch.texts[row], languages[row], tasks[row], prompts[row],
                                                 temperatures[row], limits[row])  # fmt: skip
                    continue
                language = self.language(languages[row])
                rows[row] = self.prepare(batch.texts[row], language, _text(tasks[row]), prompts[row])
            except runtime.BadRequest as exc:  # args: (what is wrong, the input's name when not AUDIO)
                batch.fail_row(row, f"input '{exc.args[1] if len(exc.args) > 1 else 'AUDIO'}' {exc.args[0]}")
        live = set(batch.live_rows())
        rows = {row: item for row, item in rows.items() if row in live}
        for row, item in rows.items():
            item.update(timestamps=bool(timestamps[row]), temperature=float(temperatures[row]),
                        seed=runtime.seed_from_wire(seeds[row]),
                        max_tokens=int(limits[row] or self.max_tokens))  # fmt: skip

        def work():
            parts = Parts(self, batch, requests, rows) if self.streaming else None
            if self.ctc is not None or self.ov is not None:  # each row alone
                results = {}
                for row, item in rows.items():
                    if self.ctc is not None:
                        results[row] = self.transcribe_ctc(item)
                    elif parts is None:
                        results[row] = self.transcribe_openvino(item)
                    elif parts.cancelled(row):
                        results[row] = self.result(item, "", [])  # its caller left: nobody reads the answer
                    else:  # its text sent as the pipeline decodes it, then its segments
                        results[row] = self.transcribe_openvino(item, functools.partial(parts.text, row))
                        parts.send(row, "", results[row]["segments"])
                        continue
                    if parts is not None:
                        parts.whole(row, results[row])
            else:
                if self.ct2 is not None:
                    self.encode_once(rows)
                self.detect_languages(rows)
                results = self.transcribe(rows, parts)

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

    def language(self, value):
        """A row's LANGUAGE as the model's code, or None to detect it; BadRequest for one it does not know."""
        code = _text(value).strip().lower().strip("<|>")
        if not code:
            return None
        if not self.multilingual:
            if code == "en":
                return "en"
            raise runtime.BadRequest("is an English-only model: LANGUAGE can only be 'en'.", "LANGUAGE")
        if code not in self.languages:
            known = ", ".join(sorted(self.languages))
            raise runtime.BadRequest(f"{code!r} is not a language of this model; it knows: {known}.", "LANGUAGE")
        return code

    def prepare_ctc(self, data, language, task, prompt, temperature, max_tokens):
        """A CTC row: its samples, once its options are ones a CTC model honours."""
        assert self.ctc is not None
        refused = self.ctc.refused(_text(language).strip(), _text(task), prompt, float(temperature), max_tokens)
        if refused is not None:
            raise runtime.BadRequest(refused[1], refused[0])
        samples = runtime.decode_audio(data, self.sampling_rate, self.max_seconds)
        return {"samples": samples, "duration": len(samples) / self.sampling_rate, "language": ""}

    def transcribe_openvino(self, item, on_text=None):
        """A row on OpenVINO GenAI (``whisper_openvino.py``): its text, language and segments; each piece of text
        as the pipeline decodes it goes to ``on_text`` (False: stop decoding)."""
        assert self.ov is not None
        text, language, chunks = self.ov.transcribe(item["samples"], item, on_text)
        item["language"] = item["language"] or (language if self.multilingual else "en")
        if not item["timestamps"]:
            return self.whole_file(item, text)
        # a segment the pipeline left open (no closing timestamp: end -1) runs to the end of the file, as in reply()
        segments = [self.segment(float(start), float(end) if end >= 0 else item["duration"], piece.strip(),
                                 item["duration"]) for start, end, piece in chunks]  # fmt: skip
        return self.result(item, text, [segment for segment in segments if segment["text"]])

    def transcribe_ctc(self, item):
        assert self.ctc is not None
        text, words = self.ctc.transcribe(item["samples"], item["timestamps"])
        if words is None:
            return self.whole_file(item, text)
        return self.result(item, text, [self.segment(start, end, word, item["duration"]) for start, end, word in words])

    def prepare(self, data, language, task, prompt):
        """One row's samples, features and prompt (BadRequest naming the input when unusable)."""
        samples = runtime.decode_audio(data, self.sampling_rate, self.max_seconds)
        if task == "translate" and not self.multilingual:
            raise runtime.BadRequest("is 'translate', which an English-only model cannot do.", "TASK")
        prompt_ids = None
        if prompt:
            prompt_ids = torch.tensor(self.processor.get_prompt_ids(prompt), dtype=torch.long)
            if len(prompt_ids) > self.max_tokens - 4:
                raise runtime.BadRequest(
                    f"is {len(prompt_ids)} tokens, over the {self.max_tokens - 4} a window leaves for it; "
                    "send the end of the text that came before.",
                    "PROMPT",
                )
        if self.ov is not None:  # the pipeline computes its own features, window after window
            return {"duration": len(samples) / self.sampling_rate, "language": language, "task": task,
                    "prompt": prompt, "samples": samples}  # fmt: skip
        long = len(samples) > self.window
        first = samples[: self.window]
        features = self.features(first, sampling_rate=self.sampling_rate, return_tensors="np")["input_features"][0]
        item = {"duration": len(samples) / self.sampling_rate, "language": language, "task": task,
                "prompt": prompt, "prompt_ids": prompt_ids, "features": features, "long": None}  # fmt: skip
        if long:
            whole = self.features(samples, sampling_rate=self.sampling_rate, return_tensors="np", truncation=False,
                                  padding="longest", return_attention_mask=True)  # fmt: skip
            item["long"] = (whole["input_features"], whole["attention_mask"])
        return item

    # ------------------------------------------------------------------ the model's work

    def encode_once(self, rows):
        """CTranslate2: the encoder's states of the first window of each row that needs them (its language is
        detected, or it is decoded in a group), computed once for both, so a detected row does not pay for its
        encoder twice. An English-only model detects nothing (its rows are English)."""
        assert self.ct2 is not None
        detected = self.multilingual  # else detect_languages sets "en" without the model
        wanted = [row for row, item in rows.items() if (detected and item["language"] is None) or self.grouped(item)]
        if wanted:
            states = self.ct2.encode(np.stack([rows[row]["features"] for row in wanted]))
            for row, row_states in zip(wanted, states):
                rows[row]["encoded"] = row_states

    def detect_languages(self, rows):
        """The language of each row that has none, from its first window (one pass for all of them)."""
        if not self.multilingual:
            for item in rows.values():
                item["language"] = item["language"] or "en"
            return
        unknown = [row for row, item in rows.items() if item["language"] is None]
        if unknown:
            if self.ct2 is not None:
                found = self.ct2.detect(np.stack([rows[row]["encoded"] for row in unknown]))
            else:
                stacked = torch.from_numpy(np.stack([rows[row]["features"] for row in unknown]))
                with torch.inference_mode():
                    found = self.model.detect_language(stacked.to(self.device, self.model.dtype))
                found = found.view(-1).tolist()
            for row, token in zip(unknown, found):
                rows[row]["language"] = self.codes[int(token)]

    def transcribe(self, rows, parts=None):
        """``{row: {text, language, duration, segments}}``: short greedy rows in groups, the rest alone (a streamed
        model's rows sent to ``parts`` as they advance)."""
        results = {}
        groups: dict[tuple, list[int]] = {}  # (language, task, timestamps, prompt, limit) -> rows
        for row, item in rows.items():
            if self.grouped(item):
                # With timestamps, transformers may decode a window twice (from its last complete segment), each
                # pass up to the limit: such rows share a generate only with rows of the same limit.
                limit = item["max_tokens"] if item["timestamps"] else None
                key = (item["language"], item["task"], item["timestamps"], item["prompt"], limit)
                groups.setdefault(key, []).append(row)
        for rows_of_group in groups.values():
            items = [rows[row] for row in rows_of_group]
            features = np.stack([item["encoded" if self.ct2 is not None else "features"] for item in items])
            tokens = self.generate(items[0], features, max(item["max_tokens"] for item in items))
            for row, item, found in zip(rows_of_group, items, tokens):
                results[row] = self.reply(item, self.kept(item, found))
                if parts is not None:
                    parts.whole(row, results[row])
        for row, item in rows.items():  # after the groups: a streamed short row is not held up by a long file
            if row in results:
                continue
            if parts is not None and parts.cancelled(row):
                results[row] = self.result(item, "", [])  # its caller left: nobody reads the answer
                continue
            results[row] = self.alone(item, None if parts is None else functools.partial(parts.window, row))
            if parts is not None and not self.windowed(item):
                parts.whole(row, results[row])
        return results

    def grouped(self, item):
        """Whether a row is decoded with others: a greedy file within one window. Timestamps are read window after
        window even within one (transformers seeks past the last complete segment): inside generate on PyTorch,
        row by row on CTranslate2."""
        looped = self.ct2 is not None and item["timestamps"]
        return item["long"] is None and item["temperature"] == 0.0 and not looped

    def options(self, item, max_new_tokens, **extra):
        """``generate``'s options for a row: its language, task and prompt, and ``extra``."""
        multilingual = self.multilingual
        options = {"language": item["language"] if multilingual else None, "task": item["task"] if multilingual
                   else None, "max_new_tokens": max_new_tokens, **extra}  # fmt: skip
        if item["prompt_ids"] is not None:
            options["prompt_ids"] = item["prompt_ids"].to(self.device)
        return options

    def generate(self, item, features, max_new_tokens, **extra):
        """Token ids per row (the decoder's prompt not included)."""
        if self.ct2 is not None:  # a row that samples runs alone (its temperature and seed decide)
            prompt = self.decoder_prompt(item, item["timestamps"])
            return self.ct2.generate(features, prompt, max_new_tokens, item["temperature"], item["seed"])
        options = self.options(item, max_new_tokens, return_timestamps=item["timestamps"], **extra)
        inputs = torch.from_numpy(np.ascontiguousarray(features)).to(self.device, self.model.dtype)
        with torch.inference_mode():
            out = self.model.generate(input_features=inputs, **options)
        return out["sequences"] if isinstance(out, dict) else out

    def decoder_prompt(self, item, timestamps):
        """The decoder's first tokens for a row, as transformers' ``generate`` builds them:
        ``[<|startofprev|> PROMPT] <|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>]``."""
        tokens = [int(token) for token in item["prompt_ids"]] if item["prompt_ids"] is not None else []
        tokens.append(int(self.generation.decoder_start_token_id))
        if self.multilingual:
            tokens += [self.languages[item["language"]], self.tokenizer.convert_tokens_to_ids(f"<|{item['task']}|>")]
        return tokens if timestamps else [*tokens, int(self.generation.no_timestamps_token_id)]

    def alone(self, item, on_window=None):
        """A row decoded on its own: a file longer than one window (long-form), a sampling row, or (CTranslate2) a
        row with timestamps; a row read window after window sends each window's segments to ``on_window`` (False:
        stop)."""
        if self.windowed(item):
            features = item["long"][0][0] if item["long"] is not None else item["features"]  # [mels, frames]
            if self.ct2 is not None:
                tokens, found = self.ct2.long_form(features, self.decoder_prompt(item, True), item["max_tokens"],
                                                   item["temperature"], item["seed"], on_window)  # fmt: skip
            else:
                tokens, found = self.read_windows(item, features, on_window)
            return self.long_reply(item, tokens, found)
        extra = self.sampling(item)
        if item["long"] is None:
            found = self.generate(item, item["features"][None], item["max_tokens"], **extra)[0]
            return self.reply(item, self.kept(item, found))
        features, mask = item["long"]
        options = self.options(item, item["max_tokens"], return_timestamps=True, return_segments=True, **extra)
        inputs = torch.from_numpy(features).to(self.device, self.model.dtype)
        with torch.inference_mode():
            out = self.model.generate(
                input_features=inputs, attention_mask=torch.from_numpy(mask).to(self.device), **options
            )
        found = [(segment["start"], segment["end"], segment["tokens"].tolist()) for segment in out["segments"][0]]
        return self.long_reply(item, out["sequences"][0].tolist(), found)

    @staticmethod
    def sampling(item):
        """``generate``'s options for a row that samples (its seed set once for the whole file), else none."""
        if item["temperature"] <= 0.0:
            return {}
        torch.manual_seed(item["seed"])
        return {"do_sample": True, "temperature": item["temperature"]}

    def read_windows(self, item, features, on_window):
        """A long file on PyTorch, window after window (``longform.py``): transformers' ``generate`` on each window
        alone, one pass (``force_unique_generate_call``), the tokens after the decoder's prompt. The same tokens
        and segments as ``generate`` over the whole file, which runs the same loop but keeps every window to
        itself until the end."""
        lead = self.decoder_prompt(item, True)
        options = self.options(item, item["max_tokens"], return_timestamps=True, force_unique_generate_call=True,
                               return_dict_in_generate=True, **self.sampling(item))  # fmt: skip

        def decode(window):
            inputs = torch.from_numpy(window[None]).to(self.device, self.model.dtype)
            with torch.inference_mode():
                sequence = self.model.generate(input_features=inputs, **options)["sequences"][0].tolist()
            if sequence[: len(lead)] != lead:  # transformers changed what it returns: fail, never a wrong text
                raise RuntimeError(f"generate returned {sequence[: len(lead)]} before the text, not the prompt {lead}")
            return self.ended(sequence[len(lead) :])

        return longform.read(features, decode, self.first_timestamp, on_window)

    def windowed(self, item):
        """Whether a row is read window after window by ``longform.py``: on CTranslate2 a long file or timestamps;
        on PyTorch a long file of a streamed model, whose windows are sent as they end (a plain model lets
        ``generate`` read the whole file, the same answer in one call)."""
        if self.ct2 is not None:
            return item["long"] is not None or item["timestamps"]
        return self.streaming and self.windows and item["long"] is not None

    def long_reply(self, item, tokens, found):
        """A long file's result: its text, and a segment per ``(start, end, tokens)`` that says something."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        return self.result(item, text, self.timed(item, found))

    def timed(self, item, found):
        """The segments of ``(start, end, tokens)`` that say something."""
        segments = []
        for start, end, piece in found:
            text = self.tokenizer.decode(piece, skip_special_tokens=True).strip()
            segments.append(self.segment(float(start), float(end), text, item["duration"]))
        return [segment for segment in segments if segment["text"]]

    def kept(self, item, tokens):
        """A short row's tokens up to its end-of-text; without timestamps, at most its own MAX_TOKENS (its group
        decoded up to the largest); with timestamps, every pass's tokens, each pass within the limit."""
        found = self.ended(tokens)
        return found if item["timestamps"] else found[: item["max_tokens"]]

    def ended(self, tokens):
        """Token ids up to (not including) the first end-of-text."""
        ids = [int(token) for token in tokens]
        return next((ids[:index] for index, token in enumerate(ids) if token in self.stops), ids)

    def reply(self, item, tokens):
        """A short row's result: its text, and segments from its timestamp tokens (or the whole file as one)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).strip()
        if not item["timestamps"]:
            return self.whole_file(item, text)
        segments, start = [], 0.0
        pending: list[int] = []  # text tokens since the last timestamp
        for token in tokens:
            if token >= self.first_timestamp:  # a timestamp closes the text before it and opens the next
                time = (token - self.first_timestamp) * 0.02  # Whisper's timestamps: 30 s over 1,500 steps
                if pending:
                    piece = self.tokenizer.decode(pending, skip_special_tokens=True).strip()
                    segments.append(self.segment(start, time, piece, item["duration"]))
                    pending = []
                start = time
            else:
                pending.append(token)
        if pending:
            piece = self.tokenizer.decode(pending, skip_special_tokens=True).strip()
            segments.append(self.segment(start, item["duration"], piece, item["duration"]))
        return self.result(item, text, [segment for segment in segments if segment["text"]])

    @staticmethod
    def segment(start, end, text, duration):
        start = min(max(start, 0.0), duration)  # within the file, to the centisecond (never past its end)
        end = min(max(end, start), duration)
        return {"start": min(round(start, 2), duration), "end": min(round(end, 2), duration), "text": text}

    def whole_file(self, item, text):
        """A row's result without timestamps: its text as one segment over the whole file."""
        return self.result(item, text, [self.segment(0.0, item["duration"], text, item["duration"])])

    @staticmethod
    def result(item, text, segments):
        return {"text": text, "language": item["language"], "duration": item["duration"], "segments": segments}

    def finalize(self):
        self.pipeline.close()
        ct2 = getattr(self, "ct2", None)  # a CTC model has none
        if ct2 is not None:
            ct2.close()


class Parts:
    """A streamed (decoupled) model's partial answers: each sent to its row's request as the row advances, the
    request's other rows empty; ``window`` text is as decoded (its spaces kept), so the parts add up to the text."""

    def __init__(self, model, batch, requests, rows):
        self.model = model
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

    def window(self, row, found):
        """One window's ``(start, end, tokens)`` of a row; False when its caller left (stop decoding it)."""
        tokens = [token for _, _, piece in found for token in piece]
        text = self.model.tokenizer.decode(tokens, skip_special_tokens=True)
        self.send(row, text if row in self.started else text.lstrip(), self.model.timed(self.rows[row], found))
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


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _is_text(value):
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True
