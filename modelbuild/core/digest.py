"""sha256 digests of bytes and of files: the one helper every key, stamp and check uses."""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import regular_file

_CHUNK = 1 << 20


def bytes_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    """The sha256 of a file's content, read in chunks (a model file can be large)."""
    digest = hashlib.sha256()
    with regular_file.opened(path) as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
