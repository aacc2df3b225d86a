"""`python -m modelbuild check`: every record against the current model, with the build's checks."""

from __future__ import annotations

from rich.markup import escape

from ..schedules import status
from .output import console
from .workspace import choice_of, functions, partitioned, project_of


def run(args) -> int:
    from ..schedules import check

    project, choice = project_of(args), choice_of(args)
    spec = choice.resolve()
    part = partitioned(project, args.model, choice)
    layout = project.model(args.model)
    checked, problems = check.check_model(layout, functions(part), spec)
    for problem in problems:
        console.print(f"[red]{escape(str(problem.file))}[/red]: workload {problem.workload}: "
                      f"{escape(problem.message)}")
    for row in status.rows(layout, part.manifest, spec.tvm_target):
        if row.note.startswith("tuned for "):
            console.print(f"note: {row.workload}: {escape(row.note)}")
    verdict = "[red]problems[/red]" if problems else "[green]ok[/green]"
    console.print(f"{args.model}: checked {checked} record file(s): {len(problems)} "
                  f"with problems - {verdict}")
    return 1 if problems else 0
