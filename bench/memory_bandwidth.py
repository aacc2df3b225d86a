"""The memory read bandwidth this machine gives a TVM kernel: the measure a batch-1 fully
connected layer (a matrix-vector product, each weight read once per run) is judged by.

The kernel sums a buffer far larger than the last-level cache, as a matrix-vector product
streams its weights: ``TASKS`` parallel tasks, each reading ``STREAMS`` contiguous streams
side by side in vectors of the target's width, into ``STREAMS x INNER`` independent
accumulators (an add's latency never limits it). It reads every byte once per call and
writes a few hundred floats. The best of these shapes measured 17-19 GB/s on 2 threads on
cascadelake (2 vCPUs; other shapes down to 12), numpy's single-threaded sum 7.4.

On a shared VM the bandwidth moves with the neighbours' load from minute to minute (9-19
GB/s within an hour on the same machine), so a product's GB/s means something only beside
this kernel's in the same run: bench/latency.py runs it as one more runner, reading as many
bytes as the model's weights, in the same alternating blocks.

    python bench/memory_bandwidth.py [--mb 512]   # GB/s on 1 thread and on all
"""

from __future__ import annotations

import os
import sys

TASKS, STREAMS, INNER = 16, 4, 4


def reader(nbytes: int, lanes: int, target):
    """A callable that reads about ``nbytes`` (rounded down to whole vectors per task) once
    per call, and the bytes it reads."""
    import numpy as np
    import tvm
    from tvm import s_tir, te

    steps = max(1, nbytes // (4 * TASKS * STREAMS * INNER * lanes))
    shape = (TASKS, STREAMS, steps, INNER, lanes)
    a = te.placeholder(shape, "float32", "a")
    k = te.reduce_axis((0, steps), "k")
    out = te.compute((TASKS, STREAMS, INNER, lanes),
                     lambda t, s, i, j: te.sum(a[t, s, k, i, j], axis=k), name="out")
    sch = s_tir.Schedule(te.create_prim_func([a, out]).with_attr("global_symbol", "main"))
    t, s, i, j, kk = sch.get_loops(sch.get_sblock("out"))
    sch.reorder(t, kk, s, i, j)
    sch.parallel(t)
    sch.unroll(s)
    sch.unroll(i)
    sch.vectorize(j)
    func = tvm.compile(sch.mod, target=target)["main"]
    x = tvm.runtime.tensor(np.ones(shape, "float32"))
    y = tvm.runtime.tensor(np.zeros((TASKS, STREAMS, INNER, lanes), "float32"))
    return (lambda: func(x, y)), int(np.prod(shape)) * 4


def measured_gbps(nbytes: int, lanes: int, target, runs: int = 10) -> float:
    """The median GB/s of ``runs`` calls, after one."""
    import statistics
    import time

    read, size = reader(nbytes, lanes, target)
    read()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        read()
        seconds.append(time.perf_counter() - start)
    return size / statistics.median(seconds) / 1e9


def main() -> None:
    import argparse
    import subprocess

    from latency import physical_cores, positive  # bench/latency.py, beside this script

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=positive(), default=512, help="the buffer read, in MB")
    parser.add_argument("--threads", type=positive(), help=argparse.SUPPRESS)  # the child's
    args = parser.parse_args()
    if args.threads is None:  # TVM's pool is sized once per process: one child per count
        for threads in sorted({1, physical_cores()}):
            subprocess.run([sys.executable, __file__, "--mb", str(args.mb),
                            "--threads", str(threads)], check=True,
                           env={**os.environ, "TVM_NUM_THREADS": str(threads)})
        return
    import tvm

    from modelbuild.targets import cpu, registry

    spec = registry.resolve("llvm")
    target = tvm.target.Target(spec.tvm_target)
    gbps = measured_gbps(args.mb << 20, cpu.vector_floats(spec.tvm_target), target)
    print(f"{spec.tvm_target['mcpu']}: read {gbps:.1f} GB/s on {args.threads} thread(s), "
          f"{args.mb} MB, median of 10; load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
