"""``python -m tritonhf.serve WORKSPACE --host H --port P``: the gateway `tritonhf up --openai-port` runs."""

from __future__ import annotations

import argparse

from tritonhf.bootstrap.layout import Workspace
from tritonhf.serve.launch import gateway_key, gateway_url, run_gateway


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tritonhf.serve")
    parser.add_argument("workspace")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    workspace = Workspace.at(args.workspace)
    run_gateway(gateway_url(workspace), args.host, args.port, gateway_key(workspace, args.host))


if __name__ == "__main__":
    main()
