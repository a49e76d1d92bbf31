"""The Python backend's shared-memory regions in /dev/shm, one per stub, named by our prefix.

Each server start gets its own prefix (``triton_python_backend_shm_region_thf<random>_``), so
its regions, and its stubs (whose argv names the region), can be told from anyone else's.
A crashed stub or a killed server leaves its region behind; these functions remove them.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SHM_BASE_PREFIX = "triton_python_backend_shm_region_"


def new_prefix() -> str:
    return f"{SHM_BASE_PREFIX}thf{uuid.uuid4().hex[:10]}_"


def shm_regions(prefix: str) -> list[Path]:
    """Shared-memory regions whose names start with ``prefix`` (one server's)."""
    if not SHM_DIR.is_dir() or not prefix:
        return []
    return sorted(path for path in SHM_DIR.iterdir() if path.name.startswith(prefix))


def remove_shm_regions(prefix: str) -> int:
    removed = 0
    for region in shm_regions(prefix):
        with contextlib.suppress(OSError):
            region.unlink()
            removed += 1
    return removed
