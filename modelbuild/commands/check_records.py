"""`python -m modelbuild check`: every record against the current model, with the build's checks."""

from __future__ import annotations

import argparse

from rich.markup import escape

from ..schedules import status
from . import options
from .output import console
from .workspace import resolve_model

HELP = "validate every record against the current model"


def arguments(p: argparse.ArgumentParser) -> None:
    """This command's arguments (``python -m modelbuild check --help``)."""
    options.model(p)
    options.target(p)


def run(args) -> int:
    from ..schedules import check

    ws = resolve_model(args)
    spec, part, layout = ws.spec, ws.partitioned(), ws.layout
    checked, problems = check.check_model(layout, part.functions(), spec,
                                          part.variant_functions())
    for problem in problems:
        where = f"workload {problem.workload}: " if problem.workload else ""
        console.print(f"[red]{escape(str(problem.file))}[/red]: {where}{escape(problem.message)}")
    for row in status.rows(layout, part.manifest, spec.tvm_target):
        if row.note.startswith("tuned for "):
            console.print(f"note: {row.workload}: {escape(row.note)}")
    verdict = "[red]problems[/red]" if problems else "[green]ok[/green]"
    console.print(f"{args.model}: checked {checked} record file(s): {len(problems)} "
                  f"with problems - {verdict}")
    return 1 if problems else 0
