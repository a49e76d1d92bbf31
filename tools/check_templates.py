"""mypy over every gallery template folder, one folder at a time (each has its own ``model.py``).

    python tools/check_templates.py

The templates run inside Triton's stub, not as part of tritonhf: they import
``triton_python_backend_utils`` and ``tritonhf_runtime`` (the runtime copied beside each model),
both typed under ``stubs/``. Run by ``make lint``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "tritonhf" / "gallery" / "templates"


def main() -> int:
    failed = 0
    with tempfile.TemporaryDirectory() as cache:
        for folder in sorted(path for path in TEMPLATES.iterdir() if (path / "model.py").is_file()):
            env = {**os.environ, "MYPYPATH": f"{ROOT / 'stubs'}{os.pathsep}{folder}"}
            command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "stubs" / "mypy-templates.ini"),
                       "--cache-dir", cache]  # fmt: skip
            for module in sorted(path.stem for path in folder.glob("*.py")):  # by module name, as the stub imports them
                command += ["-m", module]
            result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                failed += 1
                print(result.stdout + result.stderr, end="")
    print(f"templates: {'all clean' if not failed else f'{failed} folder(s) with errors'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
