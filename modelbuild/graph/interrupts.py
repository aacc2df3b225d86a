"""Ctrl-C during a doit build: it stops the build and says so in one line, never as a
traceback, never as a step's internal error, and the summary never says "done".

Two things stand in the way, and each has its remedy here:
- a Ctrl-C that lands inside some of TVM's C++ calls (its pass infrastructure) comes back
  as a bare ``RuntimeError`` and would read as a step's internal error. ``noted()`` notes
  every SIGINT while a step runs, so the step can tell the two apart;
- doit lets KeyboardInterrupt reach the interpreter, which prints a traceback.
  ``quiet_exit()`` makes that one line; the exit status stays Python's for Ctrl-C (the
  process ends by SIGINT, 130 in a shell).
What finished before the Ctrl-C is kept: outputs are renamed into place whole and their
stamps written after them, so the next run goes on from there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

TRACEBACK_ENV = "MODELBUILD_TRACEBACK"  # set: tracebacks are printed, for a bug report
MESSAGE = ("modelbuild: interrupted (Ctrl-C); the steps that finished are kept: run the same "
           "command to go on")


# The SIGINTs noted by each noted() block open in this process (signals are the process's;
# only the main thread opens one): check() reads them.
_open_blocks: list[list[int]] = []


@contextlib.contextmanager
def noted():
    """While the block runs, a SIGINT is noted before it raises KeyboardInterrupt as usual;
    yields ``seen()``: whether one came. Only Python's own handler is replaced (a SIGINT
    ignored, as under nohup, stays ignored), and only in the main thread (the one signals
    reach)."""
    received: list[int] = []
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield lambda: False
        return

    def handler(signum, frame):
        received.append(signum)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, handler)
    _open_blocks.append(received)
    try:
        yield lambda: bool(received)
    finally:
        _open_blocks.remove(received)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def check() -> None:
    """KeyboardInterrupt if a Ctrl-C came while the step (its noted() block) ran, even when
    the step went on: TVM hands a Ctrl-C inside its passes back as an ordinary error, and a
    step's fallback may take that for a reason to build something else (another layout). A
    step asks here before it keeps what it made (its cache entry, its stamp)."""
    if any(_open_blocks):
        raise KeyboardInterrupt


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
