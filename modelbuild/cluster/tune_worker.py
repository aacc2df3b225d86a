"""What a tuning worker runs: probe its CPU, tune one chunk of one workload.

The tune process (the coordinator: which workload gets the next chunk) submits
these functions to the executor's Dask workers (tune_coordinator.py). A
chunk is a whole MetaSchedule search of one workload for a few trials, on the
worker's own threads, building here. Inputs and outputs are plain data: the
workload's IRModule as TVM JSON text, the target as its dict, the tuning records
as JSON text, timings as floats. No shared file system is assumed; nothing here
returns a path.

Clean timings: a worker holds a Dask lock named for its host while it times a
candidate, so the workers of one machine measure in turns (the others keep
searching and building). Each function checks first that the worker runs the
TVM and the modelbuild code the tune process expects. TVM-free at import.
"""

from __future__ import annotations

import os
import socket
import time

# For tests only: the CPU name a worker reports instead of LLVM's answer. A worker that
# reports a faked CPU says so (``faked``), and the refusal names it as faked.
FAKE_CPU_ENV = "MODELBUILD_TEST_FAKE_CPU"
LOCK_PREFIX = "modelbuild-measure-"
ROOT = "cluster/tune_worker.py"
EVALUATOR = {"number": 3, "repeat": 1, "min_repeat_ms": 100,  # MetaSchedule's defaults
             "enable_cpu_cache_flush": False}


def identity() -> dict:
    """TVM (with tvm-ffi) and the digest of the code a tuning worker runs."""
    from ..steps import code, environment

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


def tune_chunk(expected: dict, request: dict) -> dict:
    """One chunk of a cluster tune here: MetaSchedule's search on one workload for
    ``request["trials"]`` trials, from its records so far (schedules/tune_chunk.py), with
    this worker's threads. {"records" (JSON text), "error", "worker", "threads", "seconds",
    "build_s"/"measure_s" (per candidate), "lock_wait_s", "trained"}."""
    from distributed import get_worker

    worker = get_worker()
    threads = max(1, int(worker.state.nthreads))
    start = time.perf_counter()
    timings: dict = {"build_s": [], "measure_s": [], "lock_wait_s": 0.0}
    out = {"records": [], "error": _mismatch(expected), "worker": worker.address,
           "threads": threads, "trained": 0}
    if out["error"] is None:
        try:
            import tvm

            from ..schedules.tune_chunk import tune_one

            out["records"], out["trained"] = tune_one(
                tvm.ir.load_json(request["mod"]), tvm.target.Target(request["target"]),
                request["records"], request["trials"], seed=request["seed"], threads=threads,
                warmup=request["warmup"], timed=lambda *a: _timed(*a, timings=timings),
                timings=timings)
        except Exception as err:  # noqa: BLE001 - the chunk is lost, in words, not the tune
            from ..core.errors import summarize

            out["error"] = f"the chunk failed on the worker: {summarize(err)}"
    return {**out, **timings, "seconds": time.perf_counter() - start}


def _timed(path: str, args_info: list, device_type: str, *, timings: dict) -> list[float]:
    """A built candidate's run times, timed while this worker holds its machine's lock
    (``timings`` gets the seconds held and waited for)."""
    import tvm
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig
    from tvm.s_tir.meta_schedule.runner.local_runner import (default_alloc_argument,
                                                             default_run_evaluator)

    module = tvm.runtime.load_module(path)
    device = tvm.runtime.device(device_type, 0)
    args = default_alloc_argument(device, args_info, 1)
    asked = time.perf_counter()
    with _host_lock():
        start = time.perf_counter()
        secs = default_run_evaluator(module, device, EvaluatorConfig(**EVALUATOR), args)
        timings["measure_s"].append(time.perf_counter() - start)
    timings["lock_wait_s"] += start - asked
    return [float(s) for s in secs]


def _host_lock():
    """The lock of this worker's machine (Dask's, leased: a dead holder's lease expires)."""
    from distributed import Lock

    return Lock(LOCK_PREFIX + socket.gethostname())
