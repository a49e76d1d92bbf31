"""Colab as it is: a fresh environment with numpy 2 keeps it; the stub gets numpy < 2 of its own.

A new venv gets what a notebook has (numpy 2.x, torch 2.13.0 CPU, transformers), then this
project with ``pip install <folder>`` (not editable). Its own ``tritonhf`` command then runs
bootstrap, gallery add, up, classify, embed, a streamed generation and down; every answer is
checked against transformers, and numpy in that environment is still 2.x afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).parents[2]


def _run(command: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> str:
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


CHECK = """
import json, sys
import numpy as np
from tritonhf import Client
with Client() as client:
    label = client.classify("a wonderful movie", model="clf")
    vector = client.embed("the cat", model="emb")[0]
    stream = client.generate("the movie", model="gen", max_tokens=6, stream=True)
    chunks = list(stream)
print(json.dumps({"label": label.label, "score": label.score, "vector": vector.tolist(),
                  "text": "".join(chunks), "usage": stream.usage.completion_tokens, "numpy": np.__version__}))
"""


def test_a_notebook_environment_keeps_numpy_2(tmp_path: Path, tiny: dict[str, Path], installed_server: object) -> None:
    venv = tmp_path / "notebook"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
    _run([*pip, "torch==2.13.0", "numpy>=2", f"transformers=={transformers.__version__}"])  # what Colab has
    _run([*pip, str(ROOT)])  # this project, from its folder
    assert _run([python, "-c", "import numpy; print(numpy.__version__)"]).startswith("2.")

    env = {**os.environ, "TRITONHF_WORKSPACE": str(tmp_path / "ws"), "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    env.pop("TRITONHF_URL", None)
    cli = [str(venv / "bin" / "tritonhf")]
    out = _run([*cli, "bootstrap"], env)
    assert "stub environment" in out
    for task, source, name in (
        ("text-classification", "classifier", "clf"),
        ("feature-extraction", "encoder", "emb"),
        ("text-generation", "generator", "gen"),
    ):
        # the tiny GPT-2 on the transformers engine (auto would export it to OpenVINO IR: test_openvino_engine's)
        engine = ["--engine", "transformers"] if task == "text-generation" else []
        _run([*cli, "gallery", "add", task, "--model", str(tiny[source]), "--name", name, *engine], env)
    # three models load beside make test's other worker: more than up's default 60 s on 2 busy cores
    _run([*cli, "up", "--http-port", "auto", "--grpc-port", "auto", "--metrics-port", "auto", "--timeout", "300"], env)
    try:
        got = json.loads(_run([python, "-c", CHECK], env).strip().splitlines()[-1])
        doctor = _run([*cli, "doctor", "--workspace", str(tmp_path / "ws")], env)
    finally:
        _run([*cli, "down"], env)
    assert got["numpy"].startswith("2."), "the notebook's numpy is untouched"
    assert "numpy 1." in doctor and f"numpy {got['numpy']}" in doctor, "doctor shows both environments"

    import numpy as np
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny["classifier"])
    classifier = AutoModelForSequenceClassification.from_pretrained(tiny["classifier"]).eval()
    with torch.inference_mode():
        probabilities = torch.softmax(classifier(**tokenizer("a wonderful movie", return_tensors="pt")).logits[0], -1)
    assert got["label"] == classifier.config.id2label[int(probabilities.argmax())]
    assert abs(got["score"] - float(probabilities.max())) < 1e-4
    encoder = AutoModel.from_pretrained(tiny["encoder"]).eval()
    with torch.inference_mode():
        pooled = encoder(**AutoTokenizer.from_pretrained(tiny["encoder"])("the cat", return_tensors="pt"))
    vector = pooled.last_hidden_state[0].mean(0).numpy()
    np.testing.assert_allclose(got["vector"], vector / np.linalg.norm(vector), atol=1e-4)
    gen_tokenizer = AutoTokenizer.from_pretrained(tiny["generator"])
    generator = AutoModelForCausalLM.from_pretrained(tiny["generator"]).eval()
    ids = gen_tokenizer("the movie", return_tensors="pt")
    out = generator.generate(**ids, max_new_tokens=6, do_sample=False, pad_token_id=gen_tokenizer.eos_token_id)
    assert got["text"] == gen_tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert _run([python, "-c", "import numpy; print(numpy.__version__)"]).startswith("2.")
