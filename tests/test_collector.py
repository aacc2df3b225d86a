"""A build process imports TVM without the cycle collector's walks, and leaves the
collector as it found it (core/collector.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("enabled", [True, False])
def test_importing_tvm_leaves_the_collector_as_it_was(enabled):
    code = f"""
import gc, sys
from modelbuild.core import collector
gc.enable() if {enabled} else gc.disable()
assert "tvm" not in sys.modules
tvm = collector.import_tvm()
assert tvm is sys.modules["tvm"] and hasattr(tvm, "tirx")
assert gc.isenabled() is {enabled}, gc.isenabled()
frozen = gc.get_freeze_count()
assert frozen > 10000, frozen  # what the import made is walked no more
assert collector.import_tvm() is tvm
print("ok", frozen)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stdout + proc.stderr


def test_the_exit_freeze_is_registered_once_however_often_dodo_loads():
    """`watch` loads dodo.py for every rebuild: one exit handler, not one per rebuild."""
    code = """
import atexit, gc
calls = []
gc.freeze = lambda: calls.append(1)  # counted, as the exit handler that runs
from modelbuild.core import collector
for _ in range(5):
    collector.no_final_walk()
atexit._run_exitfuncs()
print(len(calls))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["1"], proc.stdout + proc.stderr
