"""Build speed of modelbuild against plain tvm.compile, measured side by side.

    python bench/build_speed.py [--model resnet50] [--repeat 3] [--json out.json]

Baseline: what a user runs today - one fresh Python process that imports the
model, runs tvm.compile with the same records (through MetaScheduleApplyDatabase)
and export_library. Against it, each in a fresh copy of the project:
clean `doit build:<model>`, clean `doit -n 2 build:<model>`, a rebuild after
editing one record (two tile factors swapped: a real, valid change), and a
no-op rebuild. Each figure is the median of --repeat runs of a whole process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BASELINE = """
import sys
from pathlib import Path
from modelbuild import models, reference, targets
root = Path(sys.argv[1]); name = sys.argv[2]
spec = models.discover(root / "models")[name]
ex = reference.compile_model(spec, root / "schedules" / name, targets.resolve("llvm"))
ex.export_library(str(root / "baseline.so"))
"""


def timed(cmd: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark step failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def fresh_project(work: Path, tag: str) -> Path:
    root = work / tag
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    shutil.copy(REPO / "dodo.py", root / "dodo.py")
    shutil.copytree(REPO / "models", root / "models")
    shutil.copytree(REPO / "schedules", root / "schedules")
    return root


def edit_one_record(root: Path, model: str) -> str:
    """Swap the two outer factors of the first non-trivial tile decision of one record."""
    for path in sorted((root / "schedules" / model).glob("*.json")):
        data = json.loads(path.read_text())
        insts, decisions = data["trace"]
        for decision in decisions:
            index, value = decision
            if insts[index][0] == "SamplePerfectTile" and value[0] != value[1]:
                value[0], value[1] = value[1], value[0]
                path.write_text(json.dumps(data, indent=1))
                return path.stem
    sys.exit(f"no record in schedules/{model}/ with a tile decision to edit")


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    py, model = sys.executable, args.model
    doit = [py, "-m", "doit"]
    figures: dict[str, list[float]] = {k: [] for k in
                                       ("baseline", "clean", "clean_n2", "one_record", "noop")}
    with tempfile.TemporaryDirectory(prefix="modelbuild-bench-") as tmp:
        work = Path(tmp)
        for i in range(args.repeat):
            print(f"round {i + 1}/{args.repeat} ...", file=sys.stderr)
            root = fresh_project(work, "baseline")
            figures["baseline"].append(timed([py, "-c", BASELINE, str(root), model], root))
            root = fresh_project(work, "serial")
            figures["clean"].append(timed([*doit, f"build:{model}"], root))
            edited = edit_one_record(root, model)
            figures["one_record"].append(timed([*doit, f"build:{model}"], root))
            figures["noop"].append(timed([*doit, f"build:{model}"], root))
            root = fresh_project(work, "parallel")
            figures["clean_n2"].append(timed([*doit, "-n", "2", f"build:{model}"], root))
    base = median(figures["baseline"])
    rows = [
        ("baseline: fresh process, tvm.compile + export_library", "baseline", None),
        ("clean doit build", "clean", 1.2),
        ("clean doit -n 2 build", "clean_n2", 0.7),
        (f"rebuild after editing one record ({edited})", "one_record", 0.25),
        ("no-op rebuild", "noop", 0.1),
    ]
    print(f"\nmodel {model}, median of {args.repeat} runs each\n")
    print(f"{'figure':58} {'seconds':>8} {'ratio':>6} {'target':>7}")
    result = {"model": model, "repeat": args.repeat, "figures": {}}
    for label, key, target in rows:
        secs = median(figures[key])
        ratio = secs / base
        verdict = "" if target is None else ("ok" if ratio <= target else "MISSED")
        target_text = "" if target is None else f"<={target}"
        print(f"{label:58} {secs:8.2f} {ratio:6.2f} {target_text:>7} {verdict}")
        result["figures"][key] = {"seconds": secs, "ratio": ratio, "target": target,
                                  "runs": figures[key]}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
