"""How a build step meets doit: a step's BuildError becomes a clean task failure, a
load-time problem a clean doit error; anything else a one-paragraph internal error.
No traceback reaches the user unless MODELBUILD_TRACEBACK=1 asks for it."""

from __future__ import annotations

import errno
import os
import traceback

from doit.exceptions import InvalidDodoFile, TaskFailed

from ..core import interrupts
from ..core.errors import BuildError, summarize
from .ctrl_c import TRACEBACK_ENV


def internal_error(err: BaseException, where: str) -> str:
    """What to print for an exception no check anticipated: what failed, TVM's reason,
    and how to get the whole story."""
    text = f"error: internal error in {where}: {summarize(err)}"
    if isinstance(err, AssertionError) or not str(err).strip():
        text += _location(err)
    if os.environ.get(TRACEBACK_ENV):
        return text + "\n" + "".join(traceback.format_exception(err))
    return text + (f"\n  hint: this is a modelbuild bug or an unexpected TVM failure; rerun with "
                   f"{TRACEBACK_ENV}=1 for the traceback, and report it")


# A file system that refuses a write: the machine's state, not a bug, and each says what to do.
_MACHINE_ERRORS = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "free space within your disk quota",
    errno.EROFS: "build on a writable disk",
    errno.EACCES: "make the file and its folder writable by you (or run as their owner)",
    errno.EPERM: "make the file and its folder writable by you (or run as their owner)",
    errno.EISDIR: "a folder stands where modelbuild writes a file: remove it",
    errno.ELOOP: "a link that leads back to itself stands on that path: remove it",
    errno.ENAMETOOLONG: "a name on that path is longer than the file system allows: shorten it",
}


def is_machine_error(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in _MACHINE_ERRORS


def machine_error(err: OSError, where: str, step: bool = True) -> str:
    """What to print for a file the system refused to write or open (a full disk, a
    read-only or foreign folder): the system's reason, the file, what to do. ``step``: a
    build step's (what finished before it is kept)."""
    task = where.split(" (", 1)[0]  # a task's name, else a function's, which says nothing here
    prefix = f"{task}: " if ":" in task or task.startswith("python -m") else ""
    named = err.filename2 or err.filename  # a rename: the path it was renamed to
    path = f": {named}" if named else ""
    kept = ": the steps that finished are kept" if step else ""
    return (f"error: {prefix}{err.strerror or os.strerror(err.errno)}{path}\n"
            f"  hint: {_MACHINE_ERRORS[err.errno]}, then rerun the same command{kept} (the "
            "build's files are in <project>/build; the cache, $MODELBUILD_CACHE or "
            "[tool.modelbuild] cache-dir, may live on another disk)")


def _location(err: BaseException) -> str:
    """Where an exception with no message of its own was raised: file, line, the source."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    path = last.filename
    if "/modelbuild/" in path:
        path = "modelbuild/" + path.rsplit("/modelbuild/", 1)[1]
    return f"\n    at {path}:{last.lineno}" + (f": {last.line}" if last.line else "")


def _where(fn, args) -> str:
    """The task a step runs for and the function that failed: "partition:m (partition.run)"."""
    name = getattr(fn, "__qualname__", str(fn))
    task = getattr(getattr(fn, "__self__", None), "task", None)
    if task and args and callable(args[0]):
        module = getattr(args[0], "__module__", "").rsplit(".", 1)[-1]
        return f"{task} ({module + '.' if module else ''}{getattr(args[0], '__name__', '')})"
    module = getattr(fn, "__module__", "") or ""
    return f"{task} ({name})" if task else f"{module.rsplit('.', 1)[-1]}.{name}".lstrip(".")


def step(fn, *args):
    """Run one build step; a BuildError becomes a clean task failure (no traceback). A
    Ctrl-C stays a KeyboardInterrupt, even where TVM turned it into another error: it
    stops the build (ctrl_c.py), it is no failure of the step."""
    try:
        with interrupts.stays_an_interrupt():
            fn(*args)
    except Exception as err:  # noqa: BLE001 - reported in words, never as a traceback
        if isinstance(err, BuildError):
            return TaskFailed(str(err))
        if is_machine_error(err):
            return TaskFailed(machine_error(err, _where(fn, args)))
        return TaskFailed(internal_error(err, _where(fn, args)))
    return None


def invalid(message: str) -> InvalidDodoFile:
    """A load-time error for doit to print (it prefixes "ERROR: " itself)."""
    return InvalidDodoFile(message.removeprefix("error: "))
