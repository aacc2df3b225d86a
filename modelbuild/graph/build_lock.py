"""One doit run at a time builds a given model of a project.

Two runs that build the same model with other variables (``layout=``, ``target=``,
``mcpu=``) write the same files under build/<model>/: one's graph could be linked with the
other's kernels (a library that does not load, exit 0). So a run that executes a model's
steps first takes that model's lock, an exclusive ``flock`` on build/.<model>.lock, and
holds it until the run ends (the reporter takes it when doit starts running tasks, before
any uptodate check can restore a file, and gives it back in its summary; a killed process
gives it back by dying). A second run waits, saying for whom, then finds the first's
outputs: up to date when it asked for the same, rebuilt when it asked for something else.
Runs that build other models do not wait for each other.

With ``doit -n N`` the workers, forked after the lock was taken, share it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..core.layout import Project


def lock_file(project: Project, model: str) -> Path:
    return project.build_dir / f".{model}.lock"


class ModelLocks:
    """The locks one doit run holds."""

    def __init__(self):
        self._fds: list[int] = []

    def acquire(self, project: Project, models, say) -> None:
        """Take the locks of ``models`` (in name order: two runs never wait for each other
        in a circle), waiting for another run where one holds a lock; ``say(text)``
        explains a wait. A build folder where no lock file can be made is left unlocked:
        the run then fails on its first write, saying why."""
        for model in sorted(models):
            path = lock_file(project, model)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"modelbuild: waiting for another doit run building {model} in this "
                    f"project{_holder(fd)} to finish\n")
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:  # Ctrl-C while waiting
                    os.close(fd)
                    raise
            except OSError:  # a file system without locks: as before, unlocked
                os.close(fd)
                continue
            try:  # who holds it, for the message of the next one to wait
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            except OSError:
                pass
            self._fds.append(fd)

    def release(self) -> None:
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)  # for the forked workers' copies too
            finally:
                os.close(fd)
        self._fds = []


def _holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


# -- a sweep's hold on a model's active records -----------------------------------------

def sweep_lock_file(project: Project, model: str) -> Path:
    return project.build_dir / f".{model}.sweep.lock"


def hold(path: Path) -> int | None:
    """An exclusive lock on ``path`` for this process (the open fd, closed at exit), or None
    when another process holds it. A folder where none can be made: no lock (0)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        os.close(fd)
        return 0
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass
    return fd


def holder(path: Path) -> str | None:
    """" (pid N)" (or "") when a process holds the lock on ``path``, None when none does."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)  # a lock taken here to look goes with it
    return None
