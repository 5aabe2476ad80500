"""File digests (no JAX): what run identities record of user code and data files."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

__all__ = ["file_sha256"]


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 (hex) of a file's bytes.

    Memoised on (path, size, modification time): a sweep validates its scenario once per
    run, and hashing a large data file that often would cost more than the check is worth.
    """
    stat = Path(path).stat()
    return _sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    del size, mtime_ns  # part of the cache key only
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
