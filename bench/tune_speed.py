"""Tuning trials per minute on the executor: `serve --workers 1` and `--workers 2`, side by side.

    python bench/tune_speed.py [--light squeezenet] [--trials 16]
                               [--json bench/results/tune_speed.json]

The same workload set (the tiny test model's workloads, or with --light NAME the
onnx zoo's light_NAME with random weights, the workloads `tune` picks by time)
is tuned with the same budget and seed, each run in a fresh copy of a
partitioned project with `python -m modelbuild serve --workers W` running
(started untimed). The figures come from `tune --json`: trials per minute, the
median build and measure (lock held) seconds per candidate on the workers, and
the time the rounds spent on the workers (``cluster_s``: first build submitted to
last result back) and the rest, the tune process's own (search, cost model,
database: ``search_s``).

Projection to 8/32/128 workers, one per machine (each measures alone): a round
of R candidates (MetaSchedule's 64 for large budgets) costs the search's share
plus ceil(R / W) x (build + measure) on the workers, so trials per minute stop
growing once W reaches R, and long before when the search dominates (Amdahl).
On one machine the workers measure in turns: at most 60 / measure per minute.
A model from this machine's measurements, not a measurement of a cluster.
"""

from __future__ import annotations

import argparse
import json
import math
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

console = Console()
WORKERS = (8, 32, 128)
ROUND = 64  # MetaSchedule's candidates per round for budgets of thousands of trials


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


def projection(t: dict, rounds_of: int) -> dict:
    """Trials per minute on W machines (one worker each), from one run's figures: the
    search costs about the same per round whatever its size (a population of 512 evolved
    with the cost model), so a round of ``rounds_of`` costs one search plus
    ceil(rounds_of / W) candidates' build and measure in turn on each worker."""
    search = t["search_s"] / max(1, t["rounds"])  # the tune process's seconds per round
    work = (t["build_s"] or 0) + (t["measure_s"] or 0)
    out = {}
    for w in WORKERS:
        out[w] = 60 * rounds_of / (search + math.ceil(rounds_of / w) * work)
    out["search_bound"] = 60 * rounds_of / search if search else None
    out["one_machine_measure_bound"] = 60 / t["measure_s"] if t["measure_s"] else None
    out["search_s_per_round"] = search
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--light", help="the onnx zoo's light_NAME (random weights) instead "
                                        "of the tiny test model")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "tune_speed.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelbuild-tune-bench-") as tmp:
        base, model = partitioned(Path(tmp), args.light)
        runs = {w: tune_with(base, model, w, args.trials) for w in (1, 2)}
    table = Table(title=f"{model}: tune --total-trials {args.trials} on `serve --workers W` "
                        f"(this machine: {os.cpu_count()} cores, shared)")
    for col in ("workers", "trials/min", "build s/cand.", "measure s/cand.", "rounds on workers s",
                "search s (tune process)", "seconds"):
        table.add_column(col, justify="right")
    for w, t in runs.items():
        table.add_row(str(w), f"{t['trials_per_minute']}", f"{t['build_s']}", f"{t['measure_s']}",
                      f"{t['cluster_s']}", f"{t['search_s']}", f"{t['seconds']}")
    console.print(table)
    ratio = runs[2]["trials_per_minute"] / runs[1]["trials_per_minute"]
    console.print(f"2 workers / 1 worker: {ratio:.2f}x trials per minute (target >= 1.7x)")
    proj = projection(runs[2], ROUND)
    console.print("projected, one worker per machine, rounds of 64 candidates: "
                  + ", ".join(f"{w} workers {proj[w]:.0f}/min" for w in WORKERS)
                  + f"; bound by the search alone ({proj['search_s_per_round']:.0f} s a round): "
                    f"{proj['search_bound']:.0f}/min"
                  + f"; all workers on one machine (measuring in turns): at most "
                    f"{proj['one_machine_measure_bound']:.0f}/min")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"model": model, "trials": args.trials, "runs": runs,
                                     "ratio": ratio, "projection": proj}, indent=1))


if __name__ == "__main__":
    main()
