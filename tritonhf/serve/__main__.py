"""``python -m tritonhf.serve WORKSPACE --host H --port P [limits]``: the gateway `tritonhf up --openai-port` runs."""

from __future__ import annotations

import argparse

from tritonhf.bootstrap.layout import Workspace
from tritonhf.serve.launch import gateway_key, gateway_repository, gateway_url, run_gateway
from tritonhf.serve.limits import Limits


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tritonhf.serve")
    parser.add_argument("workspace")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    Limits.add_arguments(parser)
    args = parser.parse_args()
    workspace = Workspace.at(args.workspace)
    limits = Limits.from_arguments(args)
    key = gateway_key(workspace, args.host)
    run_gateway(gateway_url(workspace), args.host, args.port, key, limits, gateway_repository(workspace))


if __name__ == "__main__":
    main()
