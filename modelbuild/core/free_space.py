"""Room on a disk for an output, checked before a writer that cannot fail cleanly.

LLVM, which writes every object TVM makes for a CPU, ends the whole process when a write
fails ("LLVM ERROR: IO failure on output stream: No space left on device", status 1): no
error reaches Python, doit stops mid-run with no summary. So a step asks here first, and
a disk without room for the output (with a margin) is a clear failure of the step.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import BuildError

MARGIN = 16 * 1024 * 1024  # a kernel's object is kilobytes to a few megabytes


def available(folder: Path) -> int | None:
    """Bytes this process may still write on the file system of ``folder`` (root may use
    the blocks kept for it); None when the system cannot say."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize


def require(folder: Path, need: int, what: str, margin: int = MARGIN) -> None:
    """A BuildError unless ``folder``'s file system has room for ``need`` bytes and the
    margin. (A quota is not seen here: its write fails as an ordinary OSError.)"""
    free = available(folder)
    if free is None or free >= need + margin:
        return
    raise BuildError(
        f"no room to write {what}: {_mb(free)} free on the disk of {folder}, "
        f"{_mb(need + margin)} needed (with a margin)",
        hint="free space on that disk and rerun the same command: what finished is kept "
             "(the build folder is <project>/build; the cache, $MODELBUILD_CACHE or "
             "[tool.modelbuild] cache-dir, may live on another disk)")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"
