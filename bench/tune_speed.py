"""Tuning trials per minute on the executor: `serve --workers 1` and `--workers 2`, side by side.

    python bench/tune_speed.py [--light squeezenet] [--trials 48]
                               [--json bench/results/tune_speed.json]

The same workload set (the tiny test model's workloads, or with --light NAME the
onnx zoo's light_NAME with random weights, the workloads `tune` picks by time)
is tuned with the same budget and seed, each run in a fresh copy of a
partitioned project with `python -m modelbuild serve --workers W` running
(started untimed; serve's workers have one thread each, so "workers of the same
size"). The search runs on the workers, a chunk of one workload each
(cluster/tune_coordinator.py); the figures come from `tune --json`: trials per
minute, the chunks and their median seconds on a worker, the median build and
measure (lock held) seconds per candidate, the seconds the workers waited for
their machine's measuring lock, the workers' search seconds (a chunk's time
besides its builds and measurements) and how busy the workers were.

Where it stops scaling (the projection printed, one worker per machine): a
workload has at most one chunk in flight while others gain as much, so beyond
as many workers as workloads with budget left the extra workers add little
(W_eff = min(W, workloads)); trials per minute ~ W_eff x trials per chunk x 60 /
seconds per chunk. All workers on one machine measure in turns: at most
60 / measure seconds per candidate per machine. The budget needs two chunks or
more per workload (--trials >= 4 x workloads) for a second worker to help past
the first chunks. A model from this machine's measurements, not a measurement
of a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console(emoji=False)
WORKERS = (8, 32, 128)


def env() -> dict:
    out = {k: v for k, v in os.environ.items() if k != "MODELBUILD_EXECUTOR"}
    out["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [out.get("PYTHONPATH")])])
    return out


def partitioned(work: Path, light: str | None) -> tuple[Path, str]:
    import onnx
    from onnx_models import randomized_light, tiny_model

    name = light or "tiny"
    root = work / "base"
    (root / "models").mkdir(parents=True)
    (root / "schedules").mkdir()
    shutil.copy(REPO / "dodo.py", root / "dodo.py")
    onnx.save(randomized_light(light) if light else tiny_model(),
              str(root / "models" / f"{name}.onnx"))
    subprocess.run([sys.executable, "-m", "doit", f"partition:{name}"], cwd=root, env=env(),
                   check=True, capture_output=True)
    return root, name


def tune_with(base: Path, model: str, workers: int, trials: int) -> dict:
    root = base.parent / f"w{workers}"
    shutil.copytree(base, root, symlinks=True)
    serve = subprocess.Popen([sys.executable, "-m", "modelbuild", "serve", "--workers",
                              str(workers)], cwd=root, env=env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (root / "build" / ".executor.json").is_file():
            if serve.poll() is not None or time.monotonic() > deadline:
                sys.exit("serve did not start")
            time.sleep(0.2)
        proc = subprocess.run([sys.executable, "-m", "modelbuild", "tune", model,
                               "--total-trials", str(trials), "--no-keep-if-faster", "--json"],
                              cwd=root, env=env(), capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"tune with {workers} worker(s) failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout)["tuning"]
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(60)


def projection(t: dict) -> dict:
    """Trials per minute on W machines (one worker each), from one run's figures: each
    worker runs chunks of ``trials / chunks`` trials taking ``chunk_s`` seconds, and at most
    as many workers as workloads are busy at once."""
    per_chunk = sum(t["trials"].values()) / max(1, t["chunks"])
    workloads = len(t["calls"])
    out = {w: 60 * min(w, workloads) * per_chunk / t["chunk_s"] for w in WORKERS}
    out["workloads"] = workloads
    out["trials_per_chunk"] = per_chunk
    out["one_machine_measure_bound"] = 60 / t["measure_s"] if t["measure_s"] else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--light", help="the onnx zoo's light_NAME (random weights) instead "
                                        "of the tiny test model")
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "tune_speed.json")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="modelbuild-tune-bench-") as tmp:
        base, model = partitioned(Path(tmp), args.light)
        runs = {w: tune_with(base, model, w, args.trials) for w in (1, 2)}
    table = Table(title=f"{model}: tune --total-trials {args.trials} on `serve --workers W` "
                        f"(this machine: {os.cpu_count()} cores, shared; load average before: "
                        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f})")
    for col in ("workers", "trials/min", "chunks", "s/chunk", "build s/cand.",
                "measure s/cand.", "lock wait s", "search s (workers)", "busy", "seconds"):
        table.add_column(col, justify="right")
    for w, t in runs.items():
        table.add_row(str(w), f"{t['trials_per_minute']}", f"{t['chunks']}", f"{t['chunk_s']}",
                      f"{t['build_s']}", f"{t['measure_s']}", f"{t['lock_wait_s']}",
                      f"{t['search_s']}", f"{t['busy']}", f"{t['seconds']}")
    console.print(table)
    ratio = runs[2]["trials_per_minute"] / runs[1]["trials_per_minute"]
    console.print(f"2 workers / 1 worker: {ratio:.2f}x trials per minute (target >= 1.7x); "
                  f"load average after: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    proj = projection(runs[2])
    console.print(f"projected, one worker per machine, chunks of {proj['trials_per_chunk']:.1f} "
                  "trials: " + ", ".join(f"{w} workers {proj[w]:.0f}/min" for w in WORKERS)
                  + f"; it stops scaling at {proj['workloads']} workers (one per workload with "
                    "budget left)"
                  + (f"; all workers on one machine (measuring in turns): at most "
                     f"{proj['one_machine_measure_bound']:.0f}/min"
                     if proj["one_machine_measure_bound"] else ""))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"model": model, "trials": args.trials, "runs": runs,
                                     "ratio": ratio, "projection": proj,
                                     "load_before": load, "load_after": os.getloadavg()},
                                    indent=1))


if __name__ == "__main__":
    main()
