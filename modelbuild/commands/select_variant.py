"""`python -m modelbuild select`: make one sampled variant the active record."""

from __future__ import annotations

from ..schedules import variants
from .output import console
from .workspace import model_layout, project_of


def run(args) -> int:
    project = project_of(args)
    layout = model_layout(project, args.model)
    k = None if args.variant == "default" else int(args.variant)
    path = variants.select(layout, args.workload, k)
    if k is None:
        console.print(f"{args.workload}: no active record; builds with TVM's default schedule")
    else:
        console.print(f"{args.workload}: variant {k} is now {path}")
    return 0
