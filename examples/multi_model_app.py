"""A small app on a multi-model server: rank reviews by sentiment, group similar ones, answer.

Start a server with the demo's models first (`tritonhf demo --keep-running`), then:
    python examples/multi_model_app.py
"""

from __future__ import annotations

import numpy as np

from tritonhf import Client

REVIEWS = [
    "The acting was superb and the story moving.",
    "Two hours I will never get back.",
    "Beautiful photography, weak script.",
    "A joy from start to finish.",
]


def main() -> None:
    with Client() as client:
        ranked = sorted(zip(client.classify(REVIEWS), REVIEWS), key=lambda pair: -pair[0].score)
        for result, review in ranked:
            print(f"{result.label:>9} {result.score:.2f}  {review}")
        vectors = client.embed(REVIEWS)
        best = (vectors @ vectors.T - 2 * np.eye(len(REVIEWS))).argmax(axis=1)  # not itself
        for index, review in enumerate(REVIEWS):
            print(f"{review!r} is closest to {REVIEWS[best[index]]!r}")
        question = [{"role": "user", "content": "Summarise in one sentence: " + " ".join(REVIEWS)}]
        for chunk in client.chat(question, max_tokens=40, stream=True):
            print(chunk, end="", flush=True)
        print()


if __name__ == "__main__":
    main()
