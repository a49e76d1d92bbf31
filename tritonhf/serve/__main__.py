"""``python -m tritonhf.serve --url URL --host H --port P [--metrics-url URL] [--repository DIR] [--api-key-file F]
[limits]``: the
gateway ``tritonhf up --openai-port`` runs (``bootstrap/gateway.py`` gives it these from the workspace)."""

from __future__ import annotations

import argparse
from pathlib import Path

from tritonhf.serve.launch import gateway_key, run_gateway
from tritonhf.serve.limits import Limits


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tritonhf.serve")
    parser.add_argument("--url", required=True, help="the Triton endpoint")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--metrics-url", default=None, help="Triton's metrics (the page shows the server's state)")
    parser.add_argument("--repository", type=Path, default=None, help="the served repository, for its tokenizers")
    parser.add_argument("--api-key-file", type=Path, default=None, help="the key clients must send (owner-only file)")
    Limits.add_arguments(parser)
    args = parser.parse_args()
    limits = Limits.from_arguments(args)
    key = gateway_key(args.api_key_file)
    run_gateway(args.url, args.host, args.port, key, limits, args.repository, args.metrics_url)


if __name__ == "__main__":
    main()
