"""End-to-end latency, side by side in one process: onnxruntime against our library in each
layout (NCHW, channel-blocked NCHWc), with and without the shipped records.

    python bench/latency.py [--model resnet50 ...] [--suite declared|breadth|all]
                            [--layout NCHW --layout NCHWc]
                            [--runs 20] [--block 5] [--force] [--fma-pipes 2]
                            [--clock-ghz 4.5] [--json bench/results/latency.json]

The declared models (models/*.toml, the onnx package's architectures with their constant
weights) are the default suite; ``--suite breadth`` measures the models a new user brings
instead (bench/nets.py: the light zoo architectures the project does not declare, and
networks written with onnx.helper, all with random weights), ``all`` both.

Each library is built by `doit build:<model> layout=<layout>` in a fresh copy of the
project (schedules/ emptied for "no records"; "records" only where schedules/<model>
ships some). Every runner gets the same random input and the same threads: this
machine's physical cores (TVM_NUM_THREADS, set before TVM starts its thread pool, and
onnxruntime's intra-op threads). After warm-up, the runners take turns in blocks of
--block runs (the order rotating each round) until each has --runs runs, so a busy
spell hits all alike; the table has the median, quartiles, the ratio to onnxruntime,
GFLOP/s (2 x the multiply-adds of the ONNX model's Conv/Gemm/MatMul nodes per run) and
the share of this machine's peak, the largest difference of each library's outputs
from onnxruntime's relative to the largest |output| (one run on the same input, before
the timing), and where the time goes by kind of workload (convolutions, matrix
products, layout transforms, ...: the per-workload times of `python -m modelbuild bench`,
summed by kind) and the share of this machine's peak:

    peak = physical cores x FMA pipes per core x floats per vector x 2 x clock

floats per vector from the target's CPU (16 with AVX-512, 8 with AVX2: targets/cpu.py),
FMA pipes from --fma-pipes (2 on Zen 4/5 and most AVX-512 Xeons; not discoverable),
the clock from --clock-ghz, else cpufreq's maximum, else /proc/cpuinfo's "cpu MHz"
(on a VM the nominal clock: boost can exceed it, and a share above 100% then says so).

A model whose weights far exceed the caches (over ``STREAMED`` bytes: a batch-1 fully
connected layer reads each of its weights once per run, from memory) gets one more runner
in the same blocks: bench/memory_bandwidth.py's read kernel over as many bytes, and a
column of weight GB/s (the weights' bytes / median) with its share of that kernel's (the
bandwidth measured beside it: on a shared VM it moves from minute to minute).

A loaded machine distorts the comparison (onnxruntime's thread pool suffers far more than
ours): with a 1-minute load average above 0.5 this refuses to measure unless --force,
and the load averages go into the results either way (bench/results/latency.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
import nets  # noqa: E402 - bench/nets.py, beside this script

MODELS = ("resnet50", "densenet121", "inception_v1", "squeezenet")
SUITES = {"declared": MODELS, "breadth": tuple(nets.BREADTH),
          "all": MODELS + tuple(nets.BREADTH)}
QUIET = 0.5


def positive(kind=int):
    """An argparse type: a number of ``kind`` above 0, else argparse's usage error."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value

    return parse


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or 1


def build(root: Path, model: str, *extra: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "doit", f"build:{model}", *extra], cwd=root,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build of {model} in {root} failed:\n{proc.stdout}{proc.stderr}")
    return root / "build" / model / f"{model}.so"


def project_copy(tmp: Path, name: str, model: str, records: bool) -> Path:
    """A project with the declared models, and ``model`` when it is one of the breadth
    suite's (models/<model>.onnx, written once per run: tmp/<model>.onnx)."""
    root = tmp / name
    root.mkdir()
    shutil.copy(REPO / "dodo.py", root)
    shutil.copytree(REPO / "models", root / "models")
    if model in nets.BREADTH:
        shutil.copy(onnx_file(tmp, model), root / "models" / f"{model}.onnx")
        (root / "models" / f"{model}.toml").write_text(f'onnx = "{model}.onnx"\n')
    (root / "schedules").mkdir()
    if records:
        shutil.copytree(REPO / "schedules" / model, root / "schedules" / model)
    return root


