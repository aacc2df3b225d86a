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
    else:
        _check_built_for(layout, args.model, choice)
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


def _check_built_for(layout, model: str, choice) -> None:
    """With --no-build, the library must be the chosen target's: bench.json says which
    target it timed (--target c timed the llvm library and saved it as c's)."""
    from ..decision import fingerprint

    stamp = fingerprint.read_stamp(layout.library) or {}
    built = (stamp.get("inputs") or {}).get("target") if isinstance(stamp, dict) else None
    wanted = choice.resolve().key()
    if isinstance(built, str) and built != wanted:
        raise BuildError(f"{layout.library} was built for {_shown(built)}, not for "
                         f"{_shown(wanted)}: "
                         "--no-build times the library as it is",
                         hint=f"leave out --no-build, or run doit build:{model} "
                              f"{' '.join(choice.doit_vars())}".rstrip())


def _shown(key: str) -> str:
    """A target's key as its TVM target (the toolchain left out)."""
    try:
        value = json.loads(key)
    except ValueError:
        return key
    return json.dumps(value.get("tvm_target", value) if isinstance(value, dict) else value)


def progress_callback(progress):
    """A benchmark progress callback driving one rich progress bar per phase."""
    bars = {}

    def on_progress(phase, done, total):
        if phase not in bars:
            bars[phase] = progress.add_task(phase, total=total)
        progress.update(bars[phase], completed=done)
    return on_progress
