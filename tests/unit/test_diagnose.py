"""Each known failure, from a log line recorded on Triton 2.51, maps to a cause and a fix."""

from __future__ import annotations

import pytest

from tritonhf.bootstrap.diagnose import diagnose

RECORDED = {
    "config typo": [
        "[libprotobuf ERROR /tmp/tritonbuild/text_format.cc:337] Error parsing text-format "
        'inference.ModelConfig: 2:15: Message type "inference.ModelConfig" has no field named "max_batch_sise".',
        "E1202 09:21:35.108294 2597 model_repository_manager.cc:1460] \"Poll failed for model directory 'typo': "
        'failed to read text proto from repo2/typo/config.pbtxt"',
    ],
    "backend": [
        "E1202 09:21:35.108485 2597 model_lifecycle.cc:642] \"failed to load 'nobackend' version 1: Invalid "
        "argument: unable to find backend library for backend 'pythn', try specifying runtime on the model "
        'configuration."',
    ],
    # The same line as "backend", for the part of a `--backend onnx --onnx-runtime native` model.
    "onnxruntime": [
        "E1202 09:21:35.108485 2597 model_lifecycle.cc:642] \"failed to load 'emb__onnx' version 1: Invalid "
        "argument: unable to find backend library for backend 'onnxruntime', try specifying runtime on the model "
        'configuration."',
    ],
    "no version": [
        "E1202 12:05:58.836624 17861 model_repository_manager.cc:724] \"failed to load model 'floor': at least "
        "one version must be available under the version policy of model 'floor'\"",
    ],
    "module": [
        "E1202 09:21:35.134888 2597 model_lifecycle.cc:642] \"failed to load 'missing' version 1: Internal: "
        "ModuleNotFoundError: No module named 'not_a_module_xyz'\\n\\nAt:\\n  /tmp/repo/missing/1/model.py(1)\"",
    ],
    "numpy": [
        "Failed to process the request(s) for model 'clf_0_0', message: unpack_from requires a buffer of "
        "at least 286331157 bytes for unpacking"
    ],
    "stub": ["E1202 10:00:00.000000 1 python_be.cc:100] Stub process 'clf_0_0' is not healthy."],
    "shm": ["E1202 10:00:00.0 1 pb_stub.cc:1] Failed to increase the shared memory pool size for key 'x'"],
    "oom": ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
    "port": [
        'E1202 09:22:39.749495 2709 main.cc:257] "failed to start HTTP service: Unavailable - Socket '
        "'127.0.0.1:18100' already in use \""
    ],
    "glibc": ["tritonserver: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.35' not found"],
    "libpython": ["ImportError: /usr/lib/python3.11/lib-dynload/_ssl.so: undefined symbol: _PyModule_Add"],
    "missing lib": [
        "triton_python_backend_stub: error while loading shared libraries: libcudart.so.12: "
        "cannot open shared object file: No such file or directory"
    ],
}


@pytest.mark.parametrize(
    ("case", "model", "words"),
    [
        ("config typo", "typo", ["line 2", "max_batch_sise"]),
        ("backend", "nobackend", ["pythn", 'backend: "python"']),
        ("onnxruntime", "emb__onnx", ["onnxruntime backend", "Re-add model 'emb'", "--onnx-runtime python"]),
        ("no version", "floor", ["floor/1/", "gallery validate"]),
        ("module", "missing", ["not_a_module_xyz", "pip install not_a_module_xyz"]),
        ("numpy", None, ["numpy 2", "numpy<2"]),
        ("stub", "clf", ["stub process died"]),
        ("shm", None, ["/dev/shm"]),
        ("oom", None, ["GPU ran out of memory"]),
        ("port", None, ["127.0.0.1:18100", "auto"]),
        ("glibc", None, ["GLIBC_2.35", "glibc >= 2.35"]),
        ("libpython", None, ["libpython"]),
        ("missing lib", None, ["libcudart.so.12"]),
    ],
)
def test_recorded_failure_is_explained(case: str, model: str | None, words: list[str]) -> None:
    found = diagnose(RECORDED[case])
    assert len(found) == 1, found
    text = str(found[0])
    assert found[0].model == model
    assert found[0].fix
    for word in words:
        assert word in text


def test_unknown_model_failure_keeps_the_servers_words() -> None:
    line = "E1 model_lifecycle.cc:642] \"failed to load 'weird' version 1: Internal: something odd\\nmore\""
    (found,) = diagnose([line])
    assert found.model == "weird"
    assert "something odd" in found.cause


def test_ordinary_lines_are_not_failures() -> None:
    lines = [
        'I1202 09:21:23.293256 2483 http_server.cc:4713] "Started HTTPService at 127.0.0.1:18000"',
        "I1202 09:21:29.228926 2483 model_lifecycle.cc:624] \"successfully unloaded 'echo' version 1\"",
    ]
    assert diagnose(lines) == []