def onnx_file(tmp: Path, model: str) -> Path:
    """The ONNX file of ``model``: declared (models/*.toml), or a breadth model written
    to tmp once."""
    if model not in nets.BREADTH:
        from modelbuild.core import models

        return models.discover(REPO / "models")[model].onnx_path
    path = tmp / f"{model}.onnx"
    if not path.is_file():
        import onnx

        onnx.save(nets.make(model), str(path))
    return path


def has_records(model: str) -> bool:
    return model not in nets.BREADTH and any((REPO / "schedules" / model).glob("*.json"))


def model_flops(path: Path) -> float:
    """2 x multiply-adds of the Conv, Gemm and MatMul nodes (shapes by ONNX inference)."""
    import numpy as np
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    g = model.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*g.input, *g.value_info, *g.output]}
    shapes.update({i.name: list(i.dims) for i in g.initializer})
    macs = 0
    for node in g.node:
        out = shapes.get(node.output[0]) if node.output else None
        if not out:
            continue
        if node.op_type == "Conv" and node.input[1] in shapes:
            macs += int(np.prod(out)) * int(np.prod(shapes[node.input[1]][1:]))
        elif node.op_type in ("Gemm", "MatMul") and node.input[0] in shapes:
            trans = any(a.name == "transA" and a.i for a in node.attribute)
            k = shapes[node.input[0]][-2 if trans else -1]
            macs += int(np.prod(out)) * int(k)
    return 2.0 * macs


def weight_bytes(path: Path) -> int:
    """The bytes of the model's weights, read once per run: its initializers, Constant
    nodes, and the tensors ConstantOfShape fills from a constant shape (how the onnx
    package's light architectures, the declared models among them, ship their weights)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type == "Constant":
            total += sum(numpy_helper.to_array(a.t).nbytes for a in node.attribute if a.name == "value")
        elif node.op_type == "ConstantOfShape" and node.input[0] in inits:
            value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"),
                         np.zeros(1, np.float32))
            count = int(np.prod(inits.pop(node.input[0])))
            total += count * value.itemsize
    return total + sum(a.nbytes for a in inits.values())


# weights beyond any of these machines' last-level caches (35.8 MB on the cascadelake VM):
# a run streams them from memory, and the memory's read bandwidth is what bounds it
STREAMED = 64 << 20
READ = "memory read, same bytes"


def clock_ghz(given: float | None) -> tuple[float, str]:
    if given:
        return given, "--clock-ghz"
    freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if freq.is_file():
        return int(freq.read_text()) / 1e6, str(freq)
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1e3, "/proc/cpuinfo cpu MHz (nominal on a VM)"
    return 0.0, "unknown"


def onnx_runner(path: Path, inputs, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in session.get_inputs()], inputs))
    return lambda: session.run(None, feed)


def library_runner(path: Path, inputs):
    import tvm

    from modelbuild.measure.latency import private_vm

    vm = private_vm(path).__enter__()  # the copy lives until the process ends
    args = [tvm.runtime.tensor(x) for x in inputs]
    return lambda: vm["main"](*args)


def arrays(result) -> list:
    """A runner's outputs as numpy arrays, flattened (a tuple of tensors, or one)."""
    import numpy as np

    if isinstance(result, (list, tuple)) or type(result).__name__ in ("Array", "ArrayObj"):
        return [a for r in result for a in arrays(r)]
    return [result.numpy() if hasattr(result, "numpy") else np.asarray(result)]


def output_error(reference: list, got: list) -> float:
    """The largest |difference| of the outputs relative to the largest |reference output|."""
    import numpy as np

    if len(reference) != len(got):
        return float("inf")
    scale = max(float(np.max(np.abs(r))) for r in reference) or 1.0
    return max(float(np.max(np.abs(np.asarray(g, dtype=np.float64) - r))) if r.size else 0.0
               for r, g in zip(reference, got)) / scale


KINDS = (("conv2d_NCHWc", "convolution, blocked"), ("depthwise", "convolution, depthwise"),
         ("conv2d", "convolution, NCHW"), ("matmul", "matrix product"),
         ("dense", "matrix product"), ("batch_matmul", "matrix product"),
         ("layout_transform", "layout transform"), ("softmax", "softmax"),
         ("layer_norm", "layer norm"), ("pool", "pooling"), ("mean", "pooling"))


def kind_of(workload: str) -> str:
    for part, kind in KINDS:
        if part in workload:
            return kind
    return "other"


