"""How a build step meets doit: a step's BuildError becomes a clean task failure, a
load-time problem a clean doit error (no traceback in either)."""

from __future__ import annotations

from doit.exceptions import InvalidDodoFile, TaskFailed

from ..core.errors import BuildError


def step(fn, *args):
    """Run one build step; a BuildError becomes a clean task failure (no traceback)."""
    try:
        fn(*args)
    except BuildError as err:
        return TaskFailed(str(err))
    return None


def invalid(message: str) -> InvalidDodoFile:
    """A load-time error for doit to print (it prefixes "ERROR: " itself)."""
    return InvalidDodoFile(message.removeprefix("error: "))
