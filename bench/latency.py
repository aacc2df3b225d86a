"""End-to-end latency of a model, side by side: onnxruntime, the library with the CPU default
schedule alone (no records), and the library with the shipped records.

    python bench/latency.py [--model resnet50] [--runs 20] [--with-tvm-default] [--json PATH]

Each library is built by `doit build:<model>` in a fresh copy of the project
(schedules/ emptied for the untuned one). All of them run the same random input
with the same thread count (this machine's physical cores: TVM's default, and
onnxruntime's intra-op threads set to it), one run of each in turn (so a busy
spell of the machine hits all of them alike), after warm-up runs; the table
gives the median, quartiles and standard deviation of --runs runs and the ratio
to onnxruntime. --with-tvm-default adds a library built without the CPU default
schedule (TVM's own default: serial, scalar loops; slow: a few runs only).
Results go to bench/results/latency.json as well.
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

TVM_DEFAULT_TARGET = '''
from modelbuild.targets import TargetSpec, register
from modelbuild.targets.cpu import configure_llvm

# The llvm target without modelbuild's CPU default schedule: TVM's own default.
register(TargetSpec("llvm-tvm-default", {"kind": "llvm"}, "llvm, TVM's default schedule",
                    records_from=("llvm",), configure=configure_llvm, options=("mcpu",)))
'''


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or 1


def build(root: Path, model: str, *extra: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "doit", f"build:{model}", *extra], cwd=root,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"build of {model} in {root} failed:\n{proc.stdout}{proc.stderr}")
    return root / "build" / model / f"{model}.so"


def project_copy(tmp: Path, name: str, model: str, records: bool, dodo_extra: str = "") -> Path:
    root = tmp / name
    root.mkdir()
    shutil.copy(REPO / "dodo.py", root)
    if dodo_extra:
        with open(root / "dodo.py", "a") as f:
            f.write(dodo_extra)
    shutil.copytree(REPO / "models", root / "models")
    (root / "schedules").mkdir()
    if records and (REPO / "schedules" / model).is_dir():
        shutil.copytree(REPO / "schedules" / model, root / "schedules" / model)
    return root


def onnx_runner(model: str, inputs, threads: int):
    import onnxruntime

    from modelbuild.core import models

    spec = models.discover(REPO / "models")[model]
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(spec.onnx_path), options,
                                           providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feed = dict(zip(names, inputs))
    return lambda: session.run(None, feed)


def library_runner(path: Path, inputs):
    import tvm

    from modelbuild.measure.latency import private_vm

    context = private_vm(path)
    vm = context.__enter__()
    args = [tvm.runtime.tensor(x) for x in inputs]
    return lambda: vm["main"](*args)


def spread(samples: list[float]) -> dict:
    ms = sorted(s * 1e3 for s in samples)
    q1, med, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return {"median": round(statistics.median(ms), 3), "q1": round(q1, 3), "q3": round(q3, 3),
            "stdev": round(statistics.stdev(ms), 3) if len(ms) > 1 else 0.0,
            "min": round(ms[0], 3), "max": round(ms[-1], 3), "runs": len(ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--with-tvm-default", action="store_true")
    parser.add_argument("--json", default=str(REPO / "bench" / "results" / "latency.json"))
    args = parser.parse_args()
    import numpy as np

    from modelbuild.core import manifest
    from modelbuild.targets import hostcpu

    threads = physical_cores()
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    with tempfile.TemporaryDirectory(prefix="modelbuild-latency-") as tmp_name:
        tmp = Path(tmp_name)
        libs = {}
        print(f"building {args.model} (this machine's CPU: {hostcpu.host()['cpu']}) ...",
              flush=True)
        libs["modelbuild, default schedule (no records)"] = build(
            project_copy(tmp, "untuned", args.model, records=False), args.model)
        libs["modelbuild, shipped records"] = build(
            project_copy(tmp, "records", args.model, records=True), args.model)
        if args.with_tvm_default:
            libs["TVM's default schedule (no records)"] = build(
                project_copy(tmp, "tvm_default", args.model, False, TVM_DEFAULT_TARGET),
                args.model, "target=llvm-tvm-default")
        man = manifest.read(next(iter(libs.values())).parent / "partition" / "manifest.msgpack")
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(shape).astype(dtype) for _, shape, dtype in man.inputs]
        runners = {"onnxruntime": onnx_runner(args.model, inputs, threads)}
        runners.update({label: library_runner(path, inputs) for label, path in libs.items()})
        slow = "TVM's default schedule (no records)"
        for run in runners.values():
            for _ in range(args.warmup):
                run()
        samples = {label: [] for label in runners}
        for i in range(args.runs):
            for label, run in runners.items():
                if label == slow and i >= 3:
                    continue  # seconds per run: three are enough to tell
                start = time.perf_counter()
                run()
                samples[label].append(time.perf_counter() - start)
            print(f"\r  run {i + 1}/{args.runs}", end="", flush=True)
        print()
    results = {label: spread(s) for label, s in samples.items()}
    base = results["onnxruntime"]["median"]
    print(f"\n{args.model}: end-to-end latency on this machine ({threads} threads each), "
          f"one run of each in turn\n")
    print(f"{'':44} {'median ms':>10} {'q1':>9} {'q3':>9} {'stdev':>8} {'runs':>5} {'÷ onnxruntime':>14}")
    for label, r in results.items():
        print(f"{label:44} {r['median']:10.1f} {r['q1']:9.1f} {r['q3']:9.1f} {r['stdev']:8.1f} "
              f"{r['runs']:5d} {r['median'] / base:14.2f}")
    out = {"model": args.model, "threads": threads, "cpu": hostcpu.host()["cpu"],
           "load_average": os.getloadavg(), "results": results,
           "ratio_to_onnxruntime": {k: round(v["median"] / base, 3) for k, v in results.items()}}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nsaved {args.json}")


if __name__ == "__main__":
    main()
