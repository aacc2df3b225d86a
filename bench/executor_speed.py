"""Builds on warm Dask workers (`python -m modelbuild serve`), side by side with a full compile.

    python bench/executor_speed.py [--model resnet50 --model densenet121] [--repeat 1]
                                   [--json bench/results/executor_speed.json]

Baseline: as bench/build_speed.py, a fresh process running tvm.compile with the
same records and export_library. Against it, in a fresh copy of the project with
`serve --workers 2` running (started and warmed untimed):

- clean build: `doit -n 2 -P thread build:M` (two steps in flight, one per worker);
- one-record rebuild: a tile decision of the first convolution's record permuted,
  then a cold `doit build:M` (lower and codegen on a worker, the link here);
- switching back to the previous record: a cold `doit build:M` (restores, link);
- Dask overhead per step: the round trip of a no-op step through the same entry
  point (cluster/worker.run_step: identity check, private folder), median of 50.

Then a scaling projection, from this machine's measurements: each workload's lower
and codegen times (warm TVM, in one process), its transfer sizes, partition and link
times (cold doit processes), and the round trip above. Assumptions, printed with it:
workers as fast as this machine's cores, a 1 Gbit/s network, greedy scheduling
(Graham's bound: critical path + remaining work / workers), partition and link
serial (partition as a cold doit process runs it, its TVM import included, which a
warm worker's partition does not pay: an upper bound). A model of a cluster we do not
have, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_speed as bs  # noqa: E402
from rich.table import Table  # noqa: E402

TARGETS = {"clean_serve": 0.7, "one_record": 0.05, "switch_back": 0.04}
NETWORK_BYTES_PER_S = 125e6  # 1 Gbit/s
WORKERS = (8, 32, 128)

ROUND_TRIP = """
import json, statistics, sys, time
from distributed import Client
from modelbuild.cluster.worker import identity, run_step
from modelbuild.targets import registry
spec = registry.resolve("llvm")
client = Client(sys.argv[1], timeout=10, set_as_default=False)
expected = identity("noop", spec.sources)
payload = {"payload": b"x" * 20000, "target": spec}
times = []
for _ in range(55):
    t = time.perf_counter()
    client.submit(run_step, "noop", expected, payload, pure=False).result()
    times.append(time.perf_counter() - t)
print(json.dumps(times[5:]))
"""

# every workload's lower and codegen, timed in one warm process; and its transfer sizes
STEP_TIMES = """
import json, sys, tempfile, time
from pathlib import Path
import tvm
from modelbuild.core import manifest
from modelbuild.core.paths import Project
from modelbuild.schedules.active import active
from modelbuild.steps import codegen, lower
from modelbuild.targets import registry
layout = Project(Path(sys.argv[1])).model(sys.argv[2])
spec = registry.resolve("llvm")
out = {}
with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    for w in manifest.read(layout.manifest).workloads:
        t0 = time.perf_counter()
        lower.run(layout.workload(w.name), active(layout, w.name), tmp / "l.json", spec, w.name)
        t1 = time.perf_counter()
        codegen.run(tmp / "l.json", tmp / "o.o", spec, w.name)
        t2 = time.perf_counter()
        rec = sum(map(len, active(layout, w.name).files().values()))
        out[w.name] = {"lower": t1 - t0, "codegen": t2 - t1,
                       "bytes": layout.workload(w.name).stat().st_size + rec
                                + 2 * (tmp / "l.json").stat().st_size + (tmp / "o.o").stat().st_size}
