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

A reporter the user chose (``doit --reporter json``) takes no lock: so each step's first
uptodate check (``Held``) takes the locks of every model of the run (the models its
command line names, as the reporter counts them) where this process does not hold them
yet, and keeps them to the process's end. doit checks every task before it runs it, in
its main process, so these locks too are taken before anything is restored or built.
Locks are always taken in model-name order (the reporter's and ``Held``'s alike): two
runs building a and b never hold one each while waiting for the other.

What this process holds is kept in ``_HELD`` (a lock belongs to the process, as its fds
do). A process forked from it (a ``doit -n`` worker) closes its copies at once: the lock
is the main process's alone, and ends with it, even where its workers outlive it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
from pathlib import Path

from ..cluster import serve_proof
from ..core.lock_holder import pid_in
from ..core.errors import BuildError
from ..core.paths import Project


def lock_file(project: Project, model: str) -> Path:
    return project.build_dir / f".{model}.lock"


def sweep_lock_file(project: Project, model: str) -> Path:
    """A sweep's hold on a model's active records. (Ends in "-lock", so no model's build
    lock is this file: ".m.sweep.lock" was model "m.sweep"'s.)"""
    return project.build_dir / f".{model}.sweep-lock"


def refuse_during_sweep(project: Project, model: str, what: str) -> None:
    """BuildError while a sweep of ``model`` runs: it puts its variants in place, then the
    active records it found, over whatever ``what`` (a command) would write meanwhile."""
    sweeping = holder(sweep_lock_file(project, model))
    if sweeping is not None:
        raise BuildError(f"a sweep of {model} runs in this project{sweeping}: it restores the "
                         "active records it found when it ends",
                         hint=f"{what} once the sweep has ended (or use its --select-fastest)")


def tunes_lock_file(project: Project, model: str) -> Path:
    """Every tune of a model holds this lock shared while it runs (``hold_shared``); a sweep
    of the model refuses while one does (``refuse_during_tune``)."""
    return project.build_dir / f".{model}.tunes-lock"


def refuse_during_tune(project: Project, model: str) -> None:
    """BuildError (for a sweep) while a tune of ``model`` runs: the sweep's timings and the
    tune's measurements would share the CPU, each making the other's wrong, and the sweep's
    variants would be in place when the tune imports its records."""
    if held(tunes_lock_file(project, model)):
        raise BuildError(f"a tune of {model} runs in this project: a sweep's timings and its "
                         "measurements would disturb each other",
                         hint="sweep once the tune has ended")


def refuse_while_tuning(work_dir: Path, hint: str) -> None:
    """BuildError while a tune writes the MetaSchedule database in ``work_dir``."""
    if held(tune_lock_file(work_dir)):
        raise BuildError("a tune is writing this database", file=work_dir, hint=hint)


def hold_shared(path: Path) -> int | None:
    """A shared lock on ``path`` for this process (the open fd, closed at exit; None where
    no lock can be had), waiting while a process holds it exclusively (a sweep checking
    for tunes, an instant)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return None
    return fd


def tune_lock_file(work_dir: Path) -> Path:
    """A tune's hold on its MetaSchedule database: two tunes writing one number their
    workloads alike, and the database no longer reads."""
    return work_dir / ".tune-lock"


def serve_lock_file(project: Project) -> Path:
    """serve's, one per project: where builds look for it (cluster/serve_proof.py)."""
    return serve_proof.lock_file(project)


class ModelLocks:
    """The locks one doit run holds."""

    def __init__(self):
        self._fds: list[int] = []

    def acquire(self, project: Project, models, say) -> None:
        """Take the locks of ``models`` (see ``_take_all``); ``say(text)`` explains a wait.
        A build folder where no lock file can be made is left unlocked: the run then fails
        on its first write, saying why."""
        self._fds += _take_all(_locks(project, models), say)

    def release(self) -> None:
        for path, fd in [(p, f) for p, f in _HELD.items() if f in self._fds]:
            del _HELD[path]
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._fds = []


