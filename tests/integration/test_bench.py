"""`tritonhf bench` against the shared server: figures, JSON, plot; loopback only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tritonhf.bootstrap import Server
from tritonhf.errors import InvalidInputError
from tritonhf.loadgen import ensure_loopback

pytestmark = pytest.mark.integration


def test_bench_reports_levels_with_server_view(served: Server, tmp_path: Path) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonhf",
            "bench",
            "embed",
            "--url",
            served.grpc_url,
            "--concurrency",
            "1,4",
            "--requests",
            "40",
            "--json",
            str(out),
            "--plot",
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert [level["concurrency"] for level in figures["levels"]] == [1, 4]
    for level in figures["levels"]:
        assert level["requests"] == 40 and level["errors"] == 0 and level["throughput"] > 0
        assert 0 < level["client_cores"] < 64  # the load generator's own CPU, in cores
        assert level["server"]["compute_ms"] > 0
        assert level["server"]["requests"] == 40
        assert sum(int(size) * count for size, count in level["server"]["batch_sizes"].items()) == 40
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "grpc://example.com:8001"])
def test_bench_refuses_other_machines(url: str) -> None:
    with pytest.raises(InvalidInputError, match="loopback"):
        ensure_loopback(url)
    ensure_loopback("http://127.0.0.1:8000")
    ensure_loopback("grpc://localhost:8001")
