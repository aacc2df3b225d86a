"""Write files so that a reader sees either the old content or the new, never half."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

# A temporary file (a name from temp_path_for) untouched this long is a killed writer's.
ABANDONED_AFTER_S = 3600.0


def temp_path_for(path: Path, suffix: str = ".tmp") -> Path:
    """A fresh temporary path beside ``path`` (same file system), ending in ``suffix``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    return Path(name)


_RANDOM = re.compile(r"[a-z0-9_]{8}")  # the part of a name mkstemp makes up


def temp_files_of(path: Path, suffix: str = ".tmp") -> list[Path]:
    """The temporary files beside ``path`` that ``temp_path_for(path, suffix)`` made and
    nobody removed (a killed writer's, or one still being written): its name's pattern
    exactly, so no other file's (another output's, the user's)."""
    prefix = f".{path.name}."
    try:
        names = [p.name for p in path.parent.iterdir()]
    except OSError:
        return []
    return [path.parent / n for n in names if n.startswith(prefix) and n.endswith(suffix)
            and _RANDOM.fullmatch(n[len(prefix):len(n) - len(suffix)])]


def in_flight(path: Path) -> bool:
    """Whether ``path`` may be another writer's temporary file, still being written.

    A sweep of a folder (the outputs of workloads a model no longer has, files an earlier
    partition had) must leave those alone: another doit process on the same model may be
    writing one, and would fail on finding it gone. Temporary names start with a dot; one
    unchanged for an hour is a killed writer's and can go."""
    if not path.name.startswith("."):
        return False
    try:
        return time.time() - path.stat().st_mtime < ABANDONED_AFTER_S
    except FileNotFoundError:
        return False


def sweep(paths, keep) -> None:
    """Remove the files among ``paths`` that ``keep(path)`` does not want, leaving another
    writer's temporary files (``in_flight``) alone."""
    for path in paths:
        if path.is_file() and not keep(path) and not in_flight(path):
            path.unlink(missing_ok=True)


def current_umask() -> int:
    """The process's umask (reading it means setting it: it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def commit(tmp: Path, path: Path, executable: bool = False, private: bool = False) -> None:
    """Move a finished temporary file into place atomically, with ordinary permissions
    (``private``: readable by its owner only, as mkstemp made it).

    (mkstemp makes files private; a build output should be like any file the user makes.)
    """
    if not private:
        os.chmod(tmp, (0o777 if executable else 0o666) & ~current_umask())
    os.replace(tmp, path)


def write_bytes(path: Path, data: bytes, private: bool = False) -> None:
    tmp = temp_path_for(path)
    try:
        tmp.write_bytes(data)
        commit(tmp, path, private=private)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None:  # a failed write names no file: name the one meant
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str, private: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), private=private)
