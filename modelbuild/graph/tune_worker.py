"""What a tuning worker runs: probe its CPU, build one MetaSchedule candidate, measure one.

The tune process (search, cost model, task scheduler) submits these functions to
the executor's Dask workers (cluster_tune.py). Inputs and outputs are plain data:
the candidate's IRModule as TVM JSON text, the target as its dict, the built
module as the bytes of its exported tar, timings as floats. No shared file
system is assumed; nothing here returns a path.

Clean timings: ``measure`` holds a Dask lock named for the worker's host while it
times a candidate, so the workers of one machine measure in turns (the others
keep building). Each function checks first that the worker runs the TVM and the
modelbuild code the tune process expects. TVM-free at import.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

# For tests only: the CPU name a worker reports instead of LLVM's answer. A worker that
# reports a faked CPU says so (``faked``), and the refusal names it as faked.
FAKE_CPU_ENV = "MODELBUILD_TEST_FAKE_CPU"
LOCK_PREFIX = "modelbuild-measure-"
ROOT = "graph/tune_worker.py"


def identity() -> dict:
    """TVM (with tvm-ffi) and the digest of the code a tuning worker runs."""
    from . import code, environment

    return {"tvm": environment.tvm_identity(), "code": code.digest(code.closure((ROOT,)))}


def _mismatch(expected: dict) -> str | None:
    from .worker import describe

    here = identity()
    if here == expected:
        return None
    return (f"the executor's worker runs other code than this tune: worker: {describe(here)}; "
            f"this tune: {describe(expected)}")


def probe() -> dict:
    """This worker's CPU as LLVM names it, its features, its host and the code it runs."""
    import tvm
    from tvm.target import codegen

    cpu = codegen.llvm_get_system_cpu()
    features = codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": cpu}))
    fake = os.environ.get(FAKE_CPU_ENV)
    return {"cpu": fake or cpu, "faked": bool(fake), "features": sorted(str(f) for f in features),
            "host": socket.gethostname(), "pid": os.getpid(), "identity": identity()}


def build(expected: dict, mod_json: str, target: dict) -> dict:
    """Build one candidate: {"artifact": bytes of the exported tar, "seconds", "error"}."""
    error = _mismatch(expected)
    if error:
        return {"artifact": None, "seconds": 0.0, "error": error}
    start = time.perf_counter()
    try:
        import tvm
        from tvm.support.tar import tar

        from ..schedules.tune import build_candidate

        module = build_candidate(tvm.ir.load_json(mod_json), tvm.target.Target(target))
        with tempfile.TemporaryDirectory(prefix="modelbuild-tune-") as tmp:
            path = Path(tmp) / f"candidate.{tar.output_format}"
            module.export_library(str(path), fcompile=tar)
            artifact = path.read_bytes()
    except Exception as err:  # noqa: BLE001 - a candidate that does not build: its record says why
        from ..core.errors import summarize

        return {"artifact": None, "seconds": time.perf_counter() - start,
                "error": f"build failed on the worker: {summarize(err)}"}
    return {"artifact": artifact, "seconds": time.perf_counter() - start, "error": None}


def _timed(artifact: bytes, args_info: list, evaluator: dict,
           device_type: str) -> tuple[list[float], float]:
    """The candidate's run times, and how long this worker held its machine's lock."""
    import tvm
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig
    from tvm.s_tir.meta_schedule.runner.local_runner import (default_alloc_argument,
                                                             default_run_evaluator)

    with tempfile.TemporaryDirectory(prefix="modelbuild-measure-") as tmp:
        path = Path(tmp) / "candidate.tar"
        path.write_bytes(artifact)
        module = tvm.runtime.load_module(str(path))
        device = tvm.runtime.device(device_type, 0)
        args = default_alloc_argument(device, args_info, 1)
        with _host_lock():
            start = time.perf_counter()
            secs = default_run_evaluator(module, device, EvaluatorConfig(**evaluator), args)
            return [float(s) for s in secs], time.perf_counter() - start


def _host_lock():
    """The lock of this worker's machine (Dask's, leased: a dead holder's lease expires)."""
    from distributed import Lock

    return Lock(LOCK_PREFIX + socket.gethostname())


def measure(expected: dict, built: dict, args_info: list, evaluator: dict,
            device_type: str) -> dict:
    """Time one built candidate here: {"secs", "error", "build_s", "run_s" (loading, waiting
    for the lock, timing), "measure_s" (holding the lock), "worker"}."""
    from distributed import get_worker

    start = time.perf_counter()
    out = {"secs": None, "error": built.get("error") or _mismatch(expected),
           "build_s": built.get("seconds", 0.0), "measure_s": 0.0,
           "worker": get_worker().address}
    if out["error"] is None:
        try:
            out["secs"], out["measure_s"] = _timed(built["artifact"], args_info, evaluator,
                                                   device_type)
        except Exception as err:  # noqa: BLE001 - a candidate that fails to run: an error record
            from ..core.errors import summarize

            out["error"] = f"run failed on the worker: {summarize(err)}"
    out["run_s"] = time.perf_counter() - start
    return out
