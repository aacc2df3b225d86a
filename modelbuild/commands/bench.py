"""`python -m modelbuild bench`: build, then time the library end to end and per workload."""

from __future__ import annotations

import argparse
import json

from ..core.errors import BuildError
from . import buildrun, options
from .output import console, errors
from .workspace import resolve_model

HELP = "time the built library end to end and per workload"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild bench --help``)."""
    options.model(p)
    options.timing(p)
    options.json_output(p, "print the result as JSON")
    p.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                   help="run `doit build:<model>` first, so the library matches the records "
                        "(default: on)")
    options.target(p)


def run(args) -> int:
    from rich.progress import Progress

    from ..measure import benchmark

    ws = resolve_model(args)
    project, layout, choice = ws.project, ws.layout, ws.choice
    choice.resolve()  # an unknown target is an error before the build
    if args.build:
        with errors.status(f"doit build:{args.model} {' '.join(choice.doit_vars())} ..."):
            run = buildrun.build(project, args.model, choice)
        if not run.ok:
            raise BuildError(f"build of '{args.model}' failed: {run.reason}",
                             hint=f"doit build:{args.model} shows the whole output")
    with Progress(console=errors, transient=True) as progress:
        result = benchmark.measure_built(layout, model=args.model, target=args.target,
                                         runs=args.runs, warmup=args.warmup,
                                         on_progress=progress_callback(progress))
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        console.print(benchmark.table(result))
        console.print(f"saved {layout.benchmark.relative_to(project.root)}")
    return 0


def progress_callback(progress):
    """A benchmark progress callback driving one rich progress bar per phase."""
    bars = {}

    def on_progress(phase, done, total):
        if phase not in bars:
            bars[phase] = progress.add_task(phase, total=total)
        progress.update(bars[phase], completed=done)
    return on_progress
