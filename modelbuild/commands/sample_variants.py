"""`python -m modelbuild sample`: sample valid schedule variants of one workload."""

from __future__ import annotations

import argparse

from ..core import requires
from . import options
from .output import console
from .workspace import resolve_model

HELP = "sample valid schedule variants of one workload (no measurement)"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild sample --help``)."""
    options.model(p)
    p.add_argument("workload")
    p.add_argument("-n", "--count", type=options.positive, default=3)
    p.add_argument("--seed", type=int, default=1)
    options.target(p)


def run(args) -> int:
    from ..schedules import variants

    requires.require(requires.SAMPLING, "sampling schedule variants")
    ws = resolve_model(args)
    project, spec, funcs = ws.project, ws.spec, ws.partitioned().functions()
    ws.require(funcs, [args.workload])
    with console.status(f"sampling {args.count} variant(s) of {args.workload} ..."):
        paths = variants.sample(project.model(args.model), args.workload, funcs[args.workload],
                                spec, args.count, seed=args.seed)
    for path in paths:
        console.print(f"wrote {path}")
    console.print(f"make one active with: python -m modelbuild select {args.model} "
                  f"{args.workload} <k>")
    return 0
