"""Whether the `serve` that build/.executor.json names is alive, and who it is.

`serve` holds an exclusive ``flock`` on build/.serve-lock while it runs, its pid
written in it; the kernel lets go of it when serve dies, however it dies. A build
trusts the address file only while that lock is held by the pid the file names: a
pid check alone trusted the file a SIGKILLed serve left once its pid was another
program's, and sent every step to whatever scheduler then listened on its port.

The file also holds a random token (the file is readable by its owner only), which
serve sets on its scheduler as Dask metadata (``TOKEN_KEY``); a build's client asks
the scheduler for it before it sends any step (executor.py). Another scheduler on
that address cannot answer it: the build then runs its steps itself.

A look at the lock takes it for an instant when no one holds it (flock has no test
alone); the address file is removed then, under the lock, so a serve starting at
that moment never loses its new file.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from ..core.lock_holder import pid_in
from ..core.paths import Project

TOKEN_KEY = "modelbuild-serve-token"

HELD = "held"  # by the pid the address file names
FREE = "free"  # by no process: no serve runs
OTHER = "other"  # by another process (a serve starting, after one killed outright)
UNKNOWN = "unknown"  # cannot be told (no lock file can be made or locked there)


def lock_file(project: Project) -> Path:
    """serve's, one per project (".serve.lock" was the build lock of a model named serve)."""
    return project.build_dir / ".serve-lock"


def new_token() -> str:
    return secrets.token_hex(16)


def check(project: Project, pid: int, when_free: Callable[[], None]) -> str:
    """How serve's lock stands for a serve of pid ``pid`` (HELD, FREE, OTHER, UNKNOWN);
    when FREE, ``when_free()`` is called holding the lock (no serve can start meanwhile).
    Never waits."""
    path = lock_file(project)
    try:
        # as build_lock makes it: not through a link, and a new one only where none is
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError:
        return UNKNOWN
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return UNKNOWN
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return HELD if pid_in(fd) == pid else OTHER
        except OSError:
            return UNKNOWN
        when_free()
        return FREE
    finally:
        os.close(fd)  # the lock, when taken to look, goes with it
