"""What the tests and the benchmarks share: tiny models built locally (``tiny_models``) and the
batch-invariance harness (``invariance``). Not part of the tritonhf package; on pytest's path
(pyproject) and imported by ``bench/`` from the repository root, so bench imports nothing from tests/.
"""
