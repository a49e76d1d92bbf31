"""Model repositories in object storage (S3 and S3-compatible): push and pull.

URLs, credentials and the check that names the real cause of a failure are the server's
(``bootstrap/s3.py``); the same ones are used here.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tritonhf._progress import Progress, SilentProgress
from tritonhf.bootstrap.s3 import S3Location, check, client, explain, object_keys
from tritonhf.errors import StorageError

__all__ = ["S3Location", "check", "client", "pull", "push"]


def push(repository: Path, url: str, progress: Progress | None = None) -> list[str]:
    """Upload every model folder of ``repository`` under ``url``; each model's old objects there go.

    Models already at ``url`` that are not in ``repository`` are left as they are.
    """
    progress = progress or SilentProgress()
    location = S3Location.parse(url)
    models = sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not models:
        raise StorageError(f"{repository} holds no model folder to push.")
    s3 = client(location)
    try:
        s3.head_bucket(Bucket=location.bucket)
        for folder in models:
            progress.step(f"Uploading {folder.name} to {location.url}/{folder.name}")
            files = sorted(f for f in folder.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
            wanted = {location.key(f.relative_to(repository).as_posix()) for f in files}
            total = sum(f.stat().st_size for f in files)
            done = 0
            for file in files:
                s3.upload_file(str(file), location.bucket, location.key(file.relative_to(repository).as_posix()))
                done += file.stat().st_size
                progress.advance(done, total)
            stale = [key for key in object_keys(s3, location, location.key(folder.name + "/")) if key not in wanted]
            for start in range(0, len(stale), 1000):
                s3.delete_objects(
                    Bucket=location.bucket, Delete={"Objects": [{"Key": key} for key in stale[start : start + 1000]]}
                )
    except StorageError:
        raise
    except Exception as exc:
        raise explain(exc, location) from exc
    return [folder.name for folder in models]


def pull(url: str, repository: Path, progress: Progress | None = None) -> list[str]:
    """Download every model under ``url`` into ``repository`` (each replaces a local model of its name)."""
    progress = progress or SilentProgress()
    location = S3Location.parse(url)
    models = check(url)
    s3 = client(location)
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=repository.parent))
    try:
        for name in models:
            progress.step(f"Downloading {name} from {location.url}")
            for key in object_keys(s3, location, location.key(name + "/")):
                relative = key[len(location.key("")) :]
                target = staging / relative
                if ".." in Path(relative).parts:
                    raise StorageError(f"Object {key!r} would be written outside the repository.")
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(location.bucket, key, str(target))
        for name in models:
            shutil.rmtree(repository / name, ignore_errors=True)
            (staging / name).replace(repository / name)
    except StorageError:
        raise
    except Exception as exc:
        raise explain(exc, location) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return models
