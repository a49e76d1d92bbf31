"""A speech row's answer, as every engine of the speech template gives it (tritonhf gallery template).

A result is ``{text, language, duration, segments}``; a segment is ``{start, end, text}`` in seconds from
the file's start, within the file, to the centisecond.
"""


def segment(start, end, text, duration):
    start = min(max(start, 0.0), duration)  # within the file, to the centisecond (never past its end)
    end = min(max(end, start), duration)
    return {"start": min(round(start, 2), duration), "end": min(round(end, 2), duration), "text": text}


def timed(item, found):
    """The segments of ``(start, end, text)`` that say something."""
    made = [segment(float(start), float(end), text, item["duration"]) for start, end, text in found]
    return [one for one in made if one["text"]]


def result(item, text, segments):
    return {"text": text, "language": item["language"], "duration": item["duration"], "segments": segments}


def whole_file(item, text):
    """A row's result without timestamps: its text as one segment over the whole file."""
    return result(item, text, [segment(0.0, item["duration"], text, item["duration"])])
