"""Run a built library: random inputs for its model, a VirtualMachine over a private copy,
end-to-end latency."""

from __future__ import annotations

import contextlib
import os

from ..core.digits import is_decimal
from ..core.errors import BuildError


def device(name: str = "cpu"):
    """The TVM device a target's libraries run on; a clear error when this machine has none."""
    import tvm

    dev = tvm.device(name)
    if not dev.exist:
        raise BuildError(f"this machine has no {name} device to run the library on",
                         hint="measure it on a machine with one; libraries for the CPU "
                              "targets (llvm, c) run here")
    return dev


def model_inputs(manifest, seed: int = 0, device_name: str = "cpu") -> list:
    """Random input tensors with the shapes and dtypes partition recorded for the model,
    on the device the library runs on."""
    import numpy as np
    import tvm

    rng = np.random.default_rng(seed)
    dev = device(device_name)
    return [tvm.runtime.tensor(rng.standard_normal(s).astype(d), dev) for _, s, d in manifest.inputs]


def use_physical_cores() -> None:
    """Set ``TVM_NUM_THREADS`` to this machine's physical cores unless it is set: before
    TVM's thread pool starts, here and in the processes started from here (MetaSchedule's
    runners). TVM's own default is half the logical CPUs on x86, assuming hyper-threading:
    one thread on a 2-vCPU machine, where a library runs on two."""
    import psutil

    given = os.environ.get("TVM_NUM_THREADS")
    if not given:
        os.environ["TVM_NUM_THREADS"] = str(psutil.cpu_count(logical=False) or 1)
        return
    most = 4 * (psutil.cpu_count() or 1)
    if not (is_decimal(given.strip()) and 1 <= int(given) <= most):
        # TVM takes "abc", 0 or -5 as one thread, and starts 100000 if asked
        raise BuildError(f"TVM_NUM_THREADS={given}: expected a number of threads from 1 to "
                         f"{most} (this machine has {psutil.cpu_count()} CPUs)",
                         hint="unset it: measurements use the machine's physical cores")


def threads() -> int:
    """The threads a library measured here runs on (see use_physical_cores). Returns what
    the pool uses."""
    use_physical_cores()
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


@contextlib.contextmanager
def private_vm(library, device_name: str = "cpu"):
    """A VirtualMachine over the library at ``library`` as it is now, on ``device_name``.

    Loads a private copy: the dynamic loader hands back an already loaded
    library for the same path, so a rebuilt one would never be seen. Runs on ``threads()``.
    """
    import shutil
    import tempfile
    import time
    from pathlib import Path

    import tvm
    from tvm import relax

    threads()
    with tempfile.TemporaryDirectory(prefix="modelbuild-lib-") as tmp:
        copy = Path(tmp) / f"{Path(library).stem}-{time.time_ns()}.so"
        shutil.copyfile(library, copy)
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(copy)), device(device_name))
        try:
            yield vm
        finally:
            del vm


def library_latency(library, inputs, *, runs: int = 5, warmup: int = 1,
                    device_name: str = "cpu") -> tuple[float, float]:
    """(median, standard deviation) seconds of vm["main"](*inputs) for a built library."""
    import statistics
    import time

    with private_vm(library, device_name) as vm:
        for _ in range(warmup):
            vm["main"](*inputs)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            vm["main"](*inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times), statistics.pstdev(times)
