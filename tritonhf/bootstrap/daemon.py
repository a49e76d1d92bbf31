"""``python -m tritonhf.bootstrap.daemon WORKSPACE``: the detached supervisor `tritonhf up` starts.

It builds the ``Stack`` the state file describes (alive or not: the server may already have
died in the second this process took to start, and restarting it is exactly the job) and
runs the ``Supervisor`` on it until ``tritonhf down`` sends SIGTERM or removes the state file.
"""

from __future__ import annotations

import signal
import sys

from tritonhf.bootstrap.stack import Stack
from tritonhf.bootstrap.supervisor import Supervisor


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    stack = Stack.from_state(args[0])
    # A server this process restarts must outlive it like the one `up` started: `down` stops
    # the supervisor first, then the server, gracefully.
    stack.server.die_with_parent = False
    supervisor = Supervisor(stack.server, gateway=stack)
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stopped.set())
    supervisor.run()


if __name__ == "__main__":
    main()
