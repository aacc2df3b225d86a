"""The multiply-add throughput this machine gives a TVM kernel: a measured peak beside
bench/latency.py's nominal one (cores x FMA pipes x floats x 2 x clock).

The kernel keeps ``ACCUMULATORS`` vectors of ``lanes`` floats in registers and runs a long
chain of fused multiply-adds on each, nothing read or written in the loop (the results are
stored once, so nothing is dead). On one thread it shows the FMA pipes and the clock the
core really runs at; on every thread whether the cores are independent (two vCPUs that are
the hyper-threads of one core share its FMA pipes: the total does not grow).

    python bench/fma_peak.py            # prints GFLOP/s on 1 thread and on all
"""

from __future__ import annotations

import os
import sys

ACCUMULATORS = 12  # independent chains: enough to cover a 4-cycle FMA on two pipes
STEPS = 65536


def kernel(tasks: int, lanes: int, target):
    """The compiled kernel (``tasks`` parallel tasks), its arguments, and its flops per call."""
    import numpy as np
    import tvm
    from tvm import s_tir, te

    a = te.placeholder((tasks, ACCUMULATORS, lanes), "float32", "a")
    k = te.reduce_axis((0, STEPS), "k")
    # acc = acc * 0.999 + a, STEPS times: a chain of fused multiply-adds LLVM cannot fold
    comm = te.comm_reducer(lambda x, y: x * tvm.tirx.const(0.999, "float32") + y,
                           lambda t: tvm.tirx.const(0.0, t), name="fma")
    out = te.compute((tasks, ACCUMULATORS, lanes),
                     lambda t, i, j: comm(a[t, i, j] + k.astype("float32") * 0.0, axis=k),
                     name="out")
    sch = s_tir.Schedule(te.create_prim_func([a, out]).with_attr("global_symbol", "main"))
    block = sch.get_sblock("out")
    t, i, j, kk = sch.get_loops(block)
    sch.reorder(t, kk, i, j)
    sch.parallel(t)
    sch.unroll(i)
    sch.vectorize(j)
    lib = tvm.compile(sch.mod, target=target)
    args = [tvm.runtime.tensor(np.full((tasks, ACCUMULATORS, lanes), 1e-3, "float32"))
            for _ in range(2)]
    return lib, args, 2 * tasks * ACCUMULATORS * lanes * STEPS


def measured_gflops(lanes: int, threads: int, target) -> float:
    """GFLOP/s of the kernel on ``threads`` threads (one task per thread)."""
    import tvm

    lib, args, flops = kernel(threads, lanes, target)
    seconds = min(lib.mod.time_evaluator("main", tvm.cpu(), number=20, repeat=5)(*args).results)
    return flops / seconds / 1e9


def main() -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from latency import physical_cores  # noqa: E402 - bench/ is this script's folder

    threads = physical_cores()
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    import tvm

    from modelbuild.targets import cpu, registry

    spec = registry.resolve("llvm")
    lanes = cpu.vector_floats(spec.tvm_target)
    target = tvm.target.Target(spec.tvm_target)
    one, every = measured_gflops(lanes, 1, target), measured_gflops(lanes, threads, target)
    print(f"{spec.tvm_target['mcpu']}: {one:.0f} GFLOP/s on 1 thread, {every:.0f} on {threads}")


if __name__ == "__main__":
    main()
