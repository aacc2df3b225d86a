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
    p.add_argument("-n", "--count", type=options.sample_count, default=3)
    p.add_argument("--seed", type=options.seed, default=1)
    p.add_argument("--compute", default="direct",
                   help="sample schedules of this compute of the workload (e.g. winograd); "
                        "the variants name it")
    options.target(p)


def compute_func(part, workload: str, compute: str):
    """The TIR of ``compute`` of ``workload`` in the partition ``part`` (the build's, or a
    private one when the build's is not current for this target and layout: build/ may
    hold another layout's workloads); BuildError (one line) when it has none."""
    import tvm

    from ..core.errors import BuildError
    from ..schedules.compute_record import computes

    have = computes(part.layout, workload)
    if compute not in have:
        raise BuildError(f"no compute '{compute}'; its computes: "
                         f"{', '.join(have)}", workload=workload)
    return tvm.ir.load_json(part.layout.workload(workload, compute).read_text())


def run(args) -> int:
    from ..schedules import variants

    requires.require(requires.SAMPLING, "sampling schedule variants")
    ws = resolve_model(args)
    project, spec, part = ws.project, ws.spec, ws.partitioned()
    funcs = part.functions()
    ws.require(funcs, [args.workload])
    func = funcs[args.workload]
    if args.compute != "direct":
        func = compute_func(part, args.workload, args.compute)
    with console.status(f"sampling {args.count} variant(s) of {args.workload} ..."):
        paths = variants.sample(project.model(args.model), args.workload, func,
                                spec, args.count, seed=args.seed,
                                compute=None if args.compute == "direct" else args.compute)
    for path in paths:
        console.print(f"wrote {path}")
    console.print(f"make one active with: python -m modelbuild select {args.model} "
                  f"{args.workload} <k>")
    return 0
