"""`python -m modelbuild why`: a dry run naming each task the next build runs, and why."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.markup import escape

from . import options
from .output import console
from .workspace import choice_of, model_layout, project_of

HELP = "dry run: which tasks the next build runs, and why"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild why --help``)."""
    options.model(p)
    options.target(p)
    options.json_output(p)


def run(args) -> int:
    from ..decision import plan

    project = project_of(args)
    model_layout(project, args.model)
    # doit's state names files relative to the project root, where doit runs the build:
    # this dry run runs there too (as `doit` itself does, for dodo.py's directory).
    os.chdir(project.root)
    verdicts = plan.predict(Path("."), args.model, args.target, args.mcpu)
    if args.json:
        print(json.dumps([v.to_json() for v in verdicts], indent=2))
        return 0
    runs = [v for v in verdicts if v.action == plan.RUN]
    restores = [v for v in verdicts if v.action == plan.RESTORE]
    target = choice_of(args)
    if not verdicts:
        console.print(f"{args.model} (target {target}): nothing will run; "
                      f"`doit build:{args.model}` is up to date")
        return 0
    console.print(f"{args.model} (target {target}): {len(runs)} task(s) will run, "
                  f"{len(restores)} will be restored from the cache")
    for v in verdicts:
        label = "run    " if v.action == plan.RUN else "restore"
        console.print(f"  {label} {escape(v.task)}")
        for reason in v.reasons:
            console.print(f"            {escape(reason)}")
    return 0
