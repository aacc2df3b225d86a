"""The pid a lock file's holder wrote in it (the build lock, serve's lock): read through
the lock's own descriptor, never trusted for more than naming who holds it. No TVM here."""

from __future__ import annotations

import os

from .digits import is_decimal


def pid_in(fd: int) -> int | None:
    """The pid written at the start of the lock file open as ``fd``; None when there is none."""
    try:
        text = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if is_decimal(text) else None