_SAID: set = set()  # lock files found unusable, said once
_HELD: dict[str, int] = {}  # lock file (real path) -> fd: the model locks this process holds


def _key(path: Path) -> str:
    # one lock file named two ways (a symlinked folder) is one lock: a second flock of it
    # from this process would wait for this process
    return os.path.realpath(path)


def _waiting(model: str, say):
    return lambda fd: say(f"modelbuild: waiting for another doit run building {model} in "
                          f"this project{_holder(fd)} to finish\n")


def _say(text: str) -> None:
    # the terminal's stderr: doit's json reporter keeps sys.stderr for its report's end
    (sys.__stderr__ or sys.stderr).write(text)


class Held:
    """doit ``uptodate`` callable, first of a model's step: takes the locks of the run's
    models (``together``, and ``model``) that this process does not hold (a run with a
    reporter of the user's choice), in name order, waiting as the reporter would. Has no
    say in whether the task is up to date (returns None)."""

    def __init__(self, project: Project, model: str, together=()):
        self.locks = _locks(project, {model, *together})

    def __str__(self):  # how `doit clean` names it: "Python: " and this past its first character
        return f"<taking the build lock of {', '.join(m for m, _ in self.locks)}"

    def __call__(self):
        _take_all(self.locks, _say)  # held until this process ends
        return None


def _locks(project: Project, models) -> list[tuple[str, Path]]:
    return [(m, lock_file(project, m)) for m in sorted(set(models))]


def _take_all(locks: list[tuple[str, Path]], say) -> list[int]:
    """Take the locks ``locks`` ((model, lock file), in name order: two runs never wait for
    each other in a circle) that this process does not hold, waiting for another run that
    holds one (``say`` explains the wait). One held by this process's parent (a ``doit -n``
    worker's main process) counts as held. Returns the fds taken."""
    taken = []
    for model, path in locks:
        if _key(path) in _HELD:
            continue
        try:
            fd = _take(path, wait=None)
        except Busy:
            if _holder_pid(path) in (os.getpid(), os.getppid()):
                continue
            fd = _take(path, wait=_waiting(model, say))
        if fd is not None:
            _HELD[_key(path)] = fd
            taken.append(fd)
    return taken


def _leave_to_parent() -> None:
    """In a forked child: close the copies of the locks' fds (the parent's keep them)."""
    for fd in _HELD.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_leave_to_parent)


class Busy(Exception):
    """Another process holds the lock."""


def hold(path: Path) -> int | None:
    """An exclusive lock on ``path`` for this process (the open fd, closed at exit; None
    where no lock file can be made), or Busy when another process holds it."""
    return _take(path, wait=None)


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


def held(path: Path) -> bool:
    """Whether a process holds the lock on ``path`` now (False when no file is there)."""
    return holder(path) is not None


def _take(path: Path, wait) -> int | None:
    """The fd of ``path`` exclusively locked, its holder's pid written in it. Held by
    another process: ``wait(fd)`` is called and the lock waited for, or, without ``wait``,
    Busy. None where no lock can be had (a folder that takes no file, a file system
    without locks): as before locks, unlocked."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # not through a link: the holder's pid is written in the file, and a link in the
        # lock's place had it written over the file the link named
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as err:
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) and _key(path) not in _SAID:
            # something in the lock's place (a folder, a link): said (once), not silent
            _SAID.add(_key(path))
            _say(f"warning: modelbuild cannot lock {path} ({err.strerror or err}): this run "
                 "goes on unlocked, and another run of the same model at the same time would "
                 "mix its files with this one's; remove what is in the lock's place\n")
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if wait is None:
                raise Busy(path) from None
            wait(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    except BaseException:  # Busy, or Ctrl-C while waiting
        os.close(fd)
        raise
    try:  # who holds it, for the message of the next one to wait
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass
    return fd


def _holder_pid(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return pid_in(fd)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    pid = pid_in(fd)
    return f" (pid {pid})" if pid is not None else ""
