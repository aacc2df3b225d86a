"""Run a built library: random inputs for its model, a VirtualMachine over a private copy,
end-to-end latency."""

from __future__ import annotations

import contextlib


def model_inputs(manifest, seed: int = 0) -> list:
    """Random input tensors with the shapes and dtypes partition recorded for the model."""
    import numpy as np
    import tvm

    rng = np.random.default_rng(seed)
    return [tvm.runtime.tensor(rng.standard_normal(s).astype(d)) for _, s, d in manifest.inputs]


@contextlib.contextmanager
def private_vm(library):
    """A VirtualMachine over the library at ``library`` as it is now.

    Loads a private copy: the dynamic loader hands back an already loaded
    library for the same path, so a rebuilt one would never be seen.
    """
    import shutil
    import tempfile
    import time
    from pathlib import Path

    import tvm
    from tvm import relax

    with tempfile.TemporaryDirectory(prefix="modelbuild-lib-") as tmp:
        copy = Path(tmp) / f"{Path(library).stem}-{time.time_ns()}.so"
        shutil.copyfile(library, copy)
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(copy)), tvm.cpu())
        try:
            yield vm
        finally:
            del vm


def library_latency(library, inputs, *, runs: int = 5, warmup: int = 1) -> tuple[float, float]:
    """(median, standard deviation) seconds of vm["main"](*inputs) for a built library."""
    import statistics
    import time

    with private_vm(library) as vm:
        for _ in range(warmup):
            vm["main"](*inputs)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            vm["main"](*inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times), statistics.pstdev(times)
