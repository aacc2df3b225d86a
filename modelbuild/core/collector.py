"""Python's cycle collector in a build process: not walking, again and again, the objects
that live as long as the process.

A full collection walks every object the process holds. Importing TVM makes hundreds of
thousands of them (its modules, functions, registries) and the collector runs full
collections while the import makes them; Python also runs full collections as it exits.
In a clean build of resnet50 these walks took about 0.35 s of CPU (0.14 s inside ``import
tvm``, 0.2 s after the build ended; perf, bench/README.md), each one over objects that
could never be garbage before the process ends. So:

- ``import_tvm()`` imports TVM with the collector paused, then freezes what exists
  (``gc.freeze``): later collections walk only what was made after it. The frozen
  objects are still freed by reference counting; only a reference cycle among them that
  becomes garbage later is never collected (objects of the import: they live on anyway).
- ``no_final_walk()``, called by dodo.py, freezes everything once the process ends, as
  its last exit handler: Python's final collections then walk nothing. The memory goes
  back to the system with the process; ``__del__`` of objects still in a reference cycle
  at exit does not run, which Python never promised anyway (our files are written and
  closed by each step, doit's state by doit, the terminal flushed by Python itself).

Nothing else about collection changes: a cycle made by the build itself is collected as
before.
"""

from __future__ import annotations

import atexit
import gc
import sys


def import_tvm():
    """``import tvm`` (the module), without the collector's walks while it imports."""
    tvm = sys.modules.get("tvm")
    if tvm is not None:
        return tvm
    enabled = gc.isenabled()
    gc.disable()
    try:
        import tvm
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return tvm


def no_final_walk() -> None:
    """Freeze every object when the process exits (the last exit handler to run, when
    called before the others register): Python's final collections walk nothing. Once
    per process, however often dodo.py is loaded (`watch` loads it for every rebuild)."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
