"""What every Whisper engine of the speech template shares (tritonhf gallery template).

``WhisperEngine`` reads a row's options as the model knows them (its languages, translate, a prompt
within the window), prepares its features, and turns tokens back into text and timed segments. The
engines beside it (``pytorch_engine.py``, ``ctranslate2_engine.py``, ``openvino_engine.py``) add only how tokens
come out of the model: ``encode`` (the states of each row's first window, where the engine can reuse them),
``detect`` (a language token per row), ``decode_group`` (short greedy rows decoded together), and
``alone`` (a row decoded by itself: a long file, a sampling row). ``transcribe`` drives them the same
way whichever runs: files within one window are decoded together, one call per group of rows that
share language, task, timestamps and prompt (all windows are the same size, so nothing is padded
and no row depends on another); the rest run alone, after the groups, so a streamed short row is
not held up by a long file.
"""

import functools

import numpy as np
import segments
import torch
import tritonhf_runtime as runtime


class WhisperEngine:
    """Whisper's rules over a model's ``processor``, ``generation`` config and ``config``; an engine subclasses
    it and says how tokens come out of its model."""

    def __init__(self, processor, generation, config, streaming):
        self.processor = processor
        self.features = processor.feature_extractor
        self.tokenizer = processor.tokenizer
        self.generation = generation
        self.streaming = streaming
        self.window = self.features.n_samples  # samples in one window (30 s for Whisper)
        lang_to_id = getattr(generation, "lang_to_id", None) or {}
        self.languages = {token.strip("<|>"): token_id for token, token_id in lang_to_id.items()}
        self.multilingual = bool(getattr(generation, "is_multilingual", False)) and bool(self.languages)
        self.codes = {token_id: code for code, token_id in self.languages.items()}
        # Half the decoder's context per window, as Whisper was trained (the rest: task tokens and the prompt).
        self.max_tokens = config.max_target_positions // 2
        self.first_timestamp = generation.no_timestamps_token_id + 1
        # longform.py reads as transformers does unless the generation config asks for what it does not do:
        # previous windows' text in the decoder's prompt, or skipping windows it scores as silence
        self.asked = runtime.long_form_settings(generation)
        eos = generation.eos_token_id
        self.stops = set(eos if isinstance(eos, list) else [eos])  # end-of-text ids, read once

    def refuse_long_form_settings(self, engine):
        """An engine that reads long files only window after window refuses a model that asks otherwise
        (``gallery add`` serves such a model with PyTorch)."""
        if self.asked:
            raise ValueError(
                f"This Whisper's generation config sets {' and '.join(self.asked)}, which the {engine} reader does "
                "not do: add the model again with --backend pytorch."
            )

    # ------------------------------------------------------------------ a row's options and features

    def check(self, options):
        """A row's options as this model reads them (LANGUAGE as its code or None to detect, a prompt's token ids);
        BadRequest naming the input it cannot honour."""
        options["language"] = self.language(options["language"])
        if options["task"] == "translate" and not self.multilingual:
            raise runtime.BadRequest("is 'translate', which an English-only model cannot do.", "TASK")
        options["prompt_ids"] = None
        if options["prompt"]:
            prompt_ids = torch.tensor(self.processor.get_prompt_ids(options["prompt"]), dtype=torch.long)
            if len(prompt_ids) > self.max_tokens - 4:
                raise runtime.BadRequest(
                    f"is {len(prompt_ids)} tokens, over the {self.max_tokens - 4} a window leaves for it; "
                    "send the end of the text that came before.",
                    "PROMPT",
                )
            options["prompt_ids"] = prompt_ids
        options["max_tokens"] = options["max_tokens"] or self.max_tokens

    def language(self, code):
        """LANGUAGE as the model's code, or None to detect it; BadRequest for one it does not know."""
        code = code.lower().strip("<|>")
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

    def prepare(self, samples, options):
        """A row: its options, its first window's features, and a long file's whole features with their mask."""
        rate = self.features.sampling_rate
        first = self.features(samples[: self.window], sampling_rate=rate, return_tensors="np")["input_features"][0]
        item = {**options, "duration": len(samples) / rate, "features": first, "long": None}
        if len(samples) > self.window:
            whole = self.features(samples, sampling_rate=rate, return_tensors="np", truncation=False,
                                  padding="longest", return_attention_mask=True)  # fmt: skip
            item["long"] = (whole["input_features"], whole["attention_mask"])
        return item

    # ------------------------------------------------------------------ the engine's part

    def encode(self, rows):
        """Where an engine reuses the encoder's states of a row's first window (for detection and decoding): sets
        ``rows[row]["encoded"]``; by default nothing."""

    def detect(self, items):
        """The language token id of each of ``items``, from its first window."""
        raise NotImplementedError

    def decode_group(self, items, max_new_tokens):
        """Token ids per row of a group decoded together (the decoder's prompt not included)."""
        raise NotImplementedError

    def alone(self, item, on_window=None):
        """A row decoded on its own; a row read window after window sends each window's ``(start, end, tokens)``
        to ``on_window`` (False: stop)."""
        raise NotImplementedError

    def windowed(self, item):
        """Whether a row is read window after window (``longform.py``), its parts sent as each window ends."""
        return False

    def grouped(self, item):
        """Whether a row is decoded with others: a greedy file within one window."""
        return item["long"] is None and item["temperature"] == 0.0

    def close(self):
        """What the engine holds beyond the stub's life (threads)."""

    # ------------------------------------------------------------------ transcribing a batch

    def transcribe(self, rows, parts=None):
        """``{row: {text, language, duration, segments}}``: short greedy rows in groups, the rest alone (a streamed
        model's rows sent to ``parts`` as they advance); a row decoded alone that the engine refused (BadRequest)
        maps to its error."""
        self.encode(rows)
        self.detect_languages(rows)
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
            tokens = self.decode_group(items, max(item["max_tokens"] for item in items))
            for row, item, found in zip(rows_of_group, items, tokens):
                results[row] = self.reply(item, self.kept(item, found))
                if parts is not None:
                    parts.whole(row, results[row])
        for row, item in rows.items():
            if row in results:
                continue
            if parts is not None and parts.cancelled(row):
                results[row] = segments.result(item, "", [])  # its caller left: nobody reads the answer
                continue
            on_window = None if parts is None else functools.partial(parts.window, row, self)
            try:
                results[row] = self.alone(item, on_window)
            except runtime.BadRequest as refused:  # what only decoding could tell: this row's error, the others go on
                results[row] = refused
                continue
            if parts is not None and not self.windowed(item):
                parts.whole(row, results[row])
        return results

    def detect_languages(self, rows):
        """The language of each row that has none, from its first window (one pass for all of them)."""
        if not self.multilingual:
            for item in rows.values():
                item["language"] = item["language"] or "en"
            return
        unknown = [row for row, item in rows.items() if item["language"] is None]
        if unknown:
            for row, token in zip(unknown, self.detect([rows[row] for row in unknown])):
                rows[row]["language"] = self.codes[int(token)]

    def decoder_prompt(self, item, timestamps):
        """The decoder's first tokens for a row, as transformers' ``generate`` builds them:
        ``[<|startofprev|> PROMPT] <|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>]``."""
        tokens = [int(token) for token in item["prompt_ids"]] if item["prompt_ids"] is not None else []
        tokens.append(int(self.generation.decoder_start_token_id))
        if self.multilingual:
            tokens += [self.languages[item["language"]], self.tokenizer.convert_tokens_to_ids(f"<|{item['task']}|>")]
        return tokens if timestamps else [*tokens, int(self.generation.no_timestamps_token_id)]

    @staticmethod
    def stacked(items, key="features"):
        return np.stack([item[key] for item in items])

    # ------------------------------------------------------------------ tokens to text and segments

    def kept(self, item, tokens):
        """A short row's tokens up to its end-of-text; without timestamps, at most its own MAX_TOKENS (its group
        decoded up to the largest); with timestamps, every pass's tokens, each pass within the limit."""
        found = self.ended(tokens)
        return found if item["timestamps"] else found[: item["max_tokens"]]

    def ended(self, tokens):
        """Token ids up to (not including) the first end-of-text."""
        ids = [int(token) for token in tokens]
        return next((ids[:index] for index, token in enumerate(ids) if token in self.stops), ids)

    def decode(self, tokens):
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def reply(self, item, tokens):
        """A short row's result: its text, and segments from its timestamp tokens (or the whole file as one)."""
        text = self.decode(tokens).strip()
        if not item["timestamps"]:
            return segments.whole_file(item, text)
        found, start = [], 0.0
        pending: list[int] = []  # text tokens since the last timestamp
        for token in tokens:
            if token >= self.first_timestamp:  # a timestamp closes the text before it and opens the next
                time = (token - self.first_timestamp) * 0.02  # Whisper's timestamps: 30 s over 1,500 steps
                if pending:
                    found.append((start, time, self.decode(pending).strip()))
                    pending = []
                start = time
            else:
                pending.append(token)
        if pending:
            found.append((start, item["duration"], self.decode(pending).strip()))
        return segments.result(item, text, segments.timed(item, found))

    def long_reply(self, item, tokens, found):
        """A long file's result: its text, and a segment per ``(start, end, tokens)`` that says something."""
        return segments.result(item, self.decode(tokens).strip(), self.timed(item, found))

    def timed(self, item, found):
        """The segments of ``(start, end, tokens)`` that say something."""
        return segments.timed(item, [(start, end, self.decode(piece).strip()) for start, end, piece in found])
