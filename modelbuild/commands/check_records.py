"""`python -m modelbuild check`: every record against the current model, with the build's checks."""

from __future__ import annotations

from rich.markup import escape

from .output import console
from .workspace import workloads_of


def run(args) -> int:
    from ..schedules import check

    project, spec, funcs = workloads_of(args)
    checked, problems = check.check_model(project.model(args.model), funcs, spec)
    for problem in problems:
        console.print(f"[red]{escape(str(problem.file))}[/red]: workload {problem.workload}: "
                      f"{escape(problem.message)}")
    verdict = "[red]problems[/red]" if problems else "[green]ok[/green]"
    console.print(f"{args.model}: checked {checked} record file(s): {len(problems)} "
                  f"with problems - {verdict}")
    return 1 if problems else 0
