"""`python -m modelbuild sample`: sample valid schedule variants of one workload."""

from __future__ import annotations

from ..core import requires
from .output import console
from .workspace import require, workloads_of


def run(args) -> int:
    from ..schedules import variants

    requires.require(requires.SAMPLING, "sampling schedule variants")
    project, spec, funcs = workloads_of(args)
    require(args.model, funcs, [args.workload])
    with console.status(f"sampling {args.count} variant(s) of {args.workload} ..."):
        paths = variants.sample(project.model(args.model), args.workload, funcs[args.workload],
                                spec, args.count, seed=args.seed)
    for path in paths:
        console.print(f"wrote {path}")
    console.print(f"make one active with: python -m modelbuild select {args.model} "
                  f"{args.workload} <k>")
    return 0
