"""Whether a Ctrl-C came while a build step ran, for the layers below the graph too.

A Ctrl-C that lands inside some of TVM's C++ calls (its pass infrastructure) comes back
as a bare ``RuntimeError``: a step that falls back on an error (partition keeping a graph
NCHW when TVM cannot carry the blocked layout) asks ``check()`` first, so that a Ctrl-C
is never taken for TVM's reason; ``stays_an_interrupt()`` turns such an error back into
the Ctrl-C it was, around a build step (graph/actions.py) and around the benchmark's VM
runs (a Python function TVM calls back, the instrument, turns a Ctrl-C into one too).
graph/ctrl_c.py makes the interrupted build's exit one line.
"""

from __future__ import annotations

import contextlib
import signal
import threading

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
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    ours = signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def handler(signum, frame):
        received.append(signum)
        signal.default_int_handler(signum, frame)

    if ours:
        signal.signal(signal.SIGINT, handler)
    _open_blocks.append(received)
    try:
        yield lambda: bool(received)
    finally:
        _open_blocks.remove(received)
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def note(signum: int) -> None:
    """A handler of another stopping signal (a sweep's SIGTERM and SIGHUP, which stop it as
    Ctrl-C does) says here that it came, before it raises KeyboardInterrupt: the open
    ``noted()`` blocks see it as they see a Ctrl-C."""
    for received in _open_blocks:
        received.append(signum)


@contextlib.contextmanager
def stays_an_interrupt():
    """A Ctrl-C (or a stop ``note()`` was told of) that came while the block ran leaves it
    as KeyboardInterrupt, even where TVM handed it back as another error: it landed in a
    Python function TVM called, and TVM's caller sees a ``RuntimeError``."""
    with noted() as came:
        try:
            yield
        except Exception:
            if came():
                raise KeyboardInterrupt from None
            raise


def check() -> None:
    """KeyboardInterrupt if a Ctrl-C came while the step (its noted() block) ran, even when
    the step went on: TVM hands a Ctrl-C inside its passes back as an ordinary error, and a
    step's fallback may take that for a reason to build something else (another layout). A
    step asks here before it keeps what it made (its cache entry, its stamp)."""
    if any(_open_blocks):
        raise KeyboardInterrupt