print(json.dumps(out))
"""


def start_serve(root: Path, workers: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "modelbuild", "serve", "--workers",
                             str(workers)], cwd=root, env=bs.bench_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    address = root / "build" / ".executor.json"
    deadline = time.monotonic() + 180
    while not address.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit("serve did not start")
        time.sleep(0.2)
    return proc


def stop_serve(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(60)


def measure(work: Path, model: str, repeat: int) -> dict:
    py = sys.executable
    build = [py, "-m", "doit", f"build:{model}"]
    schedules, workload, _ = bs.prepare_schedules(work, model, None)
    record_path = Path(model) / f"{workload}.json"
    original = json.loads((schedules / record_path).read_text())
    (edit,) = bs.valid_edits(work, model, workload, original, 1)
    cg, lk = f"codegen:{model}/{workload}", f"link:{model}"
    f: dict[str, list] = {k: [] for k in ("baseline", "clean_serve", "one_record",
                                          "switch_back", "partition", "link")}
    round_trips: list[float] = []
    for i in range(repeat):
        bs.console.print(f"{model}: round {i + 1}/{repeat} ...")
        root = bs.fresh_project(work, f"{model}-baseline", schedules)
        f["baseline"].append(bs.run([py, "-c", bs.BASELINE, str(root), model], root).seconds)

        root = bs.fresh_project(work, f"{model}-partition", schedules)
        f["partition"].append(bs.run([py, "-m", "doit", f"partition:{model}"], root).seconds)

        root = bs.fresh_project(work, f"{model}-serve", schedules)
        serve = start_serve(root, 2)
        try:
            address = json.loads((root / "build" / ".executor.json").read_text())["address"]
            r = bs.run([py, "-m", "doit", "-n", "2", "-P", "thread", f"build:{model}"], root)
            f["clean_serve"].append(r.seconds)
            record = root / "schedules" / record_path
            record.write_text(json.dumps(edit, indent=1))
            r = bs.run(build, root)
            bs.expect(r.out, {cg, lk}, what="one-record rebuild")
            f["one_record"].append(r.seconds)
            record.write_text(json.dumps(original, indent=1))
            r = bs.run(build, root)
            bs.expect(r.out, {lk}, {cg}, what="switching back")
            f["switch_back"].append(r.seconds)
            (root / "build" / model / f"{model}.so").unlink()
            r = bs.run(build, root)
            bs.expect(r.out, {lk}, {cg}, what="link alone")
            f["link"].append(r.seconds)
            r = bs.run([py, "-c", ROUND_TRIP, address], root)
            round_trips += json.loads(r.out.strip().splitlines()[-1])
        finally:
            stop_serve(serve)
    r = bs.run([py, "-c", STEP_TIMES, str(root), model], root)
    steps = json.loads(r.out.strip().splitlines()[-1])
    return {"f": f, "round_trips": round_trips, "steps": steps}


def project(m: dict) -> dict:
    """Critical path and projected clean builds on W workers, from the measurements."""
    rt = statistics.median(m["round_trips"])
    chains = [s["lower"] + s["codegen"] + 2 * rt + s["bytes"] / NETWORK_BYTES_PER_S
              for s in m["steps"].values()]
    serial = statistics.median(m["f"]["partition"]) + statistics.median(m["f"]["link"])
    out = {"critical_path": serial + max(chains), "work": sum(chains),
           "serial_parts": serial}
    for w in WORKERS:
        out[f"workers_{w}"] = serial + max(chains) + sum(chains) / w
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path,
                        default=bs.REPO / "bench" / "results" / "executor_speed.json")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="modelbuild-executor-bench-") as tmp:
        for model in args.model or ["resnet50", "densenet121"]:
            m = measure(Path(tmp), model, args.repeat)
            base = statistics.median(m["f"]["baseline"])
            rows = []
            table = Table(title=f"{model}: steps on warm workers (serve --workers 2) against "
                                f"tvm.compile (median of {args.repeat})")
            for col in ("figure", "value", "÷ baseline", "target"):
                table.add_column(col)
            labels = {"baseline": "baseline: tvm.compile + export (fresh process)",
                      "clean_serve": "clean build, serve --workers 2, doit -n 2 -P thread",
                      "one_record": "one-record rebuild, cold doit, serve running",
                      "switch_back": "switching back to the previous record, cold doit"}
            for key, label in labels.items():
                s = statistics.median(m["f"][key])
                target = TARGETS.get(key)
                ok = target is None or s / base <= target
                rows.append({"figure": key, "seconds": s, "ratio": s / base, "target": target})
                table.add_row(label, f"{s:.2f} s", f"[{'green' if ok else 'red'}]{s / base:.3f}[/]",
                              f"≤ {target}" if target else "")
            rt = statistics.median(m["round_trips"]) * 1000
            rows.append({"figure": "round_trip_ms", "ms": rt, "target": 20})
            table.add_row("Dask overhead per step (no-op round trip, median of 50)",
                          f"{rt:.1f} ms", "", "≤ 20 ms")
            bs.console.print(table)
            proj = project(m)
            bs.console.print(
                f"{model} projection ({len(m['steps'])} workloads; assumptions: workers as fast "
                f"as this machine's cores, 1 Gbit/s, a {rt:.1f} ms round trip per step, "
                f"partition {statistics.median(m['f']['partition']):.1f} s and link "
                f"{statistics.median(m['f']['link']):.1f} s serial, greedy "
                f"scheduling): critical path {proj['critical_path']:.1f} s, total step work "
                f"{proj['work']:.1f} s; projected clean build "
                + ", ".join(f"{w} workers {proj[f'workers_{w}']:.1f} s "
                            f"({proj[f'workers_{w}'] / base:.2f} of baseline)" for w in WORKERS))
            results[model] = {"rows": rows, "projection": proj, "steps": m["steps"],
                              "raw": m["f"]}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    bs.console.print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