def shares_by_kind(library: Path, model: str) -> dict[str, float]:
    """Where the library's time goes: the share of its latency by kind of workload."""
    from modelbuild.core import manifest
    from modelbuild.measure import benchmark

    man = manifest.read(library.parent / "partition" / "manifest.msgpack")
    result = benchmark.measure(library, man, model=model, target="llvm", runs=5, warmup=1)
    shares: dict[str, float] = {}
    for name, row in result["workloads"].items():
        shares[kind_of(name)] = shares.get(kind_of(name), 0.0) + row["share"]
    return {k: round(v, 3) for k, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v}


def spread(samples: list[float]) -> dict:
    ms = sorted(s * 1e3 for s in samples)
    q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return {"median": round(statistics.median(ms), 3), "q1": round(q1, 3), "q3": round(q3, 3),
            "min": round(ms[0], 3), "max": round(ms[-1], 3), "runs": len(ms)}


def libraries(tmp: Path, model: str, layouts: list[str]) -> dict[str, Path]:
    libs = {}
    for layout in layouts:
        variants = [("no records", False)] + ([("records", True)] if has_records(model) else [])
        for label, records in variants:
            print(f"  building {model} {layout} {label} ...", flush=True)
            root = project_copy(tmp, f"{model}-{layout}-{records}", model, records)
            libs[f"modelbuild {layout}, {label}"] = build(root, model, f"layout={layout}")
    return libs


# seconds between two blocks of runs: the thread pools of the side that ran last (onnxruntime's
# and TVM's both spin for a while after a run) park before the other side runs. Without it
# the 1.2 ms encoder (S=32) measured 1.8 ms after onnxruntime's blocks of 5 and onnxruntime
# 1.1 ms, and the other way round with blocks of 20.
SETTLE = 0.1


def alternate(runners: dict, runs: int, block: int, warmup: int) -> dict[str, list[float]]:
    samples = {label: [] for label in runners}
    order = list(runners)
    for round_ in range((runs + block - 1) // block):
        for label in order[round_ % len(order):] + order[:round_ % len(order)]:
            time.sleep(SETTLE)
            for _ in range(warmup if round_ == 0 else 0):
                runners[label]()
            for _ in range(min(block, runs - len(samples[label]))):
                start = time.perf_counter()
                runners[label]()
                samples[label].append(time.perf_counter() - start)
        print(f"\r  {min(runs, (round_ + 1) * block)}/{runs} runs each", end="", flush=True)
    print()
    return samples


def measure_model(model: str, args, tmp: Path, threads: int, peak: float) -> dict:
    import numpy as np

    from modelbuild.core import manifest

    onnx_path = onnx_file(tmp, model)
    libs = libraries(tmp, model, args.layout)
    man = manifest.read(next(iter(libs.values())).parent / "partition" / "manifest.msgpack")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(dtype) for _, shape, dtype in man.inputs]
    runners = {"onnxruntime": onnx_runner(onnx_path, inputs, threads)}
    runners.update({label: library_runner(path, inputs) for label, path in libs.items()})
    reference = arrays(runners["onnxruntime"]())
    errors = {label: output_error(reference, arrays(run())) for label, run in runners.items()}
    weights = weight_bytes(onnx_path)
    if weights > STREAMED:
        import tvm
        from memory_bandwidth import reader  # noqa: E402 - bench/, beside this script

        from modelbuild.targets import cpu, registry

        spec = registry.resolve("llvm")
        runners[READ], _ = reader(weights, cpu.vector_floats(spec.tvm_target),
                                  tvm.target.Target(spec.tvm_target))
    samples = alternate(runners, args.runs, args.block, args.warmup)
    flops = model_flops(onnx_path)
    results = {label: spread(s) for label, s in samples.items()}
    base = results["onnxruntime"]["median"]
    for label, r in results.items():
        r["ratio_to_onnxruntime"] = round(r["median"] / base, 3)
        if label == READ:
            continue
        r["gflops"] = round(flops / (r["median"] * 1e-3) / 1e9, 1)
        r["percent_of_peak"] = round(100 * r["gflops"] / peak, 1) if peak else None
        r["output_error"] = float(f"{errors[label]:.2e}")
        if label in libs:
            r["share_by_kind"] = shares_by_kind(libs[label], model)
    if READ in results:
        for r in results.values():
            r["weight_gbps"] = round(weights / (r["median"] * 1e-3) / 1e9, 2)
            r["percent_of_read_bandwidth"] = round(
                100 * results[READ]["median"] / r["median"], 1)
    return {"gflop_per_run": round(flops / 1e9, 3), "weight_mb": round(weights / 1e6, 1),
            "results": results, "load_average": os.getloadavg()}


