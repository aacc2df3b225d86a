"""Ctrl-C during a doit build: it stops the build and says so in one line, never as a
traceback, never as a step's internal error, and the summary never says "done".

Two things stand in the way:
- a Ctrl-C that lands inside some of TVM's C++ calls (its pass infrastructure) comes back
  as a bare ``RuntimeError`` and would read as a step's internal error.
  ``core/interrupts.noted()`` notes every SIGINT while a step runs, so the step can tell
  the two apart;
- doit lets KeyboardInterrupt reach the interpreter, which prints a traceback.
  ``quiet_exit()`` here makes that one line; the exit status stays Python's for Ctrl-C (the
  process ends by SIGINT, 130 in a shell).
What finished before the Ctrl-C is kept: outputs are renamed into place whole and their
stamps written after them, so the next run goes on from there.
"""

from __future__ import annotations

import os
import sys

TRACEBACK_ENV = "MODELBUILD_TRACEBACK"  # set: tracebacks are printed, for a bug report
MESSAGE = ("modelbuild: interrupted (Ctrl-C); the steps that finished are kept: run the same "
           "command to go on")


def quiet_exit() -> None:
    """A KeyboardInterrupt that reaches the interpreter prints MESSAGE (the traceback too
    with MODELBUILD_TRACEBACK=1); any other exception is printed as before."""
    previous = sys.excepthook
    if getattr(previous, "modelbuild_quiet", False):
        return

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt) and not os.environ.get(TRACEBACK_ENV):
            print(MESSAGE, file=sys.stderr)
            return
        previous(kind, value, tb)

    hook.modelbuild_quiet = True
    sys.excepthook = hook
