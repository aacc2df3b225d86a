"""What a tune costs before its first trial: MetaSchedule's TuneContext imports the tensor
intrinsics of every target (45-55 s of TVMScript parsing on 2 cores); each of our ways into it
loads the tuning target's own only. A fresh process per test: what was imported is the point."""

import json
import subprocess
import sys

from modelbuild.schedules import intrinsics

PRELUDE = """
import json, sys
import tvm
from tvm import te
A = te.placeholder((4, 4), name="A")
func = te.create_prim_func([A, te.compute((4, 4), lambda i, j: A[i, j] * 2, name="B")])
target = tvm.target.Target({"kind": "llvm"})
"""
LOADED = """
print(json.dumps(sorted(m.rsplit(".", 1)[1] for m in sys.modules
                        if m.startswith("tvm.s_tir.tensor_intrin."))))
"""


def _loaded(code: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + code + LOADED],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_cluster_tune_s_coordinator_loads_only_its_target_s_intrinsics():
    """The coordinator makes each workload's task module (its database key) before any
    chunk goes out; it once waited that long on CUDA's, ROCm's and Hexagon's intrinsics."""
    loaded = _loaded("from modelbuild.schedules.tune_chunk import task_mod\n"
                     "task_mod(func, target)\n")
    assert loaded == sorted(intrinsics.modules_for("llvm"))
    assert "cuda" not in loaded