def print_table(model: str, data: dict) -> None:
    print(f"\n{model} ({data['gflop_per_run']} GFLOP, {data.get('weight_mb', 0)} MB of weights "
          f"per run; load average {data['load_average'][0]:.2f} after)")
    streamed = READ in data["results"]
    print(f"{'':36} {'median ms':>10} {'q1':>8} {'q3':>8} {'÷ ort':>7} {'GFLOP/s':>8} "
          f"{'% peak':>7} {'error':>8}" + (f" {'GB/s':>6} {'% read':>7}" if streamed else ""))
    for label, r in data["results"].items():
        line = f"{label:36} {r['median']:10.1f} {r['q1']:8.1f} {r['q3']:8.1f} " \
               f"{r['ratio_to_onnxruntime']:7.2f} "
        line += (f"{'':8} {'':7} {'':8}" if label == READ else
                 f"{r['gflops']:8.1f} {r['percent_of_peak'] or 0:7.1f} {r['output_error']:8.1e}")
        if streamed:
            line += f" {r['weight_gbps']:6.1f} {r['percent_of_read_bandwidth']:7.0f}"
        print(line)
    for label, r in data["results"].items():
        if r.get("share_by_kind"):
            shown = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r["share_by_kind"].items())
            print(f"  {label}: {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=SUITES["all"])
    parser.add_argument("--suite", choices=tuple(SUITES), default="declared",
                        help="the models measured when no --model is given")
    parser.add_argument("--layout", action="append", choices=("NCHW", "NCHWc"))
    parser.add_argument("--runs", type=positive(), default=20)
    parser.add_argument("--block", type=positive(), default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--fma-pipes", type=positive(), default=2)
    parser.add_argument("--clock-ghz", type=positive(float))
    parser.add_argument("--force", action="store_true", help="measure on a loaded machine")
    parser.add_argument("--json", default=str(REPO / "bench" / "results" / "latency.json"))
    args = parser.parse_args()
    args.model = args.model or list(SUITES[args.suite])
    args.layout = args.layout or ["NCHW", "NCHWc"]
    load = os.getloadavg()
    if load[0] > QUIET:
        print(f"the 1-minute load average is {load[0]:.2f} (> {QUIET}): other work distorts "
              "latency, onnxruntime's far more than ours", file=sys.stderr)
        if not args.force:
            raise SystemExit("measure on a quiet machine, or pass --force (the load averages "
                             "are recorded with the results)")
    threads = physical_cores()
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before TVM's pool starts

    from modelbuild.targets import cpu, registry

    target = registry.resolve("llvm")
    lanes = cpu.vector_floats(target.tvm_target)
    ghz, clock_from = clock_ghz(args.clock_ghz)
    peak = threads * args.fma_pipes * lanes * 2 * ghz
    print(f"CPU {target.tvm_target['mcpu']}, {threads} threads each; peak {peak:.0f} GFLOP/s = "
          f"{threads} cores x {args.fma_pipes} FMA pipes x {lanes} floats x 2 x {ghz:.2f} GHz "
          f"({clock_from}); load average {load[0]:.2f}")
    out = {"cpu": target.tvm_target["mcpu"], "threads": threads, "load_average_before": load,
           "peak_gflops": round(peak, 1), "peak": {"cores": threads, "fma_pipes": args.fma_pipes,
                                                   "floats_per_vector": lanes, "clock_ghz": ghz,
                                                   "clock_from": clock_from},
           "runs": args.runs, "block": args.block, "models": {}}
    with tempfile.TemporaryDirectory(prefix="modelbuild-latency-") as tmp:
        for model in args.model:
            out["models"][model] = measure_model(model, args, Path(tmp), threads, peak)
            print_table(model, out["models"][model])
    out["load_average_after"] = os.getloadavg()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nload average after: {out['load_average_after'][0]:.2f}; saved {args.json}")


if __name__ == "__main__":
    main()
