"""Whether files still hold the bytes a build recorded (their sha256), without hashing
every file on every no-op build.

A large model's graph objects and library are ~100 MB each (about 0.2 s of sha256
apiece). Like git's index, a file whose size, mtime, ctime and inode are those it had
when its digest was last checked is taken as unchanged; any other file is hashed. An
edit changes the ctime even when the mtime is put back afterwards (``touch -d``,
``os.utime`` set the ctime to now), so a same-size edit with its mtime restored is still
hashed. Only changing the system clock, or writing to the disk under the file system,
gets past it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import atomic, regular_file
from .digest import file_digest


def signature(path: Path) -> list[int] | None:
    """The file's size, mtime, ctime and inode; None when it is missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def matches(path: Path, digest: str, checked: dict) -> bool | None:
    """Whether ``path`` holds the content of sha256 ``digest`` (None: it is missing).
    ``checked`` maps a path (str) to [signature, digest] as last verified; a file hashed
    here and found right is added to it."""
    sig = signature(path)
    if sig is None:
        return None
    if checked.get(str(path)) == [sig, digest]:
        return True
    try:
        ok = file_digest(path) == digest
    except OSError:
        return None
    if ok:
        checked[str(path)] = [sig, digest]
    return ok


def hashed(path: Path) -> tuple[str, list[int] | None]:
    """The sha256 of ``path``, and its signature when the file stayed the same while it was
    read (else None): an entry for ``checked``, [signature, sha256], of the file just hashed."""
    before = signature(path)
    digest = file_digest(path)
    return digest, before if before is not None and signature(path) == before else None


def read_checked(memo: Path) -> dict:
    """The paths last verified, from the memo file ``memo`` ({} when none or unreadable)."""
    try:
        data = json.loads(regular_file.read_text(memo))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_checked(memo: Path, checked: dict) -> None:
    try:
        atomic.write_text(memo, json.dumps(checked, sort_keys=True))
    except OSError:
        pass  # a memo only saves time: without it, the files are hashed again
