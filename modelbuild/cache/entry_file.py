"""An entry as a file of a folder store (the local cache, a file:// remote): read with its
size checked first, written without following a link.

Reading: the header line first (entry_format.declared_size); an entry whose size on
disk is not the header's length plus the payload size it declares is damaged, and is
found so without reading its payload (a sparse file of gigabytes behind an intact
header costs a stat, not a read into memory).

Writing into a shared folder: ``<root>/<kind>/<key[:2]>/<key>`` is a tree of plain
folders. Each folder below the root is opened by its name in the one above it, never
following a link (O_NOFOLLOW, dir_fd), the temporary file is made there (O_EXCL,
O_NOFOLLOW) and renamed within that folder, so no check can be raced between it and the
write: a kind or shard folder that is a link (to anywhere: another user's folder) gets
nothing (``Linked``). The root itself is the user's to name, and may be a link.
No TVM here.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from pathlib import Path

from ..core import regular_file
from .entry_format import HEADER_BYTES, declared_size

_CHUNK = 256 << 20  # reads between looks at a given-up request (remote.py)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class TooLarge(FileNotFoundError):
    """An entry that declares more payload than any of its kind has: a miss."""


class GivenUp(FileNotFoundError):
    """A read its request's timeout gave up: a miss."""


class Linked(OSError):
    """A folder of the store (``component``, from its root) is a symbolic link."""

    def __init__(self, component: str):
        super().__init__(errno.ELOOP, "a symbolic link, not a folder of the store", component)
        self.component = component


def read(path: Path, most: int | None = None, given_up: threading.Event | None = None) -> bytes:
    """The entry at ``path`` (a regular file: anything else is regular_file.NotRegular),
    header and payload when its size is what its header says; else only its first bytes
    (at most HEADER_BYTES, never a whole payload), which entry_format finds damaged.
    ``most``: the largest payload its kind has (TooLarge past it); ``given_up``: stop
    (GivenUp) when it is set."""
    with regular_file.opened(path) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(min(size, HEADER_BYTES))
        sizes = declared_size(head)
        if sizes is None:
            return head  # no header line of this format: damaged (or an earlier format)
        line, payload = sizes
        if size != line + payload:
            # the header line and one byte less or more than it declares: damaged
            return head[:line + (payload == 0)]
        if most is not None and payload > most:
            raise TooLarge(errno.EFBIG, f"a payload of {payload} bytes", str(path))
        chunks, left = [head], size - len(head)
        while left > 0:
            if given_up is not None and given_up.is_set():
                raise GivenUp(errno.ECANCELED, "the request was given up", str(path))
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break  # cut short meanwhile: damaged
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def write(root: str, kind: str, key: str, entry: bytes) -> bool:
    """Store ``entry`` as ``<root>/<kind>/<key[:2]>/<key>``, atomically, through plain
    folders only; whether it was stored (False: a folder is in the entry's place).
    Linked: a folder below the root is a link (nothing written)."""
    os.makedirs(root, exist_ok=True)
    fds = [os.open(root, _DIR)]
    try:
        for depth, name in enumerate((kind, key[:2])):
            fds.append(_subfolder(fds[-1], name, "/".join((kind, key[:2])[:depth + 1])))
        folder = fds[-1]
        tmp = f".{key}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(entry)
            # rename within the folder: the entry's own name, were it a link, is replaced
            os.replace(tmp, key, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException as err:
            try:
                os.unlink(tmp, dir_fd=folder)
            except OSError:
                pass
            if isinstance(err, IsADirectoryError):
                return False  # one entry's place taken: the others still go up
            raise
        return True
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _subfolder(parent: int, name: str, shown: str) -> int:
    """The folder ``name`` in ``parent``, made if missing, opened without following a link."""
    for _ in range(2):
        try:
            return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                pass  # another writer made it meanwhile
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                    os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                raise Linked(shown) from None
            raise
    return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=parent)
