"""Reading the files modelbuild writes (outputs, stamps, memos, cache entries), which
something else may have replaced: a pipe where a file was makes a plain read wait forever,
a folder makes it fail with an error no step expects.

Anything but a regular file reads as missing (``NotRegular``, a FileNotFoundError): the
step that makes the file runs again and renames a new one over it (a folder in the way is
said: actions.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path


class NotRegular(FileNotFoundError):
    """The path is there, but is no regular file (a pipe, a device, a folder, a socket)."""


@contextlib.contextmanager
def opened(path: Path):
    """``path`` open for reading in binary, when it is a regular file (without blocking on
    a pipe to find out)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(errno.ENOENT, "not a regular file", str(path))
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def read_bytes(path: Path) -> bytes:
    with opened(path) as f:
        return f.read()


def read_text(path: Path) -> str:
    return read_bytes(path).decode("utf-8")


class TooLarge(OSError):
    """A file the user gave is larger than anything of its kind should be."""


def read_limited(path: Path, limit: int) -> bytes:
    """A file the user gave (a schedule record, a Python schedule): a regular file's bytes,
    at most ``limit`` of them. A pipe would make a read wait forever and a link to
    /dev/zero read until memory ran out: anything but a regular file is ``NotRegular``, a
    larger file ``TooLarge``."""
    with opened(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(errno.EFBIG, f"larger than {limit // (1 << 20)} MB", str(path))
    return data
