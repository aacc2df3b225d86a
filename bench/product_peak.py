"""How close the encoder's matrix products come to the machine's peak: each packed product
workload of the BERT-style encoder (bench/nets_transformer.py; S=128, H=768 by default),
scheduled by the CPU default schedule as a build with no records schedules it, timed in
turn with bench/fma_peak.py's kernel (a chain of fused multiply-adds in registers, nothing
read) in the same alternating rounds, so both see the same clock and the same neighbours.

Per product: GFLOP/s (2 x its multiply-adds / median time), its share of the FMA kernel's
GFLOP/s measured beside it, and of the nominal peak (cores x 2 FMA pipes x floats per
vector x 2 x clock, as bench/latency.py computes it). The kernel's own share of the
nominal peak says how much of it a core gives at all (the clock a VM runs at, two vCPUs
sharing a core's pipes).

Beside each product, the same product through onnxruntime (its MLAS SGEMM: weights packed
when the session is made, an assembly register-tile kernel): a one-MatMul model of the
same rows, reduction and columns plus a bias, timed in the same rounds. It says what a
hand-written kernel reaches on this machine, at the same minute.

    python bench/product_peak.py [--seq 128] [--hidden 768] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def _timed(lib, name: str, params, number: int):
    import numpy as np
    import tvm

    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype)) for shape, dtype in params]
    evaluate = lib.time_evaluator(name, tvm.cpu(), number=number, repeat=1)
    evaluate(*args)
    return lambda: evaluate(*args).mean


def products(seq: int, hidden: int, heads: int, target) -> dict:
    """{workload: (timer, flops, (rows, reduction, columns))} for the encoder's packed
    products."""
    import numpy as np
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    import nets_transformer
    from modelbuild.steps.partition import fuse_stages, workloads_of
    from modelbuild.targets import cpu, cpu_schedule

    model = nets_transformer.encoder(1, seq, hidden, heads)
    lanes = cpu.vector_floats(dict(target.export()))
    fused = fuse_stages(from_onnx(model, keep_params_in_input=False), target, lanes)["FuseTIR"]
    found = {}
    for name, func in workloads_of(fused).items():
        if "matmul_packed" not in name:
            continue
        scheduled = cpu_schedule.default_schedule(func, name, target)
        lib = tvm.tirx.build(tvm.IRModule({name: scheduled.with_attr("global_symbol", name)}),
                             target=target)
        params = [([int(d) for d in b.shape], str(b.dtype)) for b in scheduled.params]
        (a_shape, _), (w_shape, _) = params[0], params[1]
        rows, reduction, columns = int(np.prod(a_shape[:-1])), a_shape[-1], w_shape[0] * w_shape[2]
        found[name] = (_timed(lib, name, params, 20), 2 * rows * reduction * columns,
                       (rows, reduction, columns))
    return found


def onnxruntime_product(rows: int, reduction: int, columns: int, threads: int):
    """A timer for ``x[rows, reduction] @ w[reduction, columns] + b`` through onnxruntime
    (constant random weights, ``threads`` intra-op threads, as bench/latency.py makes its
    sessions), and its flops."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from latency import onnx_runner

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((reduction, columns)).astype("float32"), "w")
    bias = numpy_helper.from_array(rng.standard_normal(columns).astype("float32"), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, reduction])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, columns])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "product.onnx"
        path.write_bytes(model.SerializeToString())
        run = onnx_runner(path, [rng.standard_normal((rows, reduction)).astype("float32")], threads)
    calls = 10

    def timed():
        start = time.perf_counter()
        for _ in range(calls):
            run()
        return (time.perf_counter() - start) / calls

    timed()  # warm, as the products are
    return timed, 2 * rows * reduction * columns


def fma_kernel(threads: int, lanes: int, target):
    """bench/fma_peak.py's kernel as a timer, and its flops per call."""
    import tvm

    import fma_peak

    lib, args, flops = fma_peak.kernel(threads, lanes, target)
    evaluate = lib.mod.time_evaluator("main", tvm.cpu(), number=20, repeat=1)
    evaluate(*args)  # warm, as the products are (_timed)
    return (lambda: evaluate(*args).mean), flops


def main() -> None:
    from latency import SETTLE, clock_ghz, physical_cores, positive

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", type=positive(), default=128)
    parser.add_argument("--hidden", type=positive(), default=768)
    parser.add_argument("--heads", type=positive(), default=12)
    parser.add_argument("--rounds", type=positive(), default=15)
    parser.add_argument("--fma-pipes", type=positive(), default=2)
    args = parser.parse_args()
    if args.hidden % args.heads:
        parser.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")

    threads = physical_cores()
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before TVM's pool starts
    import tvm

    from modelbuild.targets import cpu, registry

    spec = registry.resolve("llvm")
    target = tvm.target.Target(spec.tvm_target)
    lanes = cpu.vector_floats(spec.tvm_target)
    ghz, clock_from = clock_ghz(None)
    nominal = threads * args.fma_pipes * lanes * 2 * ghz
    runners = {}
    for name, (run, flops, shape) in products(args.seq, args.hidden, args.heads, target).items():
        runners[name] = (run, flops)
        label = f"  onnxruntime, {'x'.join(map(str, shape))} (rows x reduction x columns)"
        if label not in runners:  # one per shape: the encoder has two 768 x 768 products
            runners[label] = onnxruntime_product(*shape, threads)
    runners["FMA kernel (bench/fma_peak.py)"] = fma_kernel(threads, lanes, target)
    print(f"{spec.tvm_target['mcpu']}, {threads} threads; nominal peak {nominal:.0f} GFLOP/s "
          f"({threads} cores x {args.fma_pipes} pipes x {lanes} floats x 2 x {ghz:.2f} GHz, "
          f"{clock_from}); load average {os.getloadavg()[0]:.2f}")
    gflops = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, (run, flops) in runners.items():
            time.sleep(SETTLE)  # the pool that ran last (onnxruntime's spins) parks first
            gflops[name].append(flops / run() / 1e9)
    medians = {name: statistics.median(v) for name, v in gflops.items()}
    measured = medians["FMA kernel (bench/fma_peak.py)"]
    print(f"{'':66} {'GFLOP/s':>8} {'% FMA kernel':>13} {'% nominal':>10}")
    for name, g in medians.items():
        print(f"{name[:66]:66} {g:8.1f} {100 * g / measured:13.1f} {100 * g / nominal:10.1f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
