"""Whisper's long-form rule, for both engines of the speech template (tritonhf gallery template).

A file is read window after window (30 s, 3000 feature frames), each window starting where the
last complete segment of the one before ended (or after the window, when it ended in a single
timestamp), times counted from the file's start: what transformers' ``generate`` does over a
long file (``generation_whisper.py``: ``_retrieve_segment``), here one window at a time, so each
window's segments can be sent as soon as it is read. ``decode`` is the engine's: one padded window
in, its generated tokens out (CTranslate2's ``generate``, or transformers' ``generate`` on that
window alone). Checked against transformers' own loop on the test models: the same tokens and
segments, greedy or sampling, with or without a prompt, translate or transcribe.
"""

import numpy as np

WINDOW_FRAMES = 3000  # feature frames in 30 s (10 ms each)
INPUT_STRIDE = 2  # feature frames per encoder position (a timestamp step is 0.02 s)
TIME_STEP = 0.02


def read(features, decode, timestamp_begin, on_window=None):
    """``(tokens, [(start, end, tokens)])`` over a file's whole ``features`` [mels, frames] (a short file: its
    one window of 3000 frames); each window's segments go to ``on_window`` as it ends (False: stop there)."""
    frames = features.shape[-1]
    seek, segments, everything = 0, [], []
    while seek < frames:
        count = min(frames - seek, WINDOW_FRAMES)
        window = np.zeros((features.shape[0], WINDOW_FRAMES), np.float32)
        window[:, :count] = features[:, seek : seek + count]  # zeros past the file, as transformers pads
        found, advance = split(decode(window), seek * 0.01, count, timestamp_begin)  # 10 ms per feature frame
        segments += found
        for _, _, piece in found:
            everything += piece
        seek += advance
        if on_window is not None and on_window(found) is False:
            break
    return everything, segments


def split(tokens, offset, count, timestamp_begin):
    """One window's tokens as segments ``(start, end, tokens)`` and the frames to move on by."""
    stamp = [token >= timestamp_begin for token in tokens]
    single_ending = stamp[-2:] == [False, True]
    cuts = [index + 1 for index in range(len(tokens) - 1) if stamp[index] and stamp[index + 1]]
    if not cuts:  # no segment closed: the whole window is one, ending at its last timestamp if any
        end = int(count * 0.01 / TIME_STEP) * TIME_STEP
        stamps = [token for token, is_stamp in zip(tokens, stamp) if is_stamp]
        if stamps and stamps[-1] != timestamp_begin:
            end = (stamps[-1] - timestamp_begin) * TIME_STEP
        return [(offset, offset + end, tokens)], count
    if single_ending:
        cuts.append(len(tokens))
    else:
        cuts[-1] += 1  # the last segment keeps its closing timestamp
    segments = []
    last = 0
    for index, cut in enumerate(cuts):
        piece = tokens[last:cut]
        closing = piece[-1] if index < len(cuts) - 1 or single_ending else piece[-2]
        start = (piece[0] - timestamp_begin) * TIME_STEP
        segments.append((offset + start, offset + (closing - timestamp_begin) * TIME_STEP, piece))
        last = cut
    if single_ending:  # nothing said after the last timestamp: the window is done
        return segments, count
    return segments, (tokens[last - 2] - timestamp_begin) * INPUT_STRIDE
