"""How a build step meets doit: a step's BuildError becomes a clean task failure, a
load-time problem a clean doit error; anything else a one-paragraph internal error.
No traceback reaches the user unless MODELBUILD_TRACEBACK=1 asks for it."""

from __future__ import annotations

import os
import traceback

from doit.exceptions import InvalidDodoFile, TaskFailed

from ..core.errors import BuildError, summarize

TRACEBACK_ENV = "MODELBUILD_TRACEBACK"


def internal_error(err: BaseException, where: str) -> str:
    """What to print for an exception no check anticipated: what failed, TVM's reason,
    and how to get the whole story."""
    text = f"error: internal error in {where}: {summarize(err)}"
    if os.environ.get(TRACEBACK_ENV):
        return text + "\n" + "".join(traceback.format_exception(err))
    return text + (f"\n  hint: this is a modelbuild bug or an unexpected TVM failure; rerun with "
                   f"{TRACEBACK_ENV}=1 for the traceback, and report it")


def step(fn, *args):
    """Run one build step; a BuildError becomes a clean task failure (no traceback)."""
    try:
        fn(*args)
    except BuildError as err:
        return TaskFailed(str(err))
    except Exception as err:  # noqa: BLE001 - reported in words, never as a traceback
        return TaskFailed(internal_error(err, getattr(fn, "__qualname__", str(fn))))
    return None


def invalid(message: str) -> InvalidDodoFile:
    """A load-time error for doit to print (it prefixes "ERROR: " itself)."""
    return InvalidDodoFile(message.removeprefix("error: "))
