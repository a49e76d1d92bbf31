"""The main job end to end: `tritonhf demo` offline, twice (the second run reuses everything)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _servers_of(workspace: Path) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "tritonserver" in command and str(workspace) in command:
            found.append(pid)
    return found


def _demo(workspace: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "tritonhf", "demo", "--workspace", str(workspace)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"},
    )
    return result, time.monotonic() - started


def test_demo_runs_offline_and_leaves_nothing_running(tmp_path: Path) -> None:
    workspace = tmp_path / "demo"
    first, first_time = _demo(workspace)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    library = re.compile(r"Loading weights|it/s\]|Looking in indexes|\[transformers\]|Warning:|WARNING")
    assert not [line for line in (out + first.stderr).splitlines() if library.search(line)], "the demo's own lines only"
    seed = re.search(r"(positive|negative)\s+([0-9.]+)\s+This movie is absolutely wonderful", out)
    assert seed and seed.group(1) == "positive" and float(seed.group(2)) > 0.8, out
    assert "The plot was boring" in out and re.search(r"negative\s+[0-9.]+\s+The plot was boring", out)
    similarity = re.search(r"1\. A cat sits on the mat\s+1\.00\s+([0-9.]+)\s+([0-9.-]+)", out)
    assert similarity and float(similarity.group(1)) > float(similarity.group(2)) + 0.3, "cat ~ kitten, not stocks"
    answer = out.split("assistant:", 1)[1].split("chunks,", 1)[0]
    assert len(re.findall(r"[A-Za-z]{3,}", answer)) >= 8, f"the chat answer should be words: {answer!r}"
    assert "avg batch" in out and "minilm-embed" in out
    # It ends with the OpenAI-compatible gateway: one curl, one call with the openai package.
    openai_part = out.split("OpenAI-compatible API", 1)[1]
    curl = re.search(r"-> (.+)\(usage: \{'prompt_tokens': (\d+), 'completion_tokens': (\d+)", openai_part)
    assert curl and len(re.findall(r"[A-Za-z]{3,}", curl.group(1))) >= 3 and int(curl.group(3)) > 0, openai_part
    embedded = re.search(r"2 vectors of 384 floats, cosine ([0-9.]+)", openai_part)
    assert embedded and float(embedded.group(1)) > 0.5, openai_part
    assert _servers_of(workspace) == []
    assert not (workspace / "run" / "server.json").exists()

    second, second_time = _demo(workspace)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "reused" in second.stdout and "already in the repository" in second.stdout
    assert _servers_of(workspace) == []
    print(f"demo: first run {first_time:.1f} s, second run {second_time:.1f} s")


def test_online_demo_without_hub_fails_with_a_clear_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tritonhf", "demo", "--online", "--workspace", str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 1
    assert "needs the HuggingFace hub" in result.stderr and "Traceback" not in result.stderr
    assert _servers_of(tmp_path / "ws") == []
