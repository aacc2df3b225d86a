"""Speed of the record tools on resnet50: import of a ~50-workload database, and check.

    python bench/records_speed.py [--repeat 3]

Setup (not timed): a copy of the project whose resnet50 gets one sampled
record per workload, exported as a MetaSchedule JSONDatabase. Then, each in a
fresh process, the median of --repeat runs: `import tvm` alone, `python -m
modelbuild import resnet50 <db>` into an empty schedules/, and `python -m
modelbuild check resnet50` over all those records. Target: import and check
each under 2 s beyond `import tvm`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SETUP = """
import sys
from pathlib import Path
from modelbuild.schedules import msdb, records
from modelbuild.targets import registry as targets
from modelbuild.core.paths import Project
from modelbuild.schedules.sample import sample_records
from modelbuild.commands.workspace import load_workloads
root, db = Path(sys.argv[1]), Path(sys.argv[2])
project = Project(root)
funcs = load_workloads(project, "resnet50")
recs = []
for name, func in funcs.items():
    try:
        recs += sample_records(func, name, targets.resolve("llvm"), 1, seed=5, model="resnet50")
    except RuntimeError:
        pass  # no valid design for this workload
msdb.export_database(recs, funcs, db)
print(len(recs))
"""


def run(cmd, cwd) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="modelbuild-bench-") as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        shutil.copy(REPO / "dodo.py", root)
        shutil.copytree(REPO / "models", root / "models")
        (root / "schedules").mkdir()
        db = Path(tmp) / "db"
        print("setup: sampling one record per resnet50 workload ...", file=sys.stderr)
        count = subprocess.run([py, "-c", SETUP, str(root), str(db)], cwd=root, check=True,
                               capture_output=True, text=True).stdout.strip().splitlines()[-1]
        times = {"import tvm": [], "import database": [], "check": []}
        for _ in range(args.repeat):
            times["import tvm"].append(run([py, "-c", "import tvm"], root))
            shutil.rmtree(root / "schedules")
            (root / "schedules").mkdir()
            times["import database"].append(
                run([py, "-m", "modelbuild", "import", "resnet50", str(db)], root))
            times["check"].append(run([py, "-m", "modelbuild", "check", "resnet50"], root))
    base = statistics.median(times["import tvm"])
    print(f"\nresnet50, database of {count} workloads, median of {args.repeat} runs\n")
    print(f"{'step':20} {'seconds':>8} {'beyond import tvm':>18} {'target':>8}")
    for key, values in times.items():
        secs = statistics.median(values)
        extra = "" if key == "import tvm" else f"{secs - base:18.2f}"
        verdict = "" if key == "import tvm" else ("<2 ok" if secs - base < 2 else "<2 MISSED")
        print(f"{key:20} {secs:8.2f} {extra:>18} {verdict:>8}")


if __name__ == "__main__":
    main()
