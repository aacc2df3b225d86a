"""End-to-end latency of a model's library, untuned against with the shipped records.

    python bench/latency.py [--model resnet50] [--runs 20]

Builds the model twice in fresh copies of the project (schedules/ emptied,
then as shipped), loads each library with tvm.runtime.load_module and times
vm["main"] on the same random input: warm-up, then the median of --runs runs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(root: Path, model: str) -> Path:
    subprocess.run([sys.executable, "-m", "doit", f"build:{model}"], cwd=root, check=True,
                   capture_output=True)
    return root / "build" / model / f"{model}.so"


def latency(lib_path: Path, runs: int) -> tuple[float, float]:
    from modelbuild.core import manifest
    from modelbuild.measure.latency import library_latency, model_inputs

    man = manifest.read(lib_path.parent / "partition" / "manifest.msgpack")
    return library_latency(lib_path, model_inputs(man), runs=runs, warmup=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelbuild-latency-") as tmp:
        results = {}
        for label in ("untuned", "shipped records"):
            root = Path(tmp) / label.replace(" ", "_")
            root.mkdir()
            shutil.copy(REPO / "dodo.py", root)
            shutil.copytree(REPO / "models", root / "models")
            shutil.copytree(REPO / "schedules", root / "schedules")
            if label == "untuned":
                shutil.rmtree(root / "schedules" / args.model, ignore_errors=True)
            results[label] = latency(build(root, args.model), args.runs)
    print(f"\n{args.model}: end-to-end latency, median of {args.runs} runs\n")
    for label, (median, spread) in results.items():
        print(f"{label:18} {median * 1e3:9.1f} ms  (stdev {spread * 1e3:.1f} ms)")
    speedup = results["untuned"][0] / results["shipped records"][0]
    print(f"{'speedup':18} {speedup:9.2f}x")


if __name__ == "__main__":
    main()
