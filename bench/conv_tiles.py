"""The blocked convolution's register tile, kernel by kernel: the CPU default schedule's
rule (``targets/cpu_schedule_blocked.tile``) against every other tile of a grid
(output positions x output channel blocks), for each blocked convolution of a model.

    python bench/conv_tiles.py [--model resnet50] [--mcpu haswell] [--max-accumulators 16]
                               [--json bench/results/conv_tiles.json]

The model is partitioned in a temporary copy of the project (``doit partition:M``, with
``mcpu=`` when given: ``haswell`` gives AVX2 code and a block of 8), then each
workload is compiled alone with each tile and timed on zero inputs (best of 5 x 10 runs,
on the physical cores). A kernel alone keeps its weights in cache, so in the model the
weight-heavy layers run slower than here; the ratios between tiles are what this is for.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from build_speed import bench_env  # this checkout's modelbuild, the copy's own cache

REPO = Path(__file__).resolve().parent.parent


def partition(model: str, mcpu: str | None, root: Path) -> Path:
    for name in ("dodo.py", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "models", root / "models")
    (root / "schedules").mkdir()
    cmd = [sys.executable, "-m", "doit", f"partition:{model}", *([f"mcpu={mcpu}"] if mcpu else [])]
    proc = subprocess.run(cmd, cwd=root, env=bench_env(), capture_output=True, text=True)
    if proc.returncode != 0:  # doit's own message (an unknown model, an unknown CPU): no traceback
        raise SystemExit(f"conv_tiles: `doit {' '.join(cmd[3:])}` failed:\n{proc.stdout}{proc.stderr}".rstrip())
    return root / "build" / model / "partition" / "workloads"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--mcpu", help="the CPU to build for (default: this machine's)")
    parser.add_argument("--max-accumulators", type=int, default=0,
                        help="largest tile tried (default: half the vector registers)")
    parser.add_argument("--json", default="bench/results/conv_tiles.json")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from modelbuild.measure.latency import use_physical_cores

    use_physical_cores()
    import tvm
    from tvm.s_tir import Schedule

    import modelbuild.targets.cpu_schedule_blocked as blocked
    from modelbuild.core.workloads import load_json
    from modelbuild.schedules.timing import kernel_seconds
    from modelbuild.targets import cpu_schedule, registry

    spec = registry.resolve("llvm")
    if args.mcpu:
        spec = dataclasses.replace(spec, tvm_target={**spec.tvm_target, "mcpu": args.mcpu})
    target = tvm.target.Target(spec.tvm_target)
    registers = cpu_schedule._registers(target)
    most = args.max_accumulators or registers // 2
    rule = blocked.tile

    def timed(func, name, tile_fn) -> float:
        blocked.tile = tile_fn
        try:
            scheduled = cpu_schedule.default_schedule(func, name, target)
            return kernel_seconds(scheduled, name, spec, number=10, repeat=5) * 1e3
        finally:
            blocked.tile = rule

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = partition(args.model, args.mcpu, Path(tmp))
        print(f"{args.model} for {spec.tvm_target['mcpu']}: {registers} vector registers, "
              f"tiles of up to {most} accumulators; ms per call, alone")
        for path in sorted(folder.glob("fused_conv2d_NCHWc*.json")):
            name, func = path.stem, load_json(path.read_text())
            sch = Schedule(tvm.IRModule({"main": func}))
            loops = sch.get_loops(sch.get_sblock("conv2d_NCHWc"))
            width, chunks = int(sch.get(loops[3]).extent), int(sch.get(loops[1]).extent)
            grid = {}
            for positions in (p for p in range(1, most + 1) if width % p == 0):
                for blocks in (b for b in (1, 2, 4) if chunks % b == 0
                               and 2 <= positions * b <= most):
                    grid[f"{positions}x{blocks}"] = timed(
                        func, name, lambda *_a, p=positions, b=blocks: (p, b))
            ours = timed(func, name, rule)
            best = min(grid, key=grid.get) if grid else "-"
            rows[name] = {"width": width, "channel_blocks": chunks, "rule_ms": ours,
                          "grid_ms": grid, "best": best}
            print(f"  {name:42} width {width:3}  rule {ours:7.4f}  best {best:>5} "
                  f"{grid.get(best, float('nan')):7.4f}  ({ours / grid[best]:.2f}x of best)"
                  if grid else f"  {name:42} rule {ours:7.4f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"model": args.model, "target": spec.tvm_target,
                                           "registers": registers, "workloads": rows}, indent=1))
    print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
