"""Fail when a tracked file is over 1 MB and not declared in tools/large-files.txt.

Leftovers of tools that write into the working directory (ONNX Runtime's quantization
pre-processing once left a 90 MB ``*.data`` file at the root) end up in every clone; a file
that really belongs in the repository is declared, with why, in ``tools/large-files.txt``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIMIT = 1_000_000
DECLARED = Path(__file__).with_name("large-files.txt")


def main() -> int:
    root = Path(
        subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    declared = {
        line.split("#", 1)[0].strip() for line in DECLARED.read_text().splitlines() if line.split("#", 1)[0].strip()
    }
    large = []
    for raw in tracked:
        name = raw.decode()
        path = root / name
        if name and path.is_file() and path.stat().st_size > LIMIT and name not in declared:
            large.append(f"{name} ({path.stat().st_size / 1e6:.1f} MB)")
    if large:
        print("Tracked files over 1 MB that tools/large-files.txt does not declare:", *large, sep="\n  ")
        print("Remove them (git rm --cached), or declare them there with the reason.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
