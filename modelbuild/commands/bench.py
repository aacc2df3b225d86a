"""`python -m modelbuild bench`: build, then time the library end to end and per workload."""

from __future__ import annotations

import json

from ..core import manifest
from ..core.errors import BuildError
from . import buildrun
from .output import console, errors
from .workspace import choice_of, model_layout, project_of


def run(args) -> int:
    from rich.progress import Progress

    from ..measure import benchmark

    project = project_of(args)
    layout = model_layout(project, args.model)
    choice = choice_of(args)
    choice.resolve()
    err = errors
    if args.build:
        with err.status(f"doit build:{args.model} {' '.join(choice.doit_vars())} ..."):
            run = buildrun.build(project, args.model, choice)
        if not run.ok:
            raise BuildError(f"build of '{args.model}' failed: {run.reason}",
                             hint=f"doit build:{args.model} shows the whole output")
    man = manifest.read(layout.manifest)
    if man is None or not layout.library.is_file():
        raise BuildError(f"no library of '{args.model}' at {layout.library}",
                         hint=f"doit build:{args.model}")
    with Progress(console=err, transient=True) as progress:
        result = benchmark.measure(layout.library, man, model=args.model, target=args.target,
                                   runs=args.runs, warmup=args.warmup,
                                   on_progress=progress_callback(progress))
    benchmark.save(layout.benchmark, result)
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
